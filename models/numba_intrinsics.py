"""LLVM-level helpers for the anchor kernels (models/panel_kernels.py, models/vnni_products.py,
models/word_products.py) that numba has no name for, and numba's carray beside them. Imported
only where numba is installed.

- `stack_float32(n)`: n float32 on the stack of the calling kernel. Accumulators there are
  local memory that nothing else can alias, so LLVM keeps them in vector registers across
  the loop that updates them; the same arrays from np.empty live on the heap and are read and
  written back at every step. LLVM does still copy each register to its slot once per
  dimension (16 stores by eight rows), at no measurable cost: unrolled by two or four
  dimensions, with a half or a quarter of the stores, the eights ran 0.98-1.08x as fast on
  one panel (128 rows, float32 and int8 panels, Intel Xeon with AMX, load 0.4-1.0).
- `as_float32(value)`: a bfloat16, given as its uint16 bits, as the float32 of the same value
  (the bits become the top half), an int8 as its float32, or a float32 as itself, so one
  kernel serves every panel dtype.
  numba's own `<<` on a run-time amount tests the amount on every element: the anchor kernel
  ran at 0.54-0.86x the speed with it (one script, 11 to 128 rows at M = 10k).
- `stack_int32(n)`: the same for int32 sums.
- `dot_bytes(sums, at, panels, offset, word)`: AVX-512 VNNI's vpdpbusd on sixteen int32 sums
  at sums[at:at + 16]: each adds the four products of the unsigned bytes at
  panels' data + offset + 4 * lane with the four signed bytes of `word`. LLVM does not find
  the instruction in a numba loop by itself; compiled only where the CPU has it.
- `madd_words(sums, at, panels, offset, word)`: AVX2's vpmaddwd on eight int32 sums at
  sums[at:at + 8]: each adds the products of two signed bytes at panels' data + offset + 2 *
  lane, widened to int16, with the two int16 halves of `word`. Compiled only where the CPU has
  AVX2.
- `prefetch(array, offset)`: prefetcht1 of the line at byte `offset` of `array`, which numba
  cannot ask for; `read_ahead(array, at, size)` asks so for the `size` bytes (up to 128) AHEAD
  of byte `at`, within the array.
"""

from typing import Any

from llvmlite import binding, ir
from numba import carray, types
from numba.core import cgutils
from numba.extending import intrinsic, register_jitable

__all__ = [
    "as_float32",
    "carray",
    "dot_bytes",
    "madd_words",
    "prefetch",
    "read_ahead",
    "stack_float32",
    "stack_int32",
]
# How far ahead of its reads a kernel asks for the anchor panels (read_ahead): the CPU's own
# prefetcher stops at every 4 KB page, and a matrix read after an idle moment comes from memory.
# 2 KB ahead gained less, 8 KB as much (the kernels' modules give the figures). numba's cache
# checks only a kernel's own file: a kernel compiled before a change here keeps the old value
# until its cache is cleared.
AHEAD = 4096


def _stack_slots(element: Any) -> Any:
    """The typing of stack_float32 and stack_int32: `count` (a literal int) slots of
    `element` in the caller's stack frame, and a pointer to them."""

    def typing(typingctx: Any, count: Any) -> Any:
        if not isinstance(count, types.IntegerLiteral):
            return None
        size = count.literal_value

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            return cgutils.alloca_once(builder, context.get_value_type(element), size=size)

        return types.CPointer(element)(count), codegen

    return typing


@intrinsic
def stack_float32(typingctx: Any, count: Any) -> Any:
    """A pointer to `count` (a literal int) float32 slots in the caller's stack frame."""
    return _stack_slots(types.float32)(typingctx, count)


@intrinsic
def stack_int32(typingctx: Any, count: Any) -> Any:
    """A pointer to `count` (a literal int) int32 slots in the caller's stack frame."""
    return _stack_slots(types.int32)(typingctx, count)


@intrinsic
def dot_bytes(typingctx: Any, sums: Any, at: Any, panels: Any, offset: Any, word: Any) -> Any:
    """sums[at:at + 16] += per lane the dot product of 4 unsigned bytes of `panels` (an
    array, read at byte `offset`) with the 4 signed bytes of the int32 `word`."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        sums_pointer, at_index, array, byte_offset, packed = args
        lanes = ir.VectorType(ir.IntType(32), 16)
        where = builder.bitcast(builder.gep(sums_pointer, [at_index]), lanes.as_pointer())
        data = context.make_array(signature.args[2])(context, builder, array).data
        bytes_at = builder.gep(builder.bitcast(data, ir.IntType(8).as_pointer()), [byte_offset])
        values = builder.load(builder.bitcast(bytes_at, lanes.as_pointer()), align=1)
        first = builder.insert_element(ir.Constant(lanes, None), packed, ir.IntType(32)(0))
        spread = builder.shuffle_vector(
            first, ir.Constant(lanes, None), ir.Constant(lanes, [0] * 16)
        )
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(lanes, [lanes] * 3), "llvm.x86.avx512.vpdpbusd.512"
        )
        # The sums are int32 slots: aligned to 4 bytes, not to the vector's 64.
        total = builder.call(function, [builder.load(where, align=4), values, spread])
        builder.store(total, where, align=4)
        return context.get_dummy_value()

    return types.void(sums, at, panels, offset, word), codegen


@intrinsic
def madd_words(typingctx: Any, sums: Any, at: Any, panels: Any, offset: Any, word: Any) -> Any:
    """sums[at:at + 8] += per lane the dot product of 2 signed bytes of `panels` (an array,
    read at byte `offset`) with the 2 int16 halves of the int32 `word`."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        sums_pointer, at_index, array, byte_offset, packed = args
        lanes, halves = ir.VectorType(ir.IntType(32), 8), ir.VectorType(ir.IntType(16), 16)
        where = builder.bitcast(builder.gep(sums_pointer, [at_index]), lanes.as_pointer())
        data = context.make_array(signature.args[2])(context, builder, array).data
        bytes_at = builder.gep(builder.bitcast(data, ir.IntType(8).as_pointer()), [byte_offset])
        raw = ir.VectorType(ir.IntType(8), 16).as_pointer()
        values = builder.sext(builder.load(builder.bitcast(bytes_at, raw), align=1), halves)
        first = builder.insert_element(ir.Constant(lanes, None), packed, ir.IntType(32)(0))
        spread = builder.shuffle_vector(
            first, ir.Constant(lanes, None), ir.Constant(lanes, [0] * 8)
        )
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(lanes, [halves] * 2), "llvm.x86.avx2.pmadd.wd"
        )
        product = builder.call(function, [values, builder.bitcast(spread, halves)])
        # The sums are int32 slots: aligned to 4 bytes, not to the vector's 32.
        builder.store(builder.add(builder.load(where, align=4), product), where, align=4)
        return context.get_dummy_value()

    return types.void(sums, at, panels, offset, word), codegen


@intrinsic
def prefetch(typingctx: Any, array: Any, offset: Any) -> Any:
    """Ask for the cache line at byte `offset` of `array` (within it) to be brought into L2
    (prefetcht1), without waiting for it."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        array_value, byte_offset = args
        data = context.make_array(signature.args[0])(context, builder, array_value).data
        byte = ir.IntType(8).as_pointer()
        at = builder.gep(builder.bitcast(data, byte), [byte_offset])
        word = ir.IntType(32)
        # LLVM 17 made every pointer opaque, and the intrinsic's name says which it takes.
        name = "llvm.prefetch.p0" if binding.llvm_version_info >= (17,) else "llvm.prefetch.p0i8"
        kind = ir.FunctionType(ir.VoidType(), [byte, word, word, word])
        function = cgutils.get_or_insert_function(builder.module, kind, name)
        builder.call(function, [at, word(0), word(2), word(1)])  # a read, into L2, of data
        return context.get_dummy_value()

    return types.void(array, offset), codegen


@register_jitable
def read_ahead(array: Any, at: int, size: int) -> None:
    """Prefetch the `size` bytes (at most two lines) AHEAD of byte `at` of `array`, or its last
    line where that lies past it. Compiled into each kernel that calls it."""
    last = array.size * array.itemsize - 64
    prefetch(array, min(at + AHEAD, last))
    if size > 64:
        prefetch(array, min(at + AHEAD + 64, last))


@intrinsic
def as_float32(typingctx: Any, value: Any) -> Any:
    """float32 of a float32, of an int8, or of a bfloat16's uint16 bits."""
    if value == types.float32:

        def same(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            return args[0]

        return types.float32(value), same
    if value == types.int8:

        def exact(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            return builder.sitofp(args[0], context.get_value_type(types.float32))

        return types.float32(value), exact
    if value != types.uint16:
        return None

    def widen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        word = context.get_value_type(types.uint32)
        bits = builder.shl(builder.zext(args[0], word), word(16))
        return builder.bitcast(bits, context.get_value_type(types.float32))

    return types.float32(value), widen

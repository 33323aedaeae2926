"""The CPU as Linux reports it, reduced to what decides how fast each encoder backend runs.

A VM's CPU can carry a generic name: two 2-core KVM guests both called "Intel(R) Xeon(R)
Processor", family 6 model 207, one with AVX512-BF16 and one without. Without it torch
emulates bf16 and `torch-bf16` encoded at 0.28-0.50x torch fp32 (docs/benchmarks.md, fifteenth
session), so anything chosen by measuring speed must name the instruction sets too.
"""

import platform
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")

# The instruction sets that change which backend is fastest: vector width, int8 dot products
# (VNNI: OpenVINO's and ONNX Runtime's int8 paths), bf16 and fp16 arithmetic, AMX tiles.
INFERENCE_FLAGS = frozenset(
    {
        "avx2",
        "fma",
        "avx512f",
        "avx512_vnni",
        "avx_vnni",
        "avx512_bf16",
        "avx512_fp16",
        "amx_tile",
        "amx_bf16",
        "amx_int8",
    }
)


def _fields(cpuinfo: Path) -> dict[str, str]:
    """The first processor's "name : value" lines; empty where the file cannot be read."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # every processor repeats the first one's identity
        name, _, value = line.partition(":")
        fields[name.strip()] = value.strip()
    return fields


def _vendor(fields: dict[str, str]) -> str:
    return fields.get("vendor_id", "")


def _flags(fields: dict[str, str]) -> frozenset[str]:
    return frozenset(fields.get("flags", "").split())


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """Every flag Linux lists for the CPU (none where /proc/cpuinfo cannot be read)."""
    return _flags(_fields(cpuinfo))


def cpu_has_amx(cpuinfo: Path = CPUINFO) -> bool:
    """Whether the CPU multiplies bf16 in AMX tiles (False where that cannot be read)."""
    return "amx_bf16" in cpu_flags(cpuinfo)


def cpu_vendor(cpuinfo: Path = CPUINFO) -> str:
    """The vendor as Linux reports it, such as GenuineIntel or AuthenticAMD ("" where it cannot
    be read): the same instruction set can run at other speeds on the two vendors' cores."""
    return _vendor(_fields(cpuinfo))


def cpu_has_bf16(cpuinfo: Path = CPUINFO) -> bool:
    """Whether the CPU does bf16 arithmetic itself (AVX512-BF16 or AMX); torch emulates it
    elsewhere."""
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags(cpuinfo))


def cpu_has_vnni(cpuinfo: Path = CPUINFO) -> bool:
    """Whether the CPU has int8 dot-product instructions (AVX512-VNNI, AVX-VNNI or AMX-INT8);
    without them int8 products run on AVX2 pair sums, which saturate and round otherwise."""
    return bool({"avx512_vnni", "avx_vnni", "amx_int8"} & cpu_flags(cpuinfo))


def cpu_identity(cpuinfo: Path = CPUINFO) -> dict[str, str | list[str]]:
    """Vendor, name, family, model and the inference instruction sets the CPU has: equal for
    two machines whose backends should rank alike."""
    fields = _fields(cpuinfo)
    return {
        "vendor": _vendor(fields),
        "name": fields.get("model name") or platform.processor() or platform.machine(),
        "family": fields.get("cpu family", ""),
        "model": fields.get("model", ""),
        "flags": sorted(INFERENCE_FLAGS & _flags(fields)),
    }

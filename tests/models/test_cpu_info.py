"""The CPU facts that key `auto`'s cached choice and pick OpenVINO's precision, read from
/proc/cpuinfo text."""

from pathlib import Path

import pytest

from models.cpu_info import (
    cpu_flags,
    cpu_has_amx,
    cpu_has_bf16,
    cpu_has_vnni,
    cpu_identity,
    cpu_vendor,
)
from models.openvino_runner import Graph, runs_in_bf16

XEON = "Intel(R) Xeon(R) Processor"


def cpuinfo(
    tmp_path: Path,
    flags: str,
    *,
    name: str = XEON,
    model: str = "207",
    vendor: str = "GenuineIntel",
) -> Path:
    """Two processors, as Linux lists them; the second's lines must not leak into the first's."""
    first = (
        f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: 6\nmodel\t\t: {model}\n"
        f"model name\t: {name}\n"
    )
    second = (
        "processor\t: 1\nvendor_id\t: other\nmodel\t\t: 1\nmodel name\t: other\n"
        "flags\t\t: amx_bf16\n"
    )
    path = tmp_path / f"cpuinfo-{len(list(tmp_path.iterdir()))}"
    path.write_text(f"{first}flags\t\t: {flags}\nbugs\t\t: amx_bf16\n\n{second}", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("flags", "has_amx"),
    [
        ("fpu avx512f avx512_bf16 amx_bf16 amx_tile amx_int8", True),
        ("fpu avx512f avx512_bf16", False),
    ],
)
def test_amx_is_read_from_the_cpu_flags(tmp_path: Path, flags: str, has_amx: bool) -> None:
    assert cpu_has_amx(cpuinfo(tmp_path, flags)) is has_amx
    assert cpu_has_amx(tmp_path / "missing") is False


@pytest.mark.parametrize(
    ("flags", "has_bf16"),
    [("fpu avx512f avx512_bf16", True), ("fpu amx_bf16 amx_tile", True), ("fpu avx512f", False)],
)
def test_bf16_arithmetic_is_read_from_the_cpu_flags(
    tmp_path: Path, flags: str, has_bf16: bool
) -> None:
    assert cpu_has_bf16(cpuinfo(tmp_path, flags)) is has_bf16


@pytest.mark.parametrize(
    ("flags", "has_vnni"),
    [
        ("fpu avx2 avx512f avx512_vnni", True),
        ("fpu avx2 avx_vnni", True),
        ("fpu amx_tile amx_int8", True),
        ("fpu avx2 fma", False),
    ],
)
def test_int8_dot_products_are_read_from_the_cpu_flags(
    tmp_path: Path, flags: str, has_vnni: bool
) -> None:
    assert cpu_has_vnni(cpuinfo(tmp_path, flags)) is has_vnni
    assert cpu_has_vnni(tmp_path / "missing") is False


@pytest.mark.parametrize(
    ("vendor", "flags", "bf16_graphs"),
    [
        ("GenuineIntel", "avx512f avx512_bf16 amx_bf16 amx_tile", {"fp32", "int8-weights"}),
        ("GenuineIntel", "avx512f avx512_bf16", set()),
        ("AuthenticAMD", "avx512f avx512_bf16", {"fp32"}),
        ("AuthenticAMD", "avx2 fma", set()),
        ("GenuineIntel", "avx2 fma", set()),
    ],
)
def test_openvino_runs_in_bf16_where_it_was_measured_to_pay(
    tmp_path: Path, vendor: str, flags: str, bf16_graphs: set[str]
) -> None:
    path = cpuinfo(tmp_path, flags, vendor=vendor)
    assert cpu_vendor(path) == vendor
    graphs: tuple[Graph, ...] = ("fp32", "int8-weights", "int8-static")
    assert {graph for graph in graphs if runs_in_bf16(graph, cpuinfo=path)} == bf16_graphs
    assert runs_in_bf16("fp32", cpuinfo=tmp_path / "missing") is False


def test_the_same_name_with_other_instruction_sets_is_another_cpu(tmp_path: Path) -> None:
    # Both seen as 2-core KVM guests: model 207 with and without AVX512-BF16.
    with_bf16 = cpuinfo(tmp_path, "fpu avx2 fma avx512f avx512_vnni avx512_bf16 avx512_fp16")
    without = cpuinfo(tmp_path, "fpu avx2 fma avx512f avx512_vnni")
    assert cpu_identity(with_bf16)["name"] == cpu_identity(without)["name"] == XEON
    assert cpu_identity(with_bf16) != cpu_identity(without)
    assert cpu_identity(without) == {
        "vendor": "GenuineIntel",
        "name": XEON,
        "family": "6",
        "model": "207",
        "flags": ["avx2", "avx512_vnni", "avx512f", "fma"],
    }


def test_flags_that_do_not_rank_backends_leave_the_identity_alone(tmp_path: Path) -> None:
    # A host's microcode or hypervisor flags may differ between machines that run alike.
    plain = cpuinfo(tmp_path, "fpu avx2 fma avx512f")
    noisy = cpuinfo(tmp_path, "fpu hypervisor avx2 fma md_clear avx512f arch_capabilities")
    assert cpu_identity(plain) == cpu_identity(noisy)
    assert "hypervisor" in cpu_flags(noisy)
    other_model = cpuinfo(tmp_path, "fpu avx2 fma avx512f", model="143")
    assert cpu_identity(plain) != cpu_identity(other_model)


def test_an_unreadable_cpuinfo_still_names_the_machine(tmp_path: Path) -> None:
    identity = cpu_identity(tmp_path / "missing")
    assert identity["name"] and identity["flags"] == []
    assert cpu_flags(tmp_path / "missing") == frozenset()

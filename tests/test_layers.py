"""The package layers, checked on the source: every import points down or sideways-allowed.

    rankserve_client/    the Python client: imports no other layer, and only httpx and the
                         standard library (it talks to the service over HTTP alone)
    cli/, bench/         top: may import everything below (not each other)
    service/  worker/    beside each other, never importing each other
    core/                settings, Redis keys, store, registry, jobs, loaders
    models/              pure ML, imports no other layer

Every import counts: module level, inside functions, under TYPE_CHECKING, relative ones
(resolved), and `importlib.import_module("...")` / `__import__("...")` with a literal name.
Nothing under the layers may import tests/.
"""

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# Layer -> the project packages it may import (itself included).
ALLOWED: dict[str, frozenset[str]] = {
    "models": frozenset({"models"}),
    "core": frozenset({"models", "core"}),
    "service": frozenset({"models", "core", "service"}),
    "worker": frozenset({"models", "core", "worker"}),
    "cli": frozenset({"models", "core", "service", "worker", "cli"}),
    "bench": frozenset({"models", "core", "service", "worker", "bench"}),
    # Beside everything, not above it: no layer imports it, and it imports none of them.
    "rankserve_client": frozenset({"rankserve_client"}),
}
# What the client may import besides the standard library.
CLIENT_DEPENDENCIES = frozenset({"httpx"})
PROJECT_PACKAGES = frozenset(ALLOWED) | {"tests"}
DYNAMIC_IMPORTERS = frozenset({"import_module", "__import__"})


def _module_name(root: Path, path: Path) -> tuple[str, bool]:
    """("core.jobs", False) for core/jobs.py; ("core", True) for core/__init__.py."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _resolve(name: str, level: int, module: str, is_package: bool) -> str:
    """The absolute name of `from <level dots><name> import ...` inside `module`."""
    if level == 0:
        return name
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (level - 1)] if level > 1 else package
    return ".".join([*base, name] if name else base)


def imports_of(root: Path, path: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, wherever it stands."""
    module, is_package = _module_name(root, path)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            yield node.lineno, _resolve(node.module or "", node.level, module, is_package)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            first = node.args[0]
            if (
                called in DYNAMIC_IMPORTERS
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                name = first.value
                level = len(name) - len(name.lstrip("."))
                yield node.lineno, _resolve(name[level:], level, module, is_package)


def layer_violations(root: Path) -> list[str]:
    """One `path:line: <layer> imports <module>` per import that breaks the layering."""
    found = []
    for layer, allowed in ALLOWED.items():
        folder = root / layer
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*.py")):
            for line, name in sorted(imports_of(root, path)):
                target = name.split(".")[0]
                if target in PROJECT_PACKAGES and target not in allowed:
                    where = path.relative_to(root).as_posix()
                    found.append(f"{where}:{line}: {layer} imports {name}")
    return found


def test_every_layer_is_present_and_parsed():
    for layer in ALLOWED:
        files = list((REPO_ROOT / layer).rglob("*.py"))
        assert files, f"{layer}/ has no Python files under {REPO_ROOT}"
    assert any(imports_of(REPO_ROOT, REPO_ROOT / "core" / "registry.py"))


def test_no_layer_imports_a_layer_above_or_beside_it():
    violations = layer_violations(REPO_ROOT)
    assert not violations, "layering broken:\n" + "\n".join(violations)


def test_the_client_needs_only_httpx_and_the_standard_library():
    folder = REPO_ROOT / "rankserve_client"
    outside = {
        f"{path.relative_to(REPO_ROOT).as_posix()}:{line}: {name}"
        for path in sorted(folder.rglob("*.py"))
        for line, name in imports_of(REPO_ROOT, path)
        if (top := name.split(".")[0]) not in sys.stdlib_module_names
        and top not in CLIENT_DEPENDENCIES
        and top != "rankserve_client"
    }
    assert not outside, "the client imports more than httpx:\n" + "\n".join(sorted(outside))


def _write(root: Path, relative: str, source: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)


def test_the_checker_flags_every_kind_of_forbidden_import(tmp_path: Path):
    _write(
        tmp_path,
        "models/x.py",
        "import numpy\n"
        "import models.y\n"
        "import service.app\n"
        "def late():\n"
        "    from cli.main import app\n"
        "    importlib.import_module('core.settings')\n"
        "    return __import__('tests.conftest')\n",
    )
    _write(tmp_path, "core/__init__.py", "from .registry import BundleStore\n")
    _write(tmp_path, "core/sub/deep.py", "from .. import jobs\nfrom ..jobs import submit\n")
    _write(tmp_path, "worker/run.py", "from service.swap import load_bundle\n")
    _write(tmp_path, "service/app.py", "if TYPE_CHECKING:\n    import worker.runner\n")
    _write(tmp_path, "cli/main.py", "import service.app, worker.runner, models\n")
    _write(tmp_path, "rankserve_client/sync.py", "import httpx\nfrom service import schemas\n")
    _write(tmp_path, "service/client_use.py", "import rankserve_client\n")
    assert layer_violations(tmp_path) == [
        "models/x.py:3: models imports service.app",
        "models/x.py:5: models imports cli.main",
        "models/x.py:6: models imports core.settings",
        "models/x.py:7: models imports tests.conftest",
        "service/app.py:2: service imports worker.runner",
        "service/client_use.py:1: service imports rankserve_client",
        "worker/run.py:1: worker imports service.swap",
        "rankserve_client/sync.py:2: rankserve_client imports service",
    ]


@pytest.mark.parametrize(
    ("module", "is_package", "name", "level", "expected"),
    [
        ("core.jobs", False, "registry", 1, "core.registry"),
        ("core", True, "registry", 1, "core.registry"),
        ("service.corpus.follower", False, "engine", 2, "service.engine"),
        ("service.corpus.follower", False, "", 1, "service.corpus"),
        ("models.x", False, "numpy", 0, "numpy"),
    ],
)
def test_relative_imports_resolve_like_python(module, is_package, name, level, expected):
    assert _resolve(name, level, module, is_package) == expected

"""Helm's Go library, called in a child process of its own (tests/deploy/test_helm.py).

In pytest's own process the first Helm call killed the whole run with SIGSEGV when it came
after tests/core/test_backend_choice.py had measured every encoder backend (with
`openvino-int8` among them); either file alone passed, and so did a Helm call after loading and
running the OpenVINO and ONNX Runtime encoders by hand. Go's runtime shares a process's signal
handling with whatever threads the other native libraries left, which is the likely culprit;
the cause was not pinned down. A fresh interpreter that imports only helm-python keeps the Go
runtime apart from them, at the cost of one process start per module.
"""

import functools
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any


class ValuesRejectedError(Exception):
    """The chart's schema refused the values (helm-python's HelmValuesError, in the child)."""


class RenderFailedError(Exception):
    """A template failed (helm-python's HelmRenderError, in the child)."""


def _call(call: str, chart: str, values: dict[str, Any]) -> tuple[str, Any]:
    import helm_python as helm
    from helm_python.errors import HelmRenderError, HelmValuesError

    try:
        if call == "lint":
            return "ok", helm.lint(chart, strict=True)
        with helm.Chart.load(Path(chart)) as loaded:
            if call == "validate":
                loaded.validate_schema(values)
                return "ok", None
            return "ok", loaded.render(values, name="rs", namespace="search")
    except HelmValuesError as error:
        return "rejected", str(error)
    except HelmRenderError as error:
        return "failed", str(error)


@functools.cache
def _child() -> ProcessPoolExecutor:
    return ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))


def helm(call: str, chart: Path, values: dict[str, Any] | None = None) -> Any:
    """`call` ("render", "validate" or "lint") on `chart`, run in the child."""
    status, result = _child().submit(_call, call, str(chart), values or {}).result()
    if status == "rejected":
        raise ValuesRejectedError(result)
    if status == "failed":
        raise RenderFailedError(result)
    return result

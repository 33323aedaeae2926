"""The console script limits OpenMP's spin before torch loads, unless the environment sets it."""

import os
import subprocess
import sys

from core.openmp_wait import SPIN_COUNT

# Importing the package runs cli/__init__.py, before any subcommand module (and torch) loads.
PROBE = "import os, sys, cli; print('torch' in sys.modules, os.environ.get('GOMP_SPINCOUNT'))"


def spin_count_seen(environment: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=environment, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_the_cli_sets_the_spin_count_before_torch_loads() -> None:
    environment = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    assert spin_count_seen(environment) == f"False {SPIN_COUNT}"


def test_a_spin_count_from_the_environment_is_kept() -> None:
    environment = {**os.environ, "GOMP_SPINCOUNT": "300000"}
    assert spin_count_seen(environment) == "False 300000"

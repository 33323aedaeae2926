"""Benchmarks: each prints ratios against a baseline measured in the same run."""

from core.openmp_wait import limit_openmp_spin

limit_openmp_spin()  # as the served processes run (cli/__init__.py), before torch loads

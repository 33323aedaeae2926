"""The `rankserve` command line: one module per subcommand."""

from core.openmp_wait import limit_openmp_spin

limit_openmp_spin()  # before any subcommand module imports torch

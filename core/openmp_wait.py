"""How long torch's idle OpenMP workers spin before they sleep: set before torch loads.

libgomp, the OpenMP runtime of torch's CPU wheels, lets a worker busy-wait after each parallel
region for GOMP_SPINCOUNT iterations (300,000 by default) before it sleeps, and reads the
count once, when torch loads. Right after an encode its workers then hold the core that the
spare-core helper (models/spare_core.py) needs for the rank part: one pair's /similarity at
M = 100k ranked its two texts in 14.4 ms with the helper and 14.3 without it, right after an
encode, against 9.1 ms with it after a 20 ms pause (a script, AMD EPYC Zen 3, load 1.2). With
10,000 the helper's half came back right after an encode (11.1 and 9.4 ms, against 17.6 and
14.9 without the helper), and `bench.scoring` measured one pair's rank part at 12.8 instead of
18.3 ms at M = 100k and 1.38 instead of 1.95 ms at M = 10k. The encoder's own speed did not
move beyond this machine's noise (three alternations, single texts and batches of 16).
OMP_WAIT_POLICY=PASSIVE, which never spins, cost single texts 30 % (docs/benchmarks.md).
"""

import os

SPIN_COUNT = "10000"


def limit_openmp_spin() -> None:
    """GOMP_SPINCOUNT for this process and its children, unless the environment sets it.
    Only a call before torch's first import counts: the console script and the benchmarks
    make it first thing."""
    os.environ.setdefault("GOMP_SPINCOUNT", SPIN_COUNT)

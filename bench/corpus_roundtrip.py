"""Round trip of N synthetic documents through `rankserve corpus import` and `export`, run as a
user runs them (one process per command), with each command's wall time and peak RSS.

    nice -n 19 .venv/bin/python -m bench.corpus_roundtrip --documents 1000000

1. write N synthetic documents (unicode texts, every kind of metadata value) to a .jsonl.gz;
2. import them into a fresh key prefix A, export A;
3. drop A, import the export into a fresh prefix B ("import back"), import it again
   (idempotent: nothing written), export B;
4. compare, line by line and streaming: the source and both exports hold identical ids, texts
   and metadata, and the two exports are byte-identical once decompressed.

Peak RSS is the child's own (os.wait4), so it is the command's memory, not this script's. The
first step imports an empty file: its time and memory are the CLI's start (the interpreter
and its imports), which every other step includes.
The key prefixes are `rankserve-bench-<random>`, deleted at the end; nothing else is touched.
No model is loaded and nothing is encoded: no replica follows these prefixes.
"""

import argparse
import gzip
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import redis

from core.redis_keys import RedisKeys
from core.settings import REPO_ROOT, Settings

_WORDS = [
    "river", "market", "guitar", "snow", "kitchen", "budget", "summer", "museum", "village",
    "chemistry", "Berlin", "tide", "Grüße", "世界", "café", "naïve", "—", "“quoted”", "tab\tand",
    "backslash\\", "🙂",
]  # fmt: skip


@dataclass
class Step:
    name: str
    wall_s: float
    peak_rss_mb: float
    output: str


def synthetic(path: Path, count: int, seed: int = 0) -> None:
    """`count` documents in id order: 8-30 words of text, five metadata values of each type."""
    rng = random.Random(seed)
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for i in range(count):
            text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 30)))
            metadata = {
                "n": i,
                "score": round(rng.uniform(-1e6, 1e6), 6),
                "flag": rng.random() < 0.5,
                "missing": None,
                "tag": f"t{rng.randrange(100)}",
            }
            line = {"id": f"doc-{i:09d}", "text": text, "metadata": metadata}
            handle.write(json.dumps(line, ensure_ascii=False) + "\n")


def run(name: str, prefix: str, *args: str) -> Step:
    env = {**os.environ, "RANKSERVE_REDIS_PREFIX": prefix}
    command = [sys.executable, "-m", "cli.main", "corpus", *args]
    start = time.perf_counter()
    child = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{name} failed ({child.returncode}): {output}")
    step = Step(name, round(wall, 2), round(usage.ru_maxrss / 1024, 1), output.strip())
    print(f"{name:<22} {step.wall_s:>9.1f} s {step.peak_rss_mb:>9.1f} MB   {step.output}")
    return step


def drop(client: redis.Redis, prefix: str) -> None:
    for key in client.scan_iter(match=RedisKeys(prefix).pattern, count=10_000):
        client.unlink(key)


def compare(source: Path, exported: Path) -> int:
    """The number of documents, once every line parsed equal; raises at the first difference."""
    count = 0
    with (
        gzip.open(source, "rt", encoding="utf-8") as a,
        gzip.open(exported, "rt", encoding="utf-8") as b,
    ):
        for left, right in zip(a, b, strict=True):
            count += 1
            if json.loads(left) != json.loads(right):
                raise SystemExit(f"line {count} differs:\n{left}{right}")
    return count


def digest(path: Path) -> str:
    sha = hashlib.sha256()
    with gzip.open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            sha.update(chunk)
    return sha.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=10_000)
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary one")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rankserve-roundtrip-", dir=args.workdir) as work:
        roundtrip(args.documents, Path(work), args.json)


def roundtrip(documents: int, workdir: Path, json_path: Path | None) -> None:
    source, first, second = (workdir / f"{n}.jsonl.gz" for n in ("source", "a", "b"))
    tag = uuid.uuid4().hex[:8]
    prefix_a, prefix_b = f"rankserve-bench-{tag}-a", f"rankserve-bench-{tag}-b"
    client = redis.Redis.from_url(Settings().redis_url)
    start = time.perf_counter()
    synthetic(source, documents)
    print(f"{documents} synthetic documents in {time.perf_counter() - start:.1f} s")
    print(f"{'step':<22} {'wall':>11} {'peak RSS':>12}")
    empty = workdir / "empty.jsonl"
    empty.touch()
    try:
        # The interpreter with the CLI's imports (torch among them): what every step starts at.
        steps = [
            run("baseline (empty file)", prefix_a, "import", str(empty)),
            run("import", prefix_a, "import", str(source)),
            run("export", prefix_a, "export", str(first)),
        ]
        drop(client, prefix_a)
        steps += [
            run("import back", prefix_b, "import", str(first)),
            run("import again (no-op)", prefix_b, "import", str(first)),
            run("export again", prefix_b, "export", str(second)),
        ]
    finally:
        drop(client, prefix_a)
        drop(client, prefix_b)
        client.close()
    identical = compare(source, first) == compare(source, second) == documents
    same_bytes = digest(first) == digest(second)
    print(f"ids, texts and metadata identical over {documents} documents: {identical}")
    print(f"the two exports are byte-identical (decompressed): {same_bytes}")
    if json_path is not None:
        figures = {
            "documents": documents,
            "steps": [asdict(step) for step in steps],
            "identical": identical,
            "byte_identical_exports": same_bytes,
            "file_bytes": {p.name: p.stat().st_size for p in (source, first, second)},
        }
        json_path.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()

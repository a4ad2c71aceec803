"""Stable hashes: a job's shard and its jitter offset never move between processes (the
pinned values and the spread are checked in tests/unit/test_hashing.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from tickwork.core import hashing


def test_values_are_the_same_in_another_process_with_another_hash_seed() -> None:
    script = (
        "from tickwork.core import hashing;"
        "print([(hashing.shard_of('t', f'job-{i}', 16), hashing.jitter_offset('t', f'job-{i}', 60))"
        " for i in range(50)])"
    )
    outputs = set()
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        outputs.add(done.stdout)
    expected = [
        (hashing.shard_of("t", f"job-{i}", 16), hashing.jitter_offset("t", f"job-{i}", 60))
        for i in range(50)
    ]
    assert outputs == {f"{expected}\n"}

"""Stable hashes of job identities.

Python's ``hash()`` is salted per process, so it cannot place a job on a shard or
give it a jitter offset: every process and every release must agree. BLAKE2b is in
the standard library, fast, and lets each use carry its own ``person`` so the shard
of a job and its jitter offset are independent of each other (with one hash, jobs of
shard 0 would all get offsets divisible by 4 when 16 shards meet a 60 s jitter).
"""

from __future__ import annotations

import hashlib
from typing import Final

SHARD_PURPOSE: Final = b"tickwork.shard"
JITTER_PURPOSE: Final = b"tickwork.jitter"


def job_key(tenant: str, name: str) -> str:
    """The identity every hash is taken over: ``tenant/name``."""
    return f"{tenant}/{name}"


def stable_hash(key: str, purpose: bytes) -> int:
    """An unsigned 64-bit hash of ``key``, stable across processes and releases."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8, person=purpose).digest()
    return int.from_bytes(digest, "big")


def shard_of(tenant: str, name: str, shard_count: int) -> int:
    """The shard that holds job ``tenant/name`` when there are ``shard_count`` shards."""
    if shard_count < 1:
        raise ValueError("shard_count must be at least 1")
    return stable_hash(job_key(tenant, name), SHARD_PURPOSE) % shard_count


def jitter_offset(tenant: str, name: str, jitter_seconds: int) -> int:
    """Seconds between a cron run's nominal time and when it becomes ready.

    ``H(tenant/name) mod jitterSeconds``; 0 when jitter is off.
    """
    if jitter_seconds <= 0:
        return 0
    return stable_hash(job_key(tenant, name), JITTER_PURPOSE) % jitter_seconds

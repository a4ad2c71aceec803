"""``python -m soak [--seconds 180] [--runs 6000] [--workers 4] [--seed N]``."""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import tempfile
import time
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path

# The private PostgreSQL and the proxy are the test suite's fault tools.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # platformdirs, on pgserver's import
    from faults.postgres import PostgresProcess

from soak import chaos, checks, cluster, load
from tickwork.core.shards import ShardMap
from tickwork.store import migrate

LEASE_SECONDS = 6.0


def _minute_after(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0) + timedelta(minutes=1)


async def soak(arguments: argparse.Namespace, folder: Path) -> bool:
    rng = random.Random(arguments.seed)
    postgres = PostgresProcess().init()
    postgres.start()
    try:
        url = postgres.url
        await migrate.migrate_all(ShardMap.from_dsns([url], cluster.SHARDS).shards)
        install = await cluster.build(folder, postgres, url, arguments.workers, LEASE_SECONDS)
        for role in install.roles.values():  # all at once, as a fresh install would
            role.start()
        watching = asyncio.Event()
        watcher = asyncio.create_task(cluster.watch(install, watching))
        work = load.Load(install.api_urls, random.Random(rng.random()))
        await work.create_jobs()
        cron_first = _minute_after(datetime.now(UTC))
        faults = chaos.Chaos(install, random.Random(rng.random()), LEASE_SECONDS)
        calm = asyncio.Event()
        started = time.monotonic()
        chaos_task = asyncio.create_task(faults.run(calm))
        await work.enqueue(arguments.runs, arguments.seconds * 0.7)
        remaining = arguments.seconds - (time.monotonic() - started)
        if remaining > 0:
            await asyncio.sleep(remaining)
        calm.set()
        await chaos_task  # every fault under way ends and heals itself
        cron_last = datetime.now(UTC).replace(second=0, microsecond=0)
        for link in install.links.values():
            link.heal()
        for role in install.roles.values():
            role.resume()
        report, figures = await checks.check(
            install, work.runs, (cron_first, cron_last), within=arguments.drain
        )
        watching.set()
        await watcher
        # Off the event loop: the proxies run on it, and must keep the links up.
        stopped = await asyncio.gather(*(asyncio.to_thread(r.stop) for r in install.roles.values()))
        codes = dict(zip(install.roles, stopped, strict=True))
        clean = [name for name, code in codes.items() if code == 0]
        report.add(
            "roles stopped cleanly by SIGTERM (exit 0)",
            f"{len(clean)}/{len(codes)}",
            len(clean) == len(codes),
        )
        for link in install.links.values():
            await link.close()
    finally:
        if postgres.running:
            postgres.stop("fast")
        postgres.destroy()

    kills = ", ".join(
        f"{k.split()[-1]} {n}" for k, n in sorted(faults.detail.items()) if "kill" in k
    )
    print(
        f"tickwork soak: seed {arguments.seed}, {arguments.seconds:g}s of faults,"
        f" {cluster.SHARDS} shards, 2 dispatchers, 2 schedulers, {arguments.workers} workers"
    )
    print(
        "faults: "
        + ", ".join(f"{name} x{count}" for name, count in sorted(faults.counts.items()))
        + (f" (kill -9: {kills})" if kills else "")
    )
    by_job: dict[str, int] = {}
    for job in work.runs.values():
        by_job[job] = by_job.get(job, 0) + 1
    print(
        f"runs: {len(work.runs)} enqueued ("
        + ", ".join(f"{job} {n}" for job, n in sorted(by_job.items()))
        + f"), {figures['cron runs']} cron runs; enqueue calls retried {work.retries}x"
    )
    print(
        f"attempts: {figures['attempts']} (lease expired {figures['lease expired']}),"
        f" completions refused as stale {figures['refused as stale']},"
        f" outcomes dropped on a lost lease {figures['dropped (lease lost)']}"
    )
    print("checked:")
    print(report.render())
    print("PASS" if report.ok else "FAIL")
    return report.ok


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m soak", description=__doc__)
    parser.add_argument("--seconds", type=float, default=180, help="how long faults go on")
    parser.add_argument("--runs", type=int, default=6000, help="runs to enqueue")
    parser.add_argument("--workers", type=int, default=4, help="worker processes")
    parser.add_argument("--seed", type=int, default=None, help="seed of the faults")
    parser.add_argument("--drain", type=float, default=180, help="seconds to let runs finish")
    parser.add_argument("--keep", action="store_true", help="keep the logs folder")
    arguments = parser.parse_args()
    if arguments.seed is None:
        arguments.seed = random.SystemRandom().randrange(1_000_000)
    folder = Path(tempfile.mkdtemp(prefix="tickwork-soak-"))
    try:
        ok = asyncio.run(soak(arguments, folder))
    finally:
        if arguments.keep:
            print(f"logs in {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    sys.exit(0 if ok else 1)


main()

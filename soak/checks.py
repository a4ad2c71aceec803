"""What the soak checks at the end, read from the store itself, the workers' records of
the answers they got, and the API."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson

from soak.cluster import SHARDS, TEAM_TOKEN, TENANT, Cluster
from soak.load import EXPECTED
from tickwork.core.shards import Shard, format_run_id
from tickwork.store import database

TERMINAL = frozenset({"succeeded", "dead", "cancelled", "discarded", "skipped"})
RUNS = "SELECT id, job, state, attempt, max_attempts, due_at FROM runs WHERE tenant = $1"
ATTEMPTS = (
    "SELECT a.run_id, a.attempt, a.outcome, a.result_state FROM run_attempts a"
    " JOIN runs r ON r.id = a.run_id WHERE r.tenant = $1"
)


@dataclass
class StoreView:
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    # run id -> attempt number -> (outcome, result state), every row of each
    attempts: dict[str, dict[int, list[tuple[str, str]]]] = field(default_factory=dict)


async def read_store(url: str) -> StoreView:
    view = StoreView()
    for number in range(SHARDS):
        conn = await database.connect(Shard(number, url))
        try:
            for row in await conn.fetch(RUNS, TENANT):
                view.runs[format_run_id(number, row["id"])] = dict(row)
            for row in await conn.fetch(ATTEMPTS, TENANT):
                run_id = format_run_id(number, row["run_id"])
                by_number = view.attempts.setdefault(run_id, {})
                by_number.setdefault(row["attempt"], []).append(
                    (row["outcome"], row["result_state"])
                )
        finally:
            await conn.close()
    return view


def relevant(view: StoreView, enqueued: dict[str, str], last_minute: datetime) -> list[str]:
    """The runs to check: every enqueued one, and the cron runs due up to the end of
    the faults (later ones are still to come)."""
    cron = [
        run_id
        for run_id, run in view.runs.items()
        if run["job"] == "tick" and run["due_at"] <= last_minute
    ]
    return [*enqueued, *cron]


async def wait_until_finished(
    url: str, enqueued: dict[str, str], last_minute: datetime, within: float
) -> StoreView:
    """Poll the store until every run to check is there and terminal."""
    deadline = time.monotonic() + within
    while True:
        view = await read_store(url)
        pending = [
            run_id
            for run_id in relevant(view, enqueued, last_minute)
            if run_id not in view.runs or view.runs[run_id]["state"] not in TERMINAL
        ]
        if not pending or time.monotonic() > deadline:
            return view
        await asyncio.sleep(1.0)


def worker_records(folder: Path) -> list[dict[str, Any]]:
    records = []
    for path in sorted(folder.glob("worker-*.results")):
        for line in path.read_bytes().splitlines():
            try:
                records.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue  # the last line of a worker killed while writing it
    return records


async def dlq_through_api(url: str) -> set[str]:
    found: set[str] = set()
    cursor = None
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {TEAM_TOKEN}"}, timeout=30
    ) as http:
        while True:
            params = {"limit": "500", **({"cursor": cursor} if cursor else {})}
            page = (await http.get("/v1/dlq", params=params)).raise_for_status().json()
            found |= {item["runId"] for item in page["items"]}
            cursor = page.get("nextCursor")
            if not cursor:
                return found


@dataclass
class Report:
    lines: list[tuple[str, str, bool]] = field(default_factory=list)

    def add(self, what: str, value: object, ok: bool) -> None:
        self.lines.append((what, str(value), ok))

    @property
    def ok(self) -> bool:
        return all(ok for _, _, ok in self.lines)

    def render(self) -> str:
        width = max(len(what) for what, _, _ in self.lines)
        return "\n".join(
            f"  {what:<{width}}  {value}{'' if ok else '   <-- VIOLATION'}"
            for what, value, ok in self.lines
        )


async def check(
    cluster: Cluster,
    enqueued: dict[str, str],
    cron_window: tuple[datetime, datetime],
    within: float,
) -> tuple[Report, dict[str, int]]:
    first, last = cron_window
    view = await wait_until_finished(cluster.database_url, enqueued, last, within)
    checked = relevant(view, enqueued, last)
    report = Report()
    lost = [r for r in checked if r not in view.runs or view.runs[r]["state"] not in TERMINAL]
    report.add(f"runs lost (of {len(checked)}: missing or unfinished)", len(lost), not lost)

    wrong = [
        run_id
        for run_id in checked
        if run_id in view.runs
        and view.runs[run_id]["state"] in TERMINAL
        and view.runs[run_id]["state"] != EXPECTED[view.runs[run_id]["job"]]
    ]
    report.add("runs in a wrong final state", len(wrong), not wrong)

    duplicate = 0
    for attempts in view.attempts.values():
        rows = [row for by_attempt in attempts.values() for row in by_attempt]
        duplicate += (
            sum(state in TERMINAL for _, state in rows) > 1
            or sum(outcome == "succeeded" for outcome, _ in rows) > 1
            or any(len(by_attempt) > 1 for by_attempt in attempts.values())
        )
    report.add("runs with duplicate terminal states", duplicate, duplicate == 0)

    records = worker_records(cluster.folder)
    accepted = [r for r in records if r["state"] is not None]
    stale = 0
    for record in accepted:
        rows = view.attempts.get(record["run"], {}).get(record["attempt"], [])
        stale += not rows or rows[0][0] != record["outcome"] or rows[0][1] != record["state"]
    report.add(f"stale completions accepted (of {len(accepted)} accepted)", stale, stale == 0)

    expected_dead = {r for r, job in enqueued.items() if EXPECTED[job] == "dead"}
    dead = {r for r, run in view.runs.items() if run["state"] == "dead"}
    short = [r for r in dead if enqueued.get(r) == "poison" and view.runs[r]["attempt"] != 3]
    api_dlq = await dlq_through_api(cluster.api_urls[0])
    exact = dead == expected_dead and api_dlq == dead and not short
    report.add(
        "DLQ exact (store = expected = API; poison after 3 attempts)",
        f"{len(dead)} dead, {len(expected_dead)} expected, API {len(api_dlq)}",
        exact,
    )

    minutes = []
    minute = first
    while minute <= last:
        minutes.append(minute)
        minute += timedelta(minutes=1)
    ticks = [run for run in view.runs.values() if run["job"] == "tick"]
    per_minute = [sum(run["due_at"] == m for run in ticks) for m in minutes]
    cron_ok = all(count == 1 for count in per_minute)
    report.add(
        "cron minutes run exactly once",
        f"{sum(c == 1 for c in per_minute)}/{len(minutes)}",
        cron_ok,
    )

    exits = [
        f"{role.name}: {exit}" for role in cluster.roles.values() for exit in role.exits_on_its_own
    ]
    report.add("roles that exited on their own", len(exits), not exits)
    alive = sum(role.alive for role in cluster.roles.values())
    report.add(
        "roles alive at the end", f"{alive}/{len(cluster.roles)}", alive == len(cluster.roles)
    )

    figures = {
        "attempts": sum(len(a) for a in view.attempts.values()),
        "lease expired": sum(
            outcome == "lease-expired"
            for a in view.attempts.values()
            for rows in a.values()
            for outcome, _ in rows
        ),
        "refused as stale": sum(r["problem"] == "stale-lease" for r in records),
        "dropped (lease lost)": sum(r["outcome"] == "dropped" for r in records),
        "cron runs": len(ticks),
    }
    if exits:
        for line in exits:
            print("   ", line)
    if lost or wrong:
        print("    lost:", lost[:10], "wrong:", [(r, view.runs[r]) for r in wrong[:10]])
    return report, figures

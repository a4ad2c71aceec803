"""The work of the soak: the jobs, and runs enqueued through the API in batches, each
with an idempotency key, retried through outages until every run is accepted."""

from __future__ import annotations

import asyncio
import itertools
import random
from dataclasses import dataclass, field
from typing import Any, Final

import httpx

from soak.cluster import TEAM_TOKEN

FAST_RETRY: Final = {"maxAttempts": 25, "baseSeconds": 0.2, "maxSeconds": 2}
JOBS: Final[dict[str, dict[str, Any]]] = {
    "fine": {"retry": FAST_RETRY},
    "slow": {"retry": FAST_RETRY},
    "poison": {"retry": {"maxAttempts": 3, "baseSeconds": 0.2, "maxSeconds": 1}},
    "fatal": {"retry": FAST_RETRY},
    # Every minute, each minute caught up after an outage, at the exact minute.
    "tick": {
        "retry": FAST_RETRY,
        "schedule": {"cron": "* * * * *", "jitterSeconds": 0, "missedRunPolicy": "run_all"},
    },
}
# The share of enqueued runs per job.
MIX: Final = {"fine": 0.80, "slow": 0.05, "poison": 0.10, "fatal": 0.05}
# Final states the jobs' runs must reach.
EXPECTED: Final = {
    "fine": "succeeded",
    "slow": "succeeded",
    "tick": "succeeded",
    "poison": "dead",
    "fatal": "dead",
}
BATCH: Final = 20


@dataclass
class Load:
    api_urls: list[str]
    rng: random.Random
    # run id -> job, for every run the API accepted.
    runs: dict[str, str] = field(default_factory=dict)
    retries: int = 0

    def client(self, url: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {TEAM_TOKEN}"}, timeout=10
        )

    async def _until_accepted(self, call: Any) -> httpx.Response:
        """Repeat a call (any dispatcher) until it gets a 2xx answer."""
        for attempt in itertools.count():
            url = self.api_urls[attempt % len(self.api_urls)]
            try:
                async with self.client(url) as http:
                    response: httpx.Response = await call(http)
                if response.status_code < 300:
                    return response
            except httpx.HTTPError:
                pass
            self.retries += 1
            await asyncio.sleep(min(2.0, 0.1 * 2 ** min(attempt, 5)))
        raise AssertionError("unreachable")

    async def create_jobs(self) -> None:
        for name, spec in JOBS.items():
            await self._until_accepted(
                lambda http, n=name, s=spec: http.put(f"/v1/jobs/{n}", json=s)
            )

    async def enqueue(self, total: int, seconds: float, lanes: int = 4) -> None:
        """Enqueue ``total`` runs evenly over ``seconds``, from ``lanes`` clients."""
        batches = [
            list(range(start, min(total, start + BATCH))) for start in range(0, total, BATCH)
        ]
        loop = asyncio.get_running_loop()
        started = loop.time()
        queue: asyncio.Queue[tuple[int, list[int]]] = asyncio.Queue()
        for number, batch in enumerate(batches):
            queue.put_nowait((number, batch))

        async def lane() -> None:
            while not queue.empty():
                number, batch = queue.get_nowait()
                due = started + seconds * number / max(1, len(batches))
                if due > loop.time():
                    await asyncio.sleep(due - loop.time())
                await self._batch(batch)

        await asyncio.gather(*(lane() for _ in range(lanes)))

    async def _batch(self, numbers: list[int]) -> None:
        job = self.rng.choices(list(MIX), list(MIX.values()))[0]
        items = []
        for number in numbers:
            item: dict[str, Any] = {"idempotencyKey": f"soak-{number}", "payload": {"n": number}}
            if self.rng.random() < 0.2:
                item["delaySeconds"] = self.rng.randint(1, 15)
            items.append(item)
        body = {"runs": items}
        response = await self._until_accepted(
            lambda http: http.post(f"/v1/jobs/{job}/runs:batch", json=body)
        )
        for item in response.json()["items"]:
            if "problem" in item:
                raise AssertionError(f"enqueue refused: {item['problem']}")
            self.runs[item["runId"]] = job

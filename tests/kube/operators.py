"""Running a Kopf operator in-process against the emulator, for tests.

Kopf's ``run_tasks`` treats every task created after the operator started as one of
its own and cancels it at exit ("hung tasks", after waiting up to 5 s). In a test the
event loop also runs the emulator's connections and the test's own tasks, so here only
tasks whose coroutine comes from Kopf count as the operator's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Collection, Iterator
from typing import Any

import kopf

from kube import emulator


class _NotKopf(Collection["asyncio.Task[Any]"]):
    """Every task whose coroutine is not Kopf's, as far as ``in`` is concerned."""

    def __contains__(self, task: object) -> bool:
        if not isinstance(task, asyncio.Task):
            return False
        code = getattr(task.get_coro(), "cr_code", None)
        return code is None or "/kopf/" not in code.co_filename.replace("\\", "/")

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter(())

    def __len__(self) -> int:
        return 0


def connect(registry: kopf.OperatorRegistry, kube: emulator.Emulator) -> None:
    """Register a login handler pointing Kopf at the emulator."""

    @kopf.on.login(registry=registry)
    def _login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=kube.url, insecure=True)


def quick_settings() -> kopf.OperatorSettings:
    """Settings a test operator wants: status-based bookkeeping, no CRD rescans, fast."""
    settings = kopf.OperatorSettings()
    settings.persistence.progress_storage = kopf.StatusProgressStorage()
    settings.persistence.diffbase_storage = kopf.StatusDiffBaseStorage()
    settings.scanning.disabled = True
    settings.networking.request_timeout = 5
    settings.watching.connect_timeout = 2
    settings.watching.server_timeout = 30
    settings.posting.level = 0
    return settings


@contextlib.asynccontextmanager
async def running(
    registry: kopf.OperatorRegistry,
    *,
    settings: kopf.OperatorSettings | None = None,
    namespaces: Collection[str] = ("default",),
    clusterwide: bool = False,
    memo: object | None = None,
    timeout: float = 10.0,  # noqa: ASYNC109  (bounds both start-up and shutdown)
) -> AsyncIterator[None]:
    """Run the operator of ``registry`` until the block ends, then stop it cleanly."""
    stop = asyncio.Event()
    ready = asyncio.Event()
    tasks = await kopf.spawn_tasks(
        registry=registry,
        settings=settings or quick_settings(),
        standalone=True,
        clusterwide=clusterwide,
        namespaces=() if clusterwide else namespaces,
        stop_flag=stop,
        ready_flag=ready,
        memo=memo,
    )
    runner = asyncio.create_task(kopf.run_tasks(tasks, ignored=_NotKopf()))
    try:
        async with asyncio.timeout(timeout):
            await ready.wait()
        yield
    finally:
        stop.set()
        async with asyncio.timeout(timeout):
            await runner

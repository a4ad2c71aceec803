"""Kopf instances side by side in one event loop.

``kopf.run_tasks`` ends by cancelling every task of the loop that it is not told to
ignore (its docstring: "there is no way to trace who spawned what"). The operator runs
two instances (the admission webhook on every replica, the resource handlers on the
leader only, started anew at each term) and tests run several operators in one loop,
so each instance must cancel its own tasks and nobody else's.

A task factory marks every task with the instance whose task created it: ``run`` sets
a context variable inside the instance's own task, and every task created from there
inherits it (a task starts with a copy of its creator's context). ``Ignored(instance)``
is then every task not marked as that instance's. Python 3.12's ``Task.get_context``
would make the factory unnecessary; 3.11 has no way to read a task's context.
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from collections.abc import Collection, Coroutine, Iterator
from typing import Any, Final

import kopf

_instance: Final[contextvars.ContextVar[object | None]] = contextvars.ContextVar(
    "tickwork_kopf_instance", default=None
)
_owners: Final[weakref.WeakKeyDictionary[asyncio.Future[Any], object]] = weakref.WeakKeyDictionary()
_MARK: Final = "_tickwork_marks_kopf_instances"


class Ignored(Collection["asyncio.Task[Any]"]):
    """Every task but ``instance``'s, for ``kopf.run_tasks(ignored=...)``."""

    def __init__(self, instance: object) -> None:
        self.instance = instance

    def __contains__(self, task: object) -> bool:
        return not isinstance(task, asyncio.Future) or _owners.get(task) is not self.instance

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter(())

    def __len__(self) -> int:
        return 0


def _install(loop: asyncio.AbstractEventLoop) -> None:
    previous = loop.get_task_factory()
    if getattr(previous, _MARK, False):
        return

    def factory(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **options: Any
    ) -> asyncio.Future[Any]:
        if previous is not None:
            task: asyncio.Future[Any] = previous(loop, coro, **options)
        else:
            task = asyncio.Task(coro, loop=loop, **options)
        owner = _instance.get()
        if owner is not None:
            _owners[task] = owner
        return task

    setattr(factory, _MARK, True)
    loop.set_task_factory(factory)  # type: ignore[arg-type]


async def run(
    instance: object,
    *,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    namespaces: Collection[str],
    stop_flag: asyncio.Event,
    ready_flag: asyncio.Event,
    memo: kopf.Memo,
) -> None:
    """One Kopf instance until ``stop_flag`` (or until it stops on its own). Run it as a
    task of its own: the mark is set in that task's context."""
    _install(asyncio.get_running_loop())
    _instance.set(instance)
    tasks = await kopf.spawn_tasks(
        registry=registry,
        settings=settings,
        standalone=True,  # one leader is chosen by the operator's Lease, not by peering
        clusterwide=not namespaces,
        namespaces=namespaces,
        stop_flag=stop_flag,
        ready_flag=ready_flag,
        memo=memo,
    )
    await kopf.run_tasks(tasks, ignored=Ignored(instance))

"""Process wiring shared by the role commands: build services, run until stopped."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any

import click

from tickwork.api.auth import Authenticator, FirstMatch
from tickwork.api.review_settings import ReviewSettings
from tickwork.api.services import Services
from tickwork.api.tokens_file import TokensFile
from tickwork.core.settings import ApiSettings
from tickwork.engine.installation import Installation
from tickwork.engine.metrics import Metrics


def api_services(
    engine: Installation,
    authenticator: Authenticator,
    metrics: Metrics,
    settings: ApiSettings | None = None,
) -> Services:
    return Services(
        engine=engine,
        authenticator=authenticator,
        metrics=metrics,
        settings=settings or ApiSettings(),
    )


@contextlib.asynccontextmanager
async def authenticator(
    method: str, tokens: Authenticator | None, reviews: ReviewSettings
) -> AsyncIterator[Authenticator]:
    """The dispatcher's authenticator: the tokens file, or Kubernetes (TokenReview and
    SubjectAccessReview) with the tokens file, when given, asked first."""
    if method == "tokens":
        assert tokens is not None
        yield tokens
        return
    try:
        from tickwork.api import kubernetes_auth
        from tickwork.coordination.kubeconfig import KubeconfigError
    except ModuleNotFoundError as error:
        raise click.ClickException(
            f"--auth kubernetes needs the kubernetes extra (missing module {error.name!r}): "
            "pip install 'tickwork[server,kubernetes]'"
        ) from error
    try:
        api = await kubernetes_auth.api_client()
    except KubeconfigError as error:
        raise click.ClickException(str(error)) from error
    try:
        reviewed = kubernetes_auth.KubernetesAuth(api, reviews)
        yield reviewed if tokens is None else FirstMatch([tokens, reviewed])
    finally:
        await api.close()


@contextlib.asynccontextmanager
async def reloading(
    tokens: TokensFile | None, engine: Installation, metrics: Metrics
) -> AsyncIterator[None]:
    """Watch the tokens file while the block runs: a change that loads wakes every
    long-poll (those of a removed token end with 401), and each change is counted."""
    if tokens is None:
        yield
        return

    def reloaded(loaded: bool) -> None:
        metrics.tokens_reloads.labels("loaded" if loaded else "failed").inc()
        if loaded:
            engine.dispatcher.wakeups.wake_all()

    tokens.on_reload(reloaded)
    watching = asyncio.create_task(tokens.watch(), name="tickwork-tokens-file")
    try:
        yield
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching


def run(main: Coroutine[Any, Any, None]) -> None:
    """Run a role's main coroutine, on uvloop where it is installed (it comes with
    uvicorn[standard] on Linux and macOS): the HTTP path is markedly faster on it."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[asyncio.Event]:
    """An event that SIGINT/SIGTERM set while the block runs; the handlers go with it."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    try:
        yield stop
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


async def run_until_stopped(
    stop: asyncio.Event, *tasks: Callable[[asyncio.Event], Coroutine[Any, Any, None]]
) -> None:
    """Run role loops until ``stop`` is set or one of them fails; then stop them all."""
    running: list[asyncio.Task[None]] = [asyncio.create_task(task(stop)) for task in tasks]
    stopper = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait([*running, stopper], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            error = task.exception()
            if task is not stopper and error is not None:
                raise error
    finally:
        stop.set()
        for task in running:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(task, 15)
        stopper.cancel()

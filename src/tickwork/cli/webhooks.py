"""The HTTP side of notification delivery (engine.notifications makes no request)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import httpx

from tickwork.engine.dispatch import Dispatcher
from tickwork.engine.notifications import Deliveries, Request


class WebhookPoster:
    """Posts notifications with one pooled client; each request has its own timeout."""

    def __init__(self) -> None:
        # No redirects: a signed body goes to the URL the team configured, nowhere else.
        self.client = httpx.AsyncClient(follow_redirects=False)

    async def __call__(self, request: Request) -> int:
        answer = await self.client.post(
            request.url,
            content=request.body,
            headers=request.headers,
            timeout=request.timeout_seconds,
        )
        return answer.status_code

    async def aclose(self) -> None:
        await self.client.aclose()


@contextlib.asynccontextmanager
async def delivery_loop(
    dispatcher: Dispatcher,
) -> AsyncIterator[Callable[[asyncio.Event], Coroutine[Any, Any, None]]]:
    """The loop that delivers the notifications of every shard (run by each scheduler
    and by ``tickwork dev``: the leases keep each delivery to one of them at a time)."""
    poster = WebhookPoster()
    try:
        yield Deliveries(dispatcher.database, dispatcher, poster).run
    finally:
        await poster.aclose()

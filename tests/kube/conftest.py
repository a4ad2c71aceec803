"""Fixtures of the emulator's own tests (the ``kube`` fixture comes from ``fixtures.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from kube import emulator, samples


@pytest.fixture
async def http(kube: emulator.Emulator) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(kube.url, timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


@pytest.fixture
async def widgets(kube: emulator.Emulator) -> emulator.Emulator:
    """The emulator with the toy ``Widget`` CRD served."""
    await kube.create(samples.WIDGET_CRD)
    return kube

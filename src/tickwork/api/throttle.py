"""Failed authentications, throttled per client address.

Every address has a bucket of ``burst`` failures that refills at ``rate`` a second; a
call that fails to authenticate (an unknown token, a malformed header, a refused
sign-in) takes one, and while an address's bucket is empty its calls are refused with
429 ``too-many-auth-failures`` before any token is looked at. So a token cannot be
guessed at network speed, and under ``--auth kubernetes`` unknown tokens from one
address cannot be multiplied into TokenReviews on the API server. A client that
authenticates never spends anything.

The address is the connection's peer, or what a trusted proxy says it is (uvicorn's
``forwarded_allow_ips``); IPv6 addresses count per /64, the block one host is usually
given. Buckets are kept for the addresses that failed lately only, at most ``size``,
the oldest dropped first.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from tickwork.core.errors import TooManyAuthFailures

# IPv6 addresses are throttled by network: a host is usually given a whole /64.
IPV6_PREFIX: Final = 64


def address_key(host: str | None) -> str:
    """The key a client's failures count under."""
    if not host:
        return ""
    try:
        parsed = ipaddress.ip_address(host)
    except ValueError:
        return host  # a unix socket's name, a test client's: as it is
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.ip_network(f"{parsed}/{IPV6_PREFIX}", strict=False))
    return str(parsed)


class FailureThrottle:
    def __init__(
        self,
        rate: float,
        burst: float,
        *,
        size: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = rate
        self.burst = burst
        self.size = size
        self._clock = clock
        # key -> (failures still allowed, when that was counted)
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def _level(self, key: str, now: float) -> float:
        found = self._buckets.get(key)
        if found is None:
            return self.burst
        tokens, at = found
        return min(self.burst, tokens + (now - at) * self.rate)

    def check(self, host: str | None) -> None:
        """Refuse a call from an address whose failures are spent."""
        if not self.enabled:
            return
        key = address_key(host)
        now = self._clock()
        level = self._level(key, now)
        if level < 1:
            wait = (1 - level) / self.rate
            raise TooManyAuthFailures(
                f"too many calls from this address failed to authenticate; try again in "
                f"{math.ceil(wait)} s",
                retry_after=wait,
            )

    def failed(self, host: str | None) -> None:
        """Count one failed authentication of ``host``."""
        if not self.enabled:
            return
        key = address_key(host)
        now = self._clock()
        level = max(0.0, self._level(key, now) - 1)
        self._buckets[key] = (level, now)
        self._buckets.move_to_end(key)
        while len(self._buckets) > self.size:
            self._buckets.popitem(last=False)

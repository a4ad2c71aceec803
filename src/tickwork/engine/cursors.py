"""Cursors of lists merged across shards, newest first (the DLQ, the audit log).

Each shard is read in ``(instant, id)`` order with a keyset bound; the pages are merged
in ``(instant, shard, id)`` order, descending, and the cursor is the position of the
last item of the page. ``bound_for`` turns that global position into each shard's own
bound, so no item is skipped or repeated between pages.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import orjson

from tickwork.core.errors import InvalidRequest

MAX_ID: Final = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Position:
    """Where a page ended: ``(instant, shard, id)`` of its last item."""

    at: datetime
    shard: int
    id: int

    def bound_for(self, shard: int) -> tuple[datetime, int]:
        """The per-shard ``(instant, id) < bound`` equivalent to the global order."""
        if shard < self.shard:
            return self.at, MAX_ID
        if shard == self.shard:
            return self.at, self.id
        return self.at, 0

    def encode(self) -> str:
        raw = orjson.dumps([self.at.isoformat(), self.shard, self.id])
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> Position:
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            at, shard, local = orjson.loads(raw)
            instant = datetime.fromisoformat(at)
            if instant.tzinfo is None or not isinstance(shard, int) or not isinstance(local, int):
                raise ValueError(text)
            if not 0 <= shard < 2**31 or not 0 <= local < 2**63:
                raise ValueError("position out of range")
            instant.astimezone(UTC)  # OverflowError: no UTC equivalent in years 1-9999
            return cls(instant, shard, local)
        except (
            ValueError,
            TypeError,
            OverflowError,
            binascii.Error,
            orjson.JSONDecodeError,
        ) as error:
            raise InvalidRequest("malformed cursor", field="cursor") from error

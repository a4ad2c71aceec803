"""Weighted priorities by stride scheduling.

Each priority holds a pass value; a claim hands its slots to the lowest passes, and
every slot taken by priority p moves p's pass on by ``1 / weight[p]``. When every
priority has ready work the claims split in proportion to the weights (70/25/5 by
default), exactly over time and whatever the batch size. A priority with nothing ready
takes no slot and its share goes to the others (work-conserving); when it has work
again it rejoins at the current pass, so an idle spell earns it no burst.

The claim statement does the merging (see ``leases.sql``); this object carries the
passes from one claim to the next. One instance per dispatcher process: with several
replicas each keeps its own passes and the split still holds overall.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Final

DEFAULT_WEIGHTS: Final = (70.0, 25.0, 5.0)
_RENORMALISE_ABOVE: Final = 1e9


def parse_weights(text: str) -> tuple[float, float, float]:
    """``"70/25/5"`` (critical/default/bulk) into weights; any positive scale works."""
    parts = text.replace(",", "/").split("/")
    if len(parts) != 3:
        raise ValueError("priority weights are three numbers: critical/default/bulk")
    try:
        weights = tuple(float(part) for part in parts)
    except ValueError as error:
        raise ValueError(f"priority weights must be numbers, not {text!r}") from error
    if not all(math.isfinite(w) and w > 0 for w in weights):
        raise ValueError("priority weights must be positive")
    return weights[0], weights[1], weights[2]


class PriorityShares:
    """The stride passes of the three priorities (rank 0 critical, 1 default, 2 bulk)."""

    def __init__(self, weights: Sequence[float] = DEFAULT_WEIGHTS) -> None:
        if len(weights) != 3 or not all(math.isfinite(w) and w > 0 for w in weights):
            raise ValueError("three positive weights are needed")
        total = sum(weights)
        # Normalised so passes advance by about one per claimed run overall.
        self.weights: tuple[float, ...] = tuple(w / total for w in weights)
        self.passes: list[float] = [0.0, 0.0, 0.0]
        self._seeds = itertools.count()

    def seed(self) -> int:
        """A value that changes every claim, to rotate ties between tenants."""
        return next(self._seeds) % 1_000_003

    def record(self, ranks: Iterable[int]) -> None:
        """Advance the passes by the slots a claim took (one rank per run)."""
        taken = [0, 0, 0]
        for rank in ranks:
            taken[rank] += 1
        if not any(taken):
            return
        reached = max(self.passes[p] + taken[p] / self.weights[p] for p in range(3) if taken[p])
        for p in range(3):
            if taken[p]:
                self.passes[p] += taken[p] / self.weights[p]
            else:
                # Idle (or outbid) this claim: never lag behind so far that it would
                # have won a slot here; that is what keeps an idle spell from counting.
                self.passes[p] = max(self.passes[p], reached - 1 / self.weights[p])
        low = min(self.passes)
        if low > _RENORMALISE_ABOVE:
            self.passes = [value - low for value in self.passes]

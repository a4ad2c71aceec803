"""Safe concurrent edits of a job: its ``ETag`` and the ``If-Match`` / ``If-None-Match``
an edit may carry (RFC 9110, 13.1). The tag is the definition's generation, which grows
with every change of its spec or pause, so two people editing what they read cannot
overwrite each other: the second edit gets ``412 precondition-failed``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from tickwork.core.errors import InvalidRequest, PreconditionFailed

# One entity-tag as RFC 9110 writes it: optionally weak, then a quoted opaque string.
_TAG: Final = re.compile(r'\s*(W/)?"([\x21\x23-\x7e]*)"\s*')
_MAX_HEADER: Final = 1024


def etag(generation: int) -> str:
    """The strong entity-tag of a job at ``generation``."""
    return f'"g{generation}"'


@dataclass(frozen=True, slots=True)
class Precondition:
    """What an edit asks of the job as it is: ``match`` (If-Match: one of these tags,
    or any existing job for ``*``) and ``none_match_any`` (If-None-Match: *: no job)."""

    match: frozenset[str] | None = None  # None: no If-Match; "*" in it: any
    none_match_any: bool = False

    @classmethod
    def of(cls, if_match: str | None, if_none_match: str | None = None) -> Precondition:
        match = None if if_match is None else _tags(if_match, "If-Match")
        if if_none_match is not None and if_none_match.strip() != "*":
            raise InvalidRequest(
                'If-None-Match takes only "*" here (create the job only if it does not exist)',
                field="If-None-Match",
            )
        return cls(match, if_none_match is not None)

    def check(self, generation: int | None) -> None:
        """Raise ``PreconditionFailed`` unless the job (at ``generation``; None: there
        is none) meets it."""
        if self.none_match_any and generation is not None:
            raise PreconditionFailed(
                f"the job exists already (ETag {etag(generation)}) and If-None-Match: * asks "
                "to create it only"
            )
        if self.match is None:
            return
        if generation is None:
            raise PreconditionFailed("If-Match was given and the job does not exist")
        if "*" not in self.match and etag(generation) not in self.match:
            raise PreconditionFailed(
                f"the job changed since it was read: it is at ETag {etag(generation)}, not "
                f"{', '.join(sorted(self.match))}; read it again and redo the edit"
            )


NONE: Final = Precondition()


def _tags(header: str, name: str) -> frozenset[str]:
    if len(header) > _MAX_HEADER:
        raise InvalidRequest(f"{name} is longer than {_MAX_HEADER} characters", field=name)
    if header.strip() == "*":
        return frozenset({"*"})
    found: set[str] = set()
    for part in header.split(","):
        matched = _TAG.fullmatch(part)
        if matched is None:
            raise InvalidRequest(
                f'{name} must be "*" or entity-tags such as "g7" (quoted), not {header!r}',
                field=name,
            )
        if matched.group(1) is None:  # a weak tag never matches for an edit (strong compare)
            found.add(f'"{matched.group(2)}"')
    return frozenset(found)

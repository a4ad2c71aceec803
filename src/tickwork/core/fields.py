"""How the contract writes the place of a field: ``schedule.cron``, ``runs[3].payload``,
``payload.db.password``, and ``payload["odd key"]`` for a key that is empty or not a
plain name. Problems (``field``), manifest errors and the credential scanner all say
it the same way."""

from __future__ import annotations

import json
import re
from typing import Final

_PLAIN: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
_SHOWN: Final = 64


def key(where: str, name: str) -> str:
    """``where`` followed by the object key ``name``."""
    if _PLAIN.fullmatch(name):
        return f"{where}.{name}" if where else name
    shown = name if len(name) <= _SHOWN else name[:_SHOWN] + "…"
    return f"{where}[{json.dumps(shown, ensure_ascii=False)}]"


def index(where: str, position: int) -> str:
    """``where`` followed by the list index ``position``."""
    return f"{where}[{position}]"

"""A page's background refresh renders only its ``live`` block, without the template's
top-level imports: each macro a live block calls must be imported inside the block, or
the refresh answers 500 (the overview's queue buttons did, once a tenant had a queue)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TEMPLATES = Path(__file__).resolve().parents[2] / "src" / "tickwork" / "api" / "ui" / "templates"
MACROS = set(re.findall(r"{%-?\s*macro\s+(\w+)\(", (TEMPLATES / "macros.html").read_text()))
LIVE = re.compile(r"{%-?\s*block live\s*-?%}(.*?){%-?\s*endblock", re.DOTALL)
IMPORT = re.compile(r'{%-?\s*from "macros.html" import (.*?) with context')


def _live(template: Path) -> str | None:
    found = LIVE.search(template.read_text())
    return None if found is None else found.group(1)


@pytest.mark.parametrize(
    "template",
    [path for path in sorted(TEMPLATES.glob("*.html")) if _live(path) is not None],
    ids=lambda path: path.name,
)
def test_a_live_block_imports_the_macros_it_calls(template: Path) -> None:
    block = _live(template)
    assert block is not None
    imported: set[str] = set()
    for names in IMPORT.findall(block):
        for name in names.split(","):
            # "state as badge" makes the name "badge" of the macro "state".
            imported.add(name.split(" as ")[-1].strip())
    called = {name for name in re.findall(r"\b(\w+)\(", block) if name in MACROS}
    assert called <= imported, f"{template.name}: live block calls {called - imported}"

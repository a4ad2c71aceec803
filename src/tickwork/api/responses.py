"""JSON responses rendered with orjson."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from tickwork.api import render


def json(document: Any, status: int = 200) -> Response:
    return Response(render.dumps(document), status, media_type="application/json")


def json_text(text: bytes, status: int = 200) -> Response:
    """A JSON answer rendered already (``render.ready_runs``)."""
    return Response(text, status, media_type="application/json")

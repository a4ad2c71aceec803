"""Request bodies: JSON read once, bounded in depth, validated without coercion.

Every route reads its body here. A body nesting deeper than ``limits.MAX_BODY_DEPTH``
is refused naming the field it nests in, before pydantic, the encoder or the database
(all recursive) see it; a text too deep for the parser itself is scanned for that
field instead. The worker routes parse with orjson (the hot path); the team routes
read a body as Python's parser does, which keeps what orjson would change or refuse
(integers past 64 bits, which orjson reads as floats; NaN; lone surrogates) for the
field validators to refuse by name; orjson still reads the bodies where the two
agree. They then validate with their pydantic model through ``spec.parse``: camelCase
only, no type coercion, unknown fields refused.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final, TypeVar

import orjson
from fastapi import Request
from pydantic import BaseModel, ValidationError

from tickwork.api import problems
from tickwork.core import limits, spec
from tickwork.core.errors import InvalidRequest

_Model = TypeVar("_Model", bound=BaseModel)

# Tokens of a JSON text that matter for its nesting: strings (whole, so brackets in
# them do not count), brackets, and the separators that move along a path.
_TOKEN_RE: Final = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}:,]')
# The client-given JSON values inside a body: a path is named down to them.
_VALUE_FIELDS: Final = frozenset({"payload", "error"})


def _field(path: list[str | int]) -> str:
    """The field a too-deep path is in: down to its payload or error, else its first
    step (``runs[3].payload``, ``items[0].error``, ``schedule``)."""
    if not path or isinstance(path[0], int):
        return "body"
    cut = 1
    for index, step in enumerate(path):
        if step in _VALUE_FIELDS:
            cut = index + 1
            break
    text = ""
    for step in path[:cut]:
        if isinstance(step, int):
            text += f"[{step}]"
        else:
            text += ("." if text else "") + step
    return text or "body"


def _too_deep(field: str) -> InvalidRequest:
    return InvalidRequest(
        f"{field}: JSON nests deeper than allowed (a payload or error object at most "
        f"{limits.MAX_JSON_DEPTH} levels, a request body at most {limits.MAX_BODY_DEPTH})",
        field=field,
    )


def _parsed_depth_path(document: Any, limit: int) -> list[str | int] | None:
    """The path to the first container deeper than ``limit`` in a parsed document."""
    pending: list[tuple[Any, list[str | int]]] = [(document, [])]
    while pending:
        item, path = pending.pop()
        if isinstance(item, dict):
            if len(path) >= limit:
                return path
            pending.extend((child, [*path, key]) for key, child in item.items())
        elif isinstance(item, list):
            if len(path) >= limit:
                return path
            pending.extend((child, [*path, index]) for index, child in enumerate(item))
    return None


def _raw_depth_path(raw: bytes, limit: int) -> list[str | int] | None:
    """The same for a text no parser would take (too deep even to parse): a scan of
    its tokens that stops where the limit is crossed."""
    path: list[str | int] = []
    last_string: str | None = None
    for match in _TOKEN_RE.finditer(raw):
        token = match.group()
        if token in (b"{", b"["):
            if len(path) >= limit:
                return path
            path.append(0 if token == b"[" else "")
        elif token in (b"}", b"]"):
            if path:
                path.pop()
        elif token == b",":
            if path and isinstance(path[-1], int):
                path[-1] += 1
        elif token == b":":
            if path and isinstance(path[-1], str) and last_string is not None:
                path[-1] = last_string
        else:
            try:
                last_string = json.loads(token)
            except ValueError:
                last_string = None
    return None


def _deeper_than(document: Any, limit: int) -> bool:
    """Whether a parsed document nests deeper than ``limit`` (no paths built: the
    walk of a large body that passes stays cheap)."""
    pending: list[tuple[Any, int]] = [(document, 0)]
    while pending:
        item, depth = pending.pop()
        if type(item) is dict:
            children: Any = item.values()
        elif type(item) is list:
            children = item
        else:
            continue
        if depth >= limit:
            return True
        pending.extend((child, depth + 1) for child in children if type(child) in _CONTAINERS)
    return False


_CONTAINERS: Final = (dict, list)


def _depth_checked(raw: bytes, document: Any) -> Any:
    # No document with fewer brackets than the limit can be deeper than it: the common
    # small body costs two byte counts.
    if raw.count(b"[") + raw.count(b"{") > limits.MAX_BODY_DEPTH and _deeper_than(
        document, limits.MAX_BODY_DEPTH
    ):
        path = _parsed_depth_path(document, limits.MAX_BODY_DEPTH)
        if path is not None:
            raise _too_deep(_field(path))
    return document


# A run of digits orjson could read as a float (an integer past 64 bits): such a body
# is read by Python's parser, which keeps the integer for the validators to refuse.
# Found as a run of zeros once every digit is mapped to one (a translation and a
# substring search run at memory speed; the pattern [0-9]{19} took a large batch's
# time).
_DIGITS_TO_ZEROS: Final = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS: Final = b"0" * 19


def _long_digits(raw: bytes) -> bool:
    return _LONG_DIGITS in raw.translate(_DIGITS_TO_ZEROS)


def parse(raw: bytes, *, lenient: bool = False, depth: bool = True) -> Any:
    """The JSON document of a request body.

    ``lenient``: read it as Python's parser does, NaN and integers of any size
    included, so that the field validators refuse those naming the field.
    ``depth=False``: the caller checks the nesting itself (``check_depth`` or a walk
    of its own that bounds it), so a large body is not walked twice.
    """
    checked = _depth_checked if depth else _unchecked
    if lenient and not _long_digits(raw):
        # What orjson reads, Python's parser reads the same; what it refuses (NaN, a
        # lone surrogate, a nesting past its limit) Python's parser reads below.
        try:
            return checked(raw, orjson.loads(raw))
        except orjson.JSONDecodeError:
            pass
    try:
        document = json.loads(raw) if lenient else orjson.loads(raw)
    except RecursionError:
        document = None  # too deep for the parser: the scan below names the field
    except ValueError as error:  # orjson's and json's decode errors, bad UTF-8
        path = _raw_depth_path(raw, limits.MAX_BODY_DEPTH)
        if path is not None:
            raise _too_deep(_field(path)) from None
        raise InvalidRequest(f"body is not JSON: {error}", field="body") from None
    else:
        return checked(raw, document)
    path = _raw_depth_path(raw, limits.MAX_BODY_DEPTH)
    raise _too_deep(_field(path or []))


def _unchecked(_raw: bytes, document: Any) -> Any:
    return document


def check_depth(raw: bytes, document: Any) -> None:
    """Refuse a document ``parse(raw, depth=False)`` read that nests deeper than
    ``limits.MAX_BODY_DEPTH``, naming the field it nests in."""
    _depth_checked(raw, document)


async def document(request: Request, *, lenient: bool = False) -> Any:
    return parse(await request.body(), lenient=lenient)


async def json_object(request: Request) -> dict[str, Any]:
    """The body of a worker route: a JSON object, parsed strictly."""
    found = await document(request)
    if not isinstance(found, dict):
        raise InvalidRequest("body must be a JSON object", field="body")
    return found


def validated(model: type[_Model], value: Any, where: str = "") -> _Model:
    """``value`` as ``model`` (camelCase only, no coercion), or the problem naming the
    field, prefixed with ``where`` (``runs[3]``)."""
    try:
        return spec.parse(model, value)
    except ValidationError as error:
        problem = problems.from_validation(error.errors())
        if where:
            if problem.field:
                problem.detail = f"{where}.{problem.detail}"
            problem.field = where + ("." + problem.field if problem.field else "")
        raise problem from None


async def model(request: Request, model: type[_Model], *, required: bool) -> _Model | None:
    """A team route's body as ``model``; None for an empty optional body."""
    raw = await request.body()
    if not raw.strip():
        if required:
            raise InvalidRequest("a JSON body is required", field="body")
        return None
    found = parse(raw, lenient=True)
    if not isinstance(found, dict):
        raise InvalidRequest("body must be a JSON object", field="body")
    return validated(model, found)


def openapi(model: type[BaseModel], *, required: bool) -> dict[str, Any]:
    """``openapi_extra`` documenting a body a route reads itself."""
    return {
        "requestBody": {
            "required": required,
            "content": {
                "application/json": {
                    "schema": model.model_json_schema(ref_template="#/components/schemas/{model}")
                }
            },
        }
    }

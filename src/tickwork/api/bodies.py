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

# A JSON string as the scan of a raw text reads it: to its closing quote or, unclosed,
# to the end of the text, consumed possessively. A pattern that could fail on an
# unclosed string would have the scan start again at each of its quotes, and an
# unclosed ``"\"\"\"…`` cost the square of its length (60 KB: 15 s of CPU).
_STRING_RE: Final = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)', re.DOTALL)
# What that scan reads once every string is a single quote: brackets, the separators
# that move along a path, and those quotes (a key is the last string before a colon).
_NOT_TOKENS: Final = bytes(sorted(set(range(256)) - set(b'[]{}:,"')))
_QUOTE, _COMMA, _COLON, _ARRAY, _OBJECT = b'",:[{'  # byte values, as the scan reads them
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


# A place in a parsed document: its parent's place and the key or index it is at.
_Place = tuple["_Place", "str | int"] | None


def _spelled(place: _Place) -> list[str | int]:
    path: list[str | int] = []
    while place is not None:
        place, step = place
        path.append(step)
    path.reverse()
    return path


def _parsed_depth_path(document: Any, limit: int) -> list[str | int] | None:
    """The path to the first container deeper than ``limit`` in a parsed document."""
    # Each container keeps a link to its parent's place rather than a copy of its path
    # (a copy per element cost the depth times the size); the path is spelled out once,
    # for the container found.
    if type(document) not in _CONTAINERS:
        return None
    pending: list[tuple[Any, _Place, int]] = [(document, None, 0)]
    while pending:
        item, place, depth = pending.pop()
        if depth >= limit:
            return _spelled(place)
        children: Any = item.items() if type(item) is dict else enumerate(item)
        pending.extend(
            (child, (place, step), depth + 1)
            for step, child in children
            if type(child) in _CONTAINERS
        )
    return None


def _raw_depth_path(raw: bytes, limit: int) -> list[str | int] | None:
    """The same for a text no parser would take (too deep even to parse): a scan of
    its tokens that stops where the limit is crossed. A key that is not a valid JSON
    string names nothing (``""``)."""
    # No text with fewer brackets than the limit can cross it: most bodies that are not
    # JSON cost two byte counts.
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return None
    # The open array or object the scan is in: whether it is an array, and the index
    # of its element or of the string naming its member (-1 before its first key;
    # strings are decoded only for the path returned). Those it is inside, stacked.
    array, step, depth, strings = False, 0, 0, 0
    arrays: list[bool] = []
    steps: list[int] = []
    for byte in _skeleton(raw):
        if byte == _QUOTE:
            strings += 1
        elif byte == _COMMA:
            if array:
                step += 1
        elif byte == _COLON:
            if depth and not array and strings:
                step = strings - 1
        elif byte in (_ARRAY, _OBJECT):
            if depth >= limit:
                # The first of the stack is the state outside any container.
                return _scanned_path(raw, [*arrays, array][1:], [*steps, step][1:])
            arrays.append(array)
            steps.append(step)
            array = byte == _ARRAY
            step = 0 if array else -1
            depth += 1
        elif depth:  # a closing bracket
            array = arrays.pop()
            step = steps.pop()
            depth -= 1
    return None


def _skeleton(raw: bytes) -> bytes:
    """The tokens of ``raw`` that nesting depends on, each string as one quote: a
    byte string the scan reads a byte at a time."""
    if b"\\" in raw:
        text = _STRING_RE.sub(b'"', raw)
    else:
        # Without a backslash a string is what lies between a quote and the next one,
        # found at memory speed (the regular expression takes about 0.2 µs a string).
        parts = raw.split(b'"')
        text = b'"'.join(parts[::2]) + (b'"' if len(parts) % 2 == 0 else b"")
    return text.translate(None, _NOT_TOKENS)


def _scanned_path(raw: bytes, arrays: list[bool], steps: list[int]) -> list[str | int]:
    """The path of a scan: element indexes as they are, member keys decoded."""
    wanted = {step for step, array in zip(steps, arrays, strict=True) if not array and step >= 0}
    keys: dict[int, str] = {}
    if wanted:
        last = max(wanted)
        for index, match in enumerate(_STRING_RE.finditer(raw)):
            if index in wanted:
                keys[index] = _key(match.group())
            if index >= last:
                break
    return [
        step if array else keys.get(step, "") for step, array in zip(steps, arrays, strict=True)
    ]


def _key(token: bytes) -> str:
    """The text of a string token; "" for one that is not valid JSON (unclosed, a bad
    escape, not UTF-8)."""
    try:
        text = json.loads(token)
    except ValueError:
        return ""
    return text if isinstance(text, str) else ""


def _deeper_than(document: Any, limit: int) -> bool:
    """Whether a parsed document nests deeper than ``limit`` (no paths built: the
    walk of a large body that passes stays cheap)."""
    # Level by level, the containers only: a stack of (value, depth) pairs cost a
    # tuple and a generator per container, 2 s for a 4 MiB body of empty arrays.
    level = [document] if type(document) in _CONTAINERS else []
    for _ in range(limit):
        if not level:
            return False
        below: list[Any] = []
        for item in level:
            children = item.values() if type(item) is dict else item
            below += [child for child in children if type(child) in _CONTAINERS]
        level = below
    return bool(level)


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


async def model(
    request: Request, model: type[_Model], *, required: bool, named: str | None = None
) -> _Model | None:
    """A team route's body as ``model``; None for an empty optional body. With ``named``
    (the resource's name in the path), the body may say ``name`` too, if it says the
    same: documents written for the whole resource carry it."""
    raw = await request.body()
    if not raw.strip():
        if required:
            raise InvalidRequest("a JSON body is required", field="body")
        return None
    found = parse(raw, lenient=True)
    if not isinstance(found, dict):
        raise InvalidRequest("body must be a JSON object", field="body")
    if named is not None and "name" in found:
        given = found.pop("name")
        if given != named:
            raise InvalidRequest(
                f"name in the body ({given!r}) must be the name in the path ({named!r}), "
                "or be left out",
                field="name",
            )
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

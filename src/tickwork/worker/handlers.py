"""Handlers: which function runs a leased run, and how it is called.

A handler is registered for one job, for one queue, or as the default; the job's beats
the queue's beats the default. A handler registered with ``dry_run=True`` supports
dry-run mode: the runs of a job in dry-run mode (``spec.dryRun``) go only to such
handlers, and are skipped (completed as succeeded, untouched) by any other.
``async def`` handlers run on the worker's event loop; plain functions run in the
worker's thread pool, so blocking code does not stall the heartbeats.

A handler takes the run's context, and optionally the payload as a second parameter:
annotated with a type pydantic validates (a ``BaseModel``, a dataclass, a
``TypedDict``, ``list[int]``, ...), the payload is validated and parsed into it before
the handler is called, and a payload that does not validate fails the run as not
retryable (``InvalidPayload``, naming the fields): no retry can fix it.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import types
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import pydantic

from tickwork.core import fields
from tickwork.worker.context import InvalidPayload, RunContext

Handler = Callable[[RunContext], object] | Callable[[RunContext, Any], object]
"""A function of the run's context (and, optionally, its payload): ``async def`` (runs
on the event loop) or plain ``def`` (runs in a worker thread). Returning means success;
raising means failure."""

HandlerT = TypeVar("HandlerT", bound=Handler)

InThread = Callable[[Callable[[], object]], Awaitable[object]]
"""Runs a blocking call off the event loop (``HandlerThreads.run``, ``asyncio.to_thread``)."""

# Errors named in a failed run's message; the rest are counted.
_MAX_ERRORS_SHOWN: Final = 10


@dataclass(frozen=True, slots=True, eq=False)
class Calling:
    """How one handler is called: worked out once, when it is registered."""

    function: Handler
    is_async: bool
    takes_payload: bool = False
    payload_type: pydantic.TypeAdapter[Any] | None = None
    """Validates the payload for a handler whose payload parameter is annotated."""
    type_name: str = ""

    def arguments(self, context: RunContext) -> tuple[object, ...]:
        """The handler's arguments for ``context``; ``InvalidPayload`` when the payload
        does not validate as the handler's payload type."""
        if not self.takes_payload:
            return (context,)
        if self.payload_type is None:
            return (context, context.payload)
        try:
            return (context, self.payload_type.validate_python(context.payload))
        except pydantic.ValidationError as error:
            raise _invalid(self.type_name, error) from error


def prepare(function: Handler) -> Calling:
    """How ``function`` is called; ``TypeError`` when it cannot be a handler (more than
    two required parameters, or a payload annotation pydantic cannot validate)."""
    if not callable(function):
        raise TypeError(f"a handler must be callable, not {function!r}")
    is_async = is_async_function(function)
    parameter = _payload_parameter(function)
    if parameter is None:
        return Calling(function, is_async)
    annotation = _resolved(function, parameter)
    if annotation in (inspect.Parameter.empty, Any, object):
        return Calling(function, is_async, takes_payload=True)
    plain = typing.get_origin(annotation) is None  # list[int] would say "list"
    name = (getattr(annotation, "__name__", None) if plain else None) or repr(annotation)
    try:
        adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(annotation)
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError) as error:
        raise TypeError(
            f"handler {_name_of(function)}: pydantic cannot validate a payload as {name} "
            f"(the annotation of {parameter.name!r}): {error}"
        ) from error
    return Calling(function, is_async, takes_payload=True, payload_type=adapter, type_name=name)


def _payload_parameter(function: Handler) -> inspect.Parameter | None:
    """The parameter the payload is passed as: a second required positional one."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without a signature: called with ctx
        return None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [
        p
        for p in signature.parameters.values()
        if p.kind in positional and p.default is inspect.Parameter.empty
    ]
    if len(required) > 2:
        raise TypeError(
            f"handler {_name_of(function)}{signature}: a handler takes (ctx) or (ctx, payload)"
        )
    return required[1] if len(required) == 2 else None


def _resolved(function: Handler, parameter: inspect.Parameter) -> Any:
    """The parameter's annotation, evaluated where the handler was defined when it is a
    string (``from __future__ import annotations``)."""
    annotation = parameter.annotation
    if not isinstance(annotation, str):
        return annotation
    holder = types.SimpleNamespace(__annotations__={parameter.name: annotation})
    try:
        hints = typing.get_type_hints(holder, globalns=_globals_of(function))
    except Exception as error:
        raise TypeError(
            f"handler {_name_of(function)}: cannot resolve the annotation {annotation!r} of "
            f"its payload parameter {parameter.name!r} ({error}); define the type at the "
            "top level of the handler's module"
        ) from error
    return hints[parameter.name]


def _globals_of(function: object) -> dict[str, Any]:
    target = inspect.unwrap(function)  # type: ignore[arg-type]
    while isinstance(target, functools.partial):
        target = inspect.unwrap(target.func)
    found = getattr(target, "__globals__", None)
    if found is None:  # a callable object: its __call__'s module
        found = getattr(type(target).__call__, "__globals__", None)
    return found if isinstance(found, dict) else {}


def _name_of(function: object) -> str:
    return str(getattr(function, "__qualname__", None) or repr(function))


def _invalid(type_name: str, error: pydantic.ValidationError) -> InvalidPayload:
    found = error.errors(include_url=False, include_input=False)
    problems: list[tuple[str, str]] = []
    for item in found[:_MAX_ERRORS_SHOWN]:
        where = "payload"
        for step in item["loc"]:
            where = fields.index(where, step) if isinstance(step, int) else fields.key(where, step)
        problems.append((where, item["msg"]))
    listed = "; ".join(f"{where}: {message}" for where, message in problems)
    more = len(found) - len(problems)
    if more:
        listed += f"; and {more} more"
    return InvalidPayload(
        f"the payload is not a valid {type_name}: {listed}",
        field=problems[0][0] if problems else "payload",
        errors=problems,
    )


class Handlers:
    """The handlers of one worker, by job, by queue, and the default."""

    def __init__(self) -> None:
        self._by_job: dict[str, Calling] = {}
        self._by_queue: dict[str, Calling] = {}
        self._default: Calling | None = None
        # The handlers that support dry-run mode: (by job?, key), and the default's flag.
        self._dry_run_keys: set[tuple[bool, str]] = set()
        self._dry_run_default = False

    def register(
        self,
        function: Handler,
        *,
        job: str | None = None,
        queue: str | None = None,
        dry_run: bool = False,
    ) -> None:
        """Register ``function`` for one job, for one queue, or (neither) as the default;
        ``dry_run=True``: it supports dry-run mode."""
        if job is not None and queue is not None:
            raise ValueError("register a handler for a job or for a queue, not both")
        calling = prepare(function)
        if job is not None:
            table, key = self._by_job, job
        elif queue is not None:
            table, key = self._by_queue, queue
        else:
            if self._default is not None:
                raise ValueError("a default handler is already registered")
            self._default = calling
            self._dry_run_default = dry_run
            return
        if key in table:
            raise ValueError(f"a handler is already registered for {key!r}")
        table[key] = calling
        if dry_run:
            self._dry_run_keys.add((table is self._by_job, key))

    def handler_for(self, job: str, queue: str) -> Handler | None:
        """The handler of a run: the job's, else the queue's, else the default."""
        found = self.calling_for(job, queue)
        return None if found is None else found.function

    def calling_for(self, job: str, queue: str) -> Calling | None:
        """How to call the handler of a run (``handler_for``'s)."""
        found = self._by_job.get(job)
        if found is None:
            found = self._by_queue.get(queue, self._default)
        return found

    def supports_dry_run(self, job: str, queue: str) -> bool:
        """Whether the handler of ``job``/``queue`` was registered with ``dry_run=True``."""
        if job in self._by_job:
            return (True, job) in self._dry_run_keys
        if queue in self._by_queue:
            return (False, queue) in self._dry_run_keys
        return self._dry_run_default


def is_async_function(handler: object) -> bool:
    """An async function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        type(handler).__call__
    )


async def call(calling: Calling, context: RunContext, in_thread: InThread) -> object:
    """Run the handler for ``context`` to its end: a coroutine function on the event
    loop, a plain function through ``in_thread`` (with the caller's context variables).
    What it returns is returned (the worker ignores it)."""
    arguments = calling.arguments(context)
    function: Callable[..., object] = calling.function
    if calling.is_async:
        result = function(*arguments)
    else:
        result = await in_thread(
            functools.partial(contextvars.copy_context().run, function, *arguments)
        )
    if inspect.isawaitable(result):
        return await result
    return result

"""``tickwork bulk | operations``: act on every run matching a filter, and follow it.

``tickwork bulk replay|discard|cancel`` starts an operation (``POST /v1/operations``)
and follows it with a progress bar until it is done; Ctrl-C stops following, not the
operation. ``--dry-run`` prints how many runs match and changes nothing. ``tickwork
bulk list`` lists the runs a filter names (of one state, across jobs).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import click

from tickwork.cli.client import RUN_COLUMNS, Client, Column, call_command, with_client

OPERATION_COLUMNS: tuple[Column, ...] = (
    ("OPERATION", "id"),
    ("ACTION", "action"),
    ("STATE", "state"),
    ("TOTAL", "total"),
    ("DONE", "processed"),
    ("%", "percent"),
    ("BY", "actor"),
    ("CREATED", "createdAt"),
    ("FILTER", "filter"),
)
POLL_SECONDS = 1.0
_DONE = {"replay": "replayed", "discard": "discarded", "cancel": "cancelled"}

_FILTER_OPTIONS = (
    click.option("--job", default=None, help="Only this job's runs."),
    click.option("--job-pattern", default=None, help="Only jobs matching this glob (export-*)."),
    click.option("--state", default=None, help="Only runs in this state."),
    click.option(
        "--from",
        "from_",
        default=None,
        help="Only runs that finished (dead runs) or are due (others) at or after this "
        "RFC 3339 instant.",
    ),
    click.option("--to", default=None, help="... and before this instant."),
    click.option(
        "--error-contains", default=None, help="Only runs whose last error's message has this."
    ),
    click.option("--min-attempts", type=int, default=None),
    click.option("--max-attempts", type=int, default=None),
)


def with_filter(function: Callable[..., None]) -> Callable[..., None]:
    decorated: Any = function
    for option in reversed(_FILTER_OPTIONS):
        decorated = option(decorated)
    result: Callable[..., None] = decorated
    return result


def _filter(**given: Any) -> dict[str, Any]:
    names = {
        "job": "job",
        "job_pattern": "jobPattern",
        "state": "state",
        "from_": "from",
        "to": "to",
        "error_contains": "errorContains",
        "min_attempts": "minAttempts",
        "max_attempts": "maxAttempts",
    }
    return {names[key]: value for key, value in given.items() if value is not None}


def _follow(client: Client, operation: dict[str, Any]) -> None:
    """A progress bar until the operation ends; Ctrl-C leaves it running."""
    operation_id = operation["id"]
    click.echo(f"{operation_id}: {operation['action']} of {operation['total']} run(s)", err=True)
    try:
        progress: Any = click.progressbar(
            length=max(operation["total"], 1),
            label=operation["action"],
            file=sys.stderr,
        )
        with progress as bar:
            shown = 0
            while True:
                done = min(operation["processed"], operation["total"])
                bar.update(done - shown)
                shown = done
                if operation["state"] != "running":
                    bar.update(max(operation["total"], 1) - shown)
                    break
                time.sleep(POLL_SECONDS)
                operation = client.call("GET", f"/v1/operations/{operation_id}")
    except KeyboardInterrupt:
        click.echo(
            f"\n{operation_id} goes on in the background: follow it with "
            f"`tickwork operations get {operation_id}`, stop it with "
            f"`tickwork operations cancel {operation_id}`",
            err=True,
        )
        return
    client.show(operation, OPERATION_COLUMNS)


def _bulk(action: str) -> Callable[..., None]:
    def command(client: Client, dry_run: bool, no_wait: bool, **given: Any) -> None:
        body = {"action": action, "filter": _filter(**given), "dryRun": dry_run}
        answer = client.call("POST", "/v1/operations", body=body)
        if dry_run:
            if client.as_json:
                client.show(answer)
            else:
                click.echo(f"{answer['total']} run(s) would be {_DONE[action]}")
            return
        if no_wait or client.as_json:
            client.show(answer, OPERATION_COLUMNS)
            return
        _follow(client, answer)

    command.__name__ = f"bulk_{action}"
    return command


@click.group()
def bulk() -> None:
    """Replay, discard or cancel every run matching a filter (not only a page)."""


for _action, _help in (
    ("replay", "Replay every dead run matching the filter, with fresh attempts."),
    ("discard", "Discard every dead run matching the filter."),
    ("cancel", "Cancel every run not finished matching the filter (leased: asked to stop)."),
):
    bulk.command(_action, help=_help)(
        click.option("--dry-run", is_flag=True, help="Print how many runs match; change nothing.")(
            click.option("--no-wait", is_flag=True, help="Start it and print it; do not follow.")(
                with_filter(with_client(_bulk(_action)))
            )
        )
    )


@bulk.command("list")
@with_filter
@click.option("--cursor", default=None)
@click.option("--limit", type=int, default=None)
@with_client
def bulk_list(client: Client, cursor: str | None, limit: int | None, **given: Any) -> None:
    """The runs a filter names, of one state (--state), across jobs, newest first."""
    params = _filter(**given) | {"cursor": cursor, "limit": limit}
    client.show(client.call("GET", "/v1/runs", params=params), RUN_COLUMNS)


@click.group()
def operations() -> None:
    """Follow and stop bulk operations."""


call_command(
    operations,
    "list",
    "GET /v1/operations",
    OPERATION_COLUMNS,
    help="The tenant's recent operations, newest first.",
    options=(click.option("--limit", type=int, default=None),),
)


@operations.command("get")
@click.argument("operation_id")
@click.option("--follow", is_flag=True, help="A progress bar until it ends.")
@with_client
def operations_get(client: Client, operation_id: str, follow: bool) -> None:
    """An operation and its progress."""
    found = client.call("GET", f"/v1/operations/{operation_id}")
    if follow and not client.as_json:
        _follow(client, found)
        return
    client.show(found, OPERATION_COLUMNS)


call_command(
    operations,
    "cancel",
    "POST /v1/operations/{operation_id}:cancel",
    OPERATION_COLUMNS,
    help="Stop an operation: what it did stays done.",
)

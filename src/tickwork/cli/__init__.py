"""The ``tickwork`` command line: one sub-command per role, plus client commands.

The base package (``pip install tickwork``) is what a team's worker image needs: the
worker SDK and the client commands (``jobs``, ``runs``, ``dlq``, ``audit``, ``schedule``,
``import``). The server roles live in extras (``tickwork[server]``, and
``tickwork[embedded]`` for the PostgreSQL that ``tickwork dev`` starts), so their
commands are imported only when invoked; without the extra they explain what to install
instead of failing on import.
"""

from __future__ import annotations

import importlib
from typing import Final

import click

from tickwork import __version__
from tickwork.cli import client, importing, operations, schedule

# Server roles: "name": ("module", "attribute", "extras they need", "one-line help").
_ROLES: Final = {
    "dev": ("tickwork.cli.dev", "dev", "server,embedded", "Every role in one process."),
    "migrate": ("tickwork.cli.roles", "migrate", "server", "Create or upgrade the shards."),
    "scheduler": ("tickwork.cli.roles", "scheduler", "server", "Materialise, flip, reap."),
    "dispatcher": ("tickwork.cli.roles", "dispatcher", "server", "Serve the HTTP API."),
    "reshard": (
        "tickwork.cli.reshard",
        "reshard",
        "server",
        "Double the shard count (in a maintenance window).",
    ),
    "operator": (
        "tickwork.cli.operate",
        "operator",
        "server,operator",
        "Reconcile ScheduledJobs: definitions, status, Events, admission.",
    ),
    "job-runner": (
        "tickwork.cli.jobrunner",
        "job_runner",
        "server,kubernetes",
        "Run container jobs (spec.jobTemplate) as Kubernetes Jobs.",
    ),
}


class _Commands(click.Group):
    """Client commands are imported up front; role commands when they are used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *_ROLES])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in _ROLES:
            return super().get_command(ctx, name)
        module_name, attribute, extras, summary = _ROLES[name]
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            return _missing_extra(name, extras, summary, error)
        command: click.Command = getattr(module, attribute)
        return command


def _missing_extra(
    name: str, extras: str, summary: str, error: ModuleNotFoundError
) -> click.Command:
    message = (
        f"tickwork {name} needs the server extras, which are not installed "
        f"(missing module {error.name!r}): pip install 'tickwork[{extras}]'"
    )

    @click.command(
        name,
        help=f"{summary} (needs tickwork[{extras}])",
        short_help=f"{summary} (needs tickwork[{extras}])",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        add_help_option=False,
    )
    def unavailable() -> None:
        raise click.ClickException(message)

    return unavailable


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tickwork")
def cli() -> None:
    """tickwork: cron, delayed and one-off jobs on sharded PostgreSQL."""


for _command in (
    schedule.schedule,
    client.jobs,
    client.runs,
    client.dlq,
    client.queues,
    client.notification_targets,
    client.backfill,
    client.audit,
    operations.bulk,
    operations.operations,
    importing.import_,
):
    cli.add_command(_command)


def main() -> None:
    cli()

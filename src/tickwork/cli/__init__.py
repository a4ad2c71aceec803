"""The ``tickwork`` command line: one sub-command per role, plus client commands."""

from __future__ import annotations

import click

from tickwork import __version__
from tickwork.cli import client, dev, roles, schedule


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tickwork")
def cli() -> None:
    """tickwork: cron, delayed and one-off jobs on sharded PostgreSQL."""


cli.add_command(schedule.schedule)
cli.add_command(dev.dev)
cli.add_command(roles.migrate)
cli.add_command(roles.scheduler)
cli.add_command(roles.dispatcher)
cli.add_command(client.jobs)
cli.add_command(client.runs)
cli.add_command(client.dlq)
cli.add_command(client.audit)


def main() -> None:
    cli()

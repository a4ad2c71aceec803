"""Every command line and environment variable the chart gives a role is one the role's
command accepts: parsed by the click command itself, not compared with a list."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from chart.chart import VALUE_SETS, rendered
from tickwork import cli
from tickwork.cli import options
from tickwork.core import settings
from tickwork.jobrunner.settings import JobRunnerSettings
from tickwork.operator import lifecycle

MODELS: dict[str, type[settings.Settings]] = {
    "migrate": settings.MigrateSettings,
    "scheduler": settings.SchedulerSettings,
    "dispatcher": settings.DispatcherSettings,
    "operator": settings.OperatorSettings,
    "job-runner": JobRunnerSettings,
}

# Where the chart mounts files the roles read; replaced by a real file for parsing.
MOUNTED = "/etc/tickwork/"


def _command(name: str) -> click.Command:
    command = cli.cli.get_command(click.Context(cli.cli), name)
    assert command is not None, f"the chart runs `tickwork {name}`, which does not exist"
    assert command.params, f"tickwork {name} is not installed here (its extra is missing)"
    return command


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_the_roles_accept_the_charts_arguments(values: str, tmp_path: Path) -> None:
    mounted = tmp_path / "mounted"
    mounted.write_text("")
    for workload, container in rendered(values).containers():
        if container["name"] == "postgresql":
            continue
        if container.get("command"):
            # A hook Job: the lifecycle command, not a role.
            assert container["command"] == ["python", "-m", "tickwork.operator.lifecycle"]
            parsed = lifecycle.parser().parse_args(container["args"])
            if parsed.command == "secrets":
                assert lifecycle.wanted_of(parsed), f"{workload['metadata']['name']}: no Secret"
            continue
        role, *arguments = container["args"]
        arguments = [
            a.split("=", 1)[0] + "=" + str(mounted) if "=" + MOUNTED in a else a for a in arguments
        ]
        command = _command(role)
        try:
            with command.make_context(role, list(arguments), resilient_parsing=False) as context:
                # The settings model too: it refuses what click lets through (a network
                # with host bits set among the trusted proxies, say).
                options.load(MODELS[role], context.params)
        except click.ClickException as error:
            raise AssertionError(
                f"{workload['metadata']['name']}: tickwork {role} {arguments}: "
                f"{error.format_message()}"
            ) from error


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_the_roles_read_the_charts_environment(values: str) -> None:
    for workload, container in rendered(values).containers():
        if container["name"] == "postgresql" or container.get("command"):
            continue  # not a role: the bundled PostgreSQL, a hook Job
        command = _command(container["args"][0])
        known = {
            variable
            for parameter in command.params
            if isinstance(parameter, click.Option) and parameter.envvar
            for variable in (
                [parameter.envvar] if isinstance(parameter.envvar, str) else parameter.envvar
            )
        }
        given = {e["name"] for e in container["env"] if e["name"].startswith("TICKWORK_")}
        # The dashboard's session secret is read from the environment on purpose (never
        # a flag: a command line is visible to every user of the machine).
        given.discard("TICKWORK_UI_SECRET")
        assert given <= known, f"{workload['metadata']['name']}: {sorted(given - known)}"

"""``tickwork reshard --to 2S``: double the shard count in a maintenance window.

Before anything moves it checks that nothing works on the shards: no tickwork role
connected to a shard database (their ``application_name``), no scheduler lease or live
member in the shards' tables (the ``postgres`` backend, always), and, with the
``kubernetes`` backend, no unexpired ``tickwork-shard-{n}`` or member Lease. The work
itself is the engine's (``engine.reshard``); running it again after an interruption
finishes it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import click

from tickwork.cli import options
from tickwork.coordination import choice, kubernetes
from tickwork.coordination.backend import Observation
from tickwork.core.errors import SchemaMismatch
from tickwork.core.settings import ReshardSettings
from tickwork.engine import reshard as resharding


@click.command()
@options.settings_options(ReshardSettings)
def reshard(**given: Any) -> None:
    """Double the shard count: shard k splits into k and k + S, moving each job whose
    shard is now k + S with its runs (leased ones included), history and keys.

    Stop every scheduler, dispatcher and operator first (it refuses otherwise), give
    the URLs of all 2S shards (or one URL for all), and start the roles again with
    --shards 2S (or the 2S URLs) when it has finished. Interrupted, it is finished by
    running it again with the same arguments; the roles refuse the shards until then.
    """
    settings = options.load(ReshardSettings, given)
    options.configure_logging(settings.log)
    after = options.shard_map(settings.database_urls, settings.to)
    if after.count != settings.to:
        raise click.UsageError(
            f"--to {settings.to}: give one database URL for all shards or {settings.to}"
        )

    async def main() -> None:
        resharder = resharding.Resharder(after, progress_every=settings.progress_every)
        state = await resharder.state()
        if state.done:
            click.echo(f"nothing to do: the installation has {state.to_count} shards")
            return
        if settings.dry_run:
            report = await resharder.plan()
            refusals = await resharder.refusals() + await _kubernetes_refusals(settings)
            _print_plan(report, refusals)
            return
        refusals = await _kubernetes_refusals(settings)
        if refusals:
            raise resharding.Refused(refusals)
        report = await resharder.run()
        click.echo(
            f"resharded from {state.from_count} to {state.to_count} shards: "
            f"{report.jobs} jobs and {report.runs} runs moved; start the roles with "
            f"{state.to_count} shards"
        )

    try:
        asyncio.run(main())
    except resharding.Refused as refused:
        lines = "\n".join(f"  - {reason}" for reason in refused.reasons)
        raise click.ClickException(
            "refusing to reshard while tickwork works on the shards (stop every "
            f"scheduler, dispatcher and operator first):\n{lines}"
        ) from refused
    except (resharding.ReshardError, SchemaMismatch) as error:
        raise click.ClickException(str(error)) from error
    except OSError as error:
        raise click.ClickException(f"cannot reach a shard database: {error}") from error


async def _kubernetes_refusals(settings: ReshardSettings) -> list[str]:
    """Unexpired shard and member Leases, when the schedulers coordinate through
    Kubernetes."""
    kind = settings.coordination or choice.default_kind()
    if kind != "kubernetes":
        return []
    namespace = settings.lease_namespace or choice.default_namespace()
    try:
        backend = await kubernetes.KubernetesLeases.connect(namespace, settings.to)
    except kubernetes.KubernetesUnavailable as error:
        raise resharding.ReshardError(
            f"cannot check the schedulers' Leases: {error} (give --coordination postgres "
            "when the schedulers do not use Kubernetes)"
        ) from error
    try:
        observation = await backend.inspect()
    finally:
        await backend.close()
    return held(observation, namespace)


def held(observation: Observation, namespace: str) -> list[str]:
    """What an observation says still works on the shards."""
    reasons = [
        f"Lease {namespace}/tickwork-shard-{shard} is held by {lease.holder!r} for "
        f"{lease.remaining:.0f}s more"
        for shard, lease in sorted(observation.leases.items())
        if lease.holder is not None and lease.remaining is not None and lease.remaining > 0
    ]
    reasons += [
        f"scheduler {member!r} is live (its member Lease)" for member in sorted(observation.members)
    ]
    return reasons


def _print_plan(report: resharding.Report, refusals: list[str]) -> None:
    state = report.state
    verb = "would resume" if state.resuming else "would move"
    click.echo(f"reshard from {state.from_count} to {state.to_count} shards (dry run):")
    for moves in report.shards:
        click.echo(
            f"  shard {moves.shard} -> {moves.to}: {verb} {moves.jobs} of {moves.jobs_seen} "
            f"jobs ({moves.definitions} definitions, {moves.live_runs} live and "
            f"{moves.finished_runs} finished runs), {moves.buckets} enqueue buckets"
        )
    click.echo(f"  in all: {report.jobs} jobs, {report.runs} runs")
    for reason in refusals:
        click.echo(f"  would refuse: {reason}")

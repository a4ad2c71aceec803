"""``tickwork jobs | runs | dlq | audit``: a client of the HTTP API for people.

Tables by default, the API's JSON with ``--json``. The server and token come from
``--url`` and ``--token`` or ``--token-file`` (``TICKWORK_URL``, ``TICKWORK_TOKEN``,
``TICKWORK_TOKEN_FILE``).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import click
import httpx
import yaml

if TYPE_CHECKING:
    # Only read by the type checker: annotations are not evaluated at run time.
    from typing_extensions import Unpack


class ApiRefusal(click.ClickException):
    """A 4xx/5xx answer, printed as ``STATUS Title: detail``."""

    def __init__(self, status: int, message: str, detail: str, field: str | None) -> None:
        super().__init__(f"{status} {message}")
        self.status = status
        self.detail = detail
        self.field = field

    @classmethod
    def of(cls, response: httpx.Response) -> ApiRefusal:
        try:
            problem = response.json()
            detail = str(problem.get("detail"))
            message = f"{problem.get('title')}: {detail}"
            field = problem.get("field")
        except (ValueError, AttributeError):
            detail = message = response.text.strip() or response.reason_phrase
            field = None
        return cls(response.status_code, message, detail, field)


class _CallOptions(TypedDict, total=False):
    """``Client.request``'s keywords, which ``Client.call`` passes on."""

    body: Any
    params: dict[str, Any] | None
    headers: dict[str, str] | None
    tenant: str | None


@dataclass
class Client:
    url: str
    token: str
    tenant: str | None
    as_json: bool

    def call(self, method: str, path: str, **options: Unpack[_CallOptions]) -> Any:
        """One API call; ``tenant`` (or ``--tenant``) acts for that tenant."""
        return self.request(method, path, **options).json()

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        tenant: str | None = None,
    ) -> httpx.Response:
        """``call``, answering the response itself (its headers: the ETag)."""
        query = {k: v for k, v in (params or {}).items() if v is not None}
        if tenant or self.tenant:
            query["tenant"] = tenant or self.tenant
        try:
            response = httpx.request(
                method,
                self.url.rstrip("/") + path,
                json=body,
                params=query,
                headers={"Authorization": f"Bearer {self.token}", **(headers or {})},
                timeout=30,
            )
        except httpx.HTTPError as error:
            raise click.ClickException(f"cannot reach {self.url}: {error}") from error
        if response.status_code >= 400:
            raise ApiRefusal.of(response)
        return response

    def show(self, document: Any, columns: Sequence[Column] | None = None) -> None:
        if self.as_json:
            click.echo(json.dumps(document, indent=2))
            return
        items = document.get("items", [document]) if isinstance(document, dict) else document
        if columns is None:
            width = max((len(key) for key in document), default=0)
            for key, value in document.items():
                click.echo(f"{key:>{width}}  {_cell(value)}")
            return
        _table(items, columns)
        if isinstance(document, dict) and document.get("nextCursor"):
            click.echo(f"(more: --cursor {document['nextCursor']})")


# A table column: its header and the dotted path of the value in each item.
Column = tuple[str, str]

# RFC 3339 instants as the API writes them; tables show them to the second.
_INSTANT = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.\d+Z$")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    text = str(value)
    instant = _INSTANT.match(text)
    return instant.group(1) + "Z" if instant else text


def _table(items: Sequence[dict[str, Any]], columns: Sequence[Column]) -> None:
    rows = [[_cell(_dig(item, path)) for _, path in columns] for item in items]
    headers = [header for header, _ in columns]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    for row in [headers, *rows]:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def _dig(item: dict[str, Any], column: str) -> Any:
    value: Any = item
    for part in column.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


_CONNECTION_OPTIONS = (
    click.option(
        "--url",
        envvar="TICKWORK_URL",
        default="http://127.0.0.1:8080",
        show_default=True,
        help="API URL. [env TICKWORK_URL]",
    ),
    click.option("--token", envvar="TICKWORK_TOKEN", help="API token. [env TICKWORK_TOKEN]"),
    click.option(
        "--token-file",
        envvar="TICKWORK_TOKEN_FILE",
        type=click.Path(dir_okay=False, path_type=Path),
        help="A file holding the API token, read at each command (a projected "
        "ServiceAccount token, a mounted Secret), instead of --token. "
        "[env TICKWORK_TOKEN_FILE]",
    ),
    click.option("--tenant", default=None, help="Admin tokens: act for this tenant."),
    click.option("--json", "as_json", is_flag=True, help="Print the API's JSON."),
)


def _token(token: str | None, token_file: Path | None) -> str:
    """The token to send: ``--token``'s, or the file's as it is now (whoever rotates it
    writes it there). One of them, as the SDK's ``from_env`` takes one."""
    if token and token_file is not None:
        raise click.UsageError(
            "give one of --token (TICKWORK_TOKEN) and --token-file (TICKWORK_TOKEN_FILE), not both"
        )
    if token_file is not None:
        try:
            found = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as error:
            raise click.BadParameter(
                f"cannot read {token_file}: {error}", param_hint="'--token-file'"
            ) from error
        if not found:
            raise click.BadParameter(f"{token_file} is empty", param_hint="'--token-file'")
        return found
    if not token:
        raise click.UsageError(
            "give --token (or set TICKWORK_TOKEN), or --token-file (or TICKWORK_TOKEN_FILE)"
        )
    return token


def with_client(function: Callable[..., None]) -> Callable[..., None]:
    """Give a command the connection options (after its own, as people type them:
    ``tickwork dlq list --json``) and call it with a ``Client`` first."""

    @functools.wraps(function)
    def command(
        *args: Any,
        url: str,
        token: str | None,
        token_file: Path | None,
        tenant: str | None,
        as_json: bool,
        **kwargs: Any,
    ) -> None:
        function(Client(url, _token(token, token_file), tenant, as_json), *args, **kwargs)

    decorated: Any = command
    for option in reversed(_CONNECTION_OPTIONS):
        decorated = option(decorated)
    result: Callable[..., None] = decorated
    return result


def paged(function: Callable[..., None]) -> Callable[..., None]:
    """Give a listing command the options of the API's pages: ``--cursor`` (where the
    page before ended) and ``--limit`` (its size)."""
    decorated = click.option("--limit", type=click.IntRange(1, 500), default=None)(function)
    return click.option("--cursor", default=None)(decorated)


def call_command(
    group: click.Group,
    name: str,
    call: str,
    columns: Sequence[Column] | None,
    *,
    help: str,
    options: Sequence[Callable[[Any], Any]] = (),
) -> None:
    """Add the command ``GROUP NAME [ARGUMENT] [OPTIONS]`` that makes one call of the API
    and shows its answer: ``call`` is the method and the path, where ``{argument}`` stands
    for the command's argument; its ``options`` (decorators, as written above a command)
    are the call's query parameters."""
    method, path = call.split(" ", 1)
    arguments = re.findall(r"\{(\w+)\}", path)

    def command(client: Client, **given: Any) -> None:
        params = {key: value for key, value in given.items() if key not in arguments}
        client.show(client.call(method, path.format_map(given), params=params), columns)

    decorated: Any = with_client(command)
    for decorator in [*(click.argument(argument) for argument in arguments), *options][::-1]:
        decorated = decorator(decorated)
    group.command(name, help=help)(decorated)


JOB_COLUMNS: tuple[Column, ...] = (
    ("NAME", "name"),
    ("CRON", "spec.schedule.cron"),
    ("ZONE", "spec.schedule.timeZone"),
    ("QUEUE", "spec.queue"),
    ("PRIORITY", "spec.priority"),
    ("PAUSED", "paused"),
    ("NEXT", "nextRunAt"),
    ("LAST", "lastRun.state"),
    ("ACTIVE", "activeRuns"),
    ("DEAD", "deadRuns"),
)
RUN_COLUMNS: tuple[Column, ...] = (
    ("RUN", "runId"),
    ("JOB", "job"),
    ("STATE", "state"),
    ("ATTEMPT", "attempt"),
    ("OF", "maxAttempts"),
    ("PRIORITY", "priority"),
    ("DUE", "dueAt"),
    ("FINISHED", "finishedAt"),
)
ATTEMPT_COLUMNS: tuple[Column, ...] = (
    ("ATTEMPT", "attempt"),
    ("WORKER", "workerId"),
    ("LEASED", "leasedAt"),
    ("FINISHED", "finishedAt"),
    ("OUTCOME", "outcome"),
    ("ERROR", "error.message"),
)
DEAD_COLUMNS: tuple[Column, ...] = (
    ("RUN", "runId"),
    ("JOB", "job"),
    ("ATTEMPT", "attempt"),
    ("DIED", "finishedAt"),
    ("ERROR", "lastError.message"),
)
AUDIT_COLUMNS: tuple[Column, ...] = (
    ("AT", "at"),
    ("JOB", "job"),
    ("ACTION", "action"),
    ("RUN", "runId"),
    ("ACTOR", "actor"),
    ("DETAIL", "detail"),
)
QUEUE_COLUMNS: tuple[Column, ...] = (
    ("QUEUE", "queue"),
    ("JOBS", "jobs"),
    ("PAUSED", "paused"),
    ("SINCE", "pausedAt"),
    ("BY", "pausedBy"),
)
TARGET_COLUMNS: tuple[Column, ...] = (
    ("NAME", "name"),
    ("URL", "url"),
    ("FORMAT", "format"),
    ("SECRET", "secretRef"),
    ("DEFAULT", "default"),
    ("UPDATED", "updatedAt"),
    ("BY", "updatedBy"),
)


@click.group()
def jobs() -> None:
    """Manage job definitions."""


@jobs.command("get")
@click.argument("name")
@click.option(
    "--yaml",
    "as_manifest",
    is_flag=True,
    help="Print the job as a ScheduledJob manifest, for `jobs apply -f` (or `jobs edit`): "
    "its metadata.resourceVersion makes the apply refuse to overwrite a change made since.",
)
@with_client
def jobs_get(client: Client, name: str, as_manifest: bool) -> None:
    """One job with its status."""
    if not as_manifest:
        client.show(client.call("GET", f"/v1/jobs/{name}"))
        return
    click.echo(_manifest(client.request("GET", f"/v1/jobs/{name}")), nl=False)


# tickwork's entity-tags, as jobs get --yaml writes them in metadata.resourceVersion (a
# manifest read from Kubernetes carries the API server's own: not ours to send).
_OUR_VERSION = re.compile(r"^g[0-9]+$")


def _manifest(response: httpx.Response) -> str:
    job = response.json()
    metadata: dict[str, Any] = {"name": job["name"], "namespace": job["tenant"]}
    etag = response.headers.get("etag", "")
    if etag.startswith('"') and etag.endswith('"'):
        metadata["resourceVersion"] = etag[1:-1]
    document = {
        "apiVersion": "tickwork.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": metadata,
        "spec": job["spec"],
    }
    return yaml.safe_dump(document, sort_keys=False)


def _if_match(metadata: Any) -> dict[str, str]:
    version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
    if isinstance(version, str) and _OUR_VERSION.match(version):
        return {"If-Match": f'"{version}"'}
    return {}


@jobs.command("edit")
@click.argument("name")
@with_client
def jobs_edit(client: Client, name: str) -> None:
    """Edit a job in $EDITOR (as a ScheduledJob manifest) and apply it, unless someone
    changed it meanwhile: then nothing is written and the command says so."""
    read = _manifest(client.request("GET", f"/v1/jobs/{name}"))
    edited = click.edit(read, extension=".yaml")
    if edited is None or edited == read:
        click.echo(f"{name}: not changed")
        return
    try:
        document = yaml.safe_load(edited)
    except yaml.YAMLError as error:
        raise click.ClickException(f"the edited job is not YAML: {error}") from error
    if not isinstance(document, dict) or not isinstance(document.get("spec"), dict):
        raise click.ClickException("the edited job must keep its spec: nothing applied")
    metadata = document.get("metadata") or {}
    try:
        job = client.call(
            "PUT",
            f"/v1/jobs/{name}",
            body=document["spec"],
            headers=_if_match(metadata),
            tenant=metadata.get("namespace"),
        )
    except ApiRefusal as refusal:
        if refusal.status == 412:
            raise click.ClickException(
                f"{name} changed while you edited it: nothing applied; run "
                f"`tickwork jobs edit {name}` again ({refusal.detail})"
            ) from refusal
        raise
    client.show(job, JOB_COLUMNS)


@jobs.command("apply")
@click.option(
    "-f",
    "--file",
    "path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help="A ScheduledJob manifest (YAML), or a JobSpec (YAML/JSON) with --name.",
)
@click.option("--name", default=None, help="Job name when the file holds a bare JobSpec.")
@with_client
def jobs_apply(client: Client, path: Path, name: str | None) -> None:
    """Create or replace jobs from a file.

    A ScheduledJob's ``metadata.namespace`` is its tenant, as in Kubernetes: an admin
    token acts for it, a team token only for its own (without a namespace: the token's
    tenant, or ``--tenant``)."""
    try:
        documents = [d for d in yaml.safe_load_all(path.read_text("utf-8")) if d is not None]
    except yaml.YAMLError as error:
        raise click.ClickException(f"{path}: {error}") from error
    for document in documents:
        namespace = None
        metadata: dict[str, Any] = {}
        kind = isinstance(document, dict) and document.get("kind") == "ScheduledJob"
        if kind:
            metadata = document.get("metadata") or {}
            job_name, namespace = metadata.get("name"), metadata.get("namespace")
            spec = document.get("spec") or {}
        else:
            job_name, spec = name, document
        if not job_name:
            raise click.UsageError("the file holds a bare JobSpec: give --name")
        if namespace is not None and not isinstance(namespace, str):
            raise click.ClickException(f"{path}: metadata.namespace must be a string")
        if namespace and client.tenant and namespace != client.tenant:
            raise click.UsageError(
                f"{path}: {job_name} is in namespace {namespace!r}, not --tenant {client.tenant!r}"
            )
        precondition = _if_match(metadata)
        try:
            job = client.call(
                "PUT", f"/v1/jobs/{job_name}", body=spec, headers=precondition, tenant=namespace
            )
        except ApiRefusal as refusal:
            if refusal.status == 412:
                raise click.ClickException(
                    f"{path}: {job_name} changed since this file was read (its "
                    f"metadata.resourceVersion): nothing applied; read it again with "
                    f"`tickwork jobs get {job_name} --yaml` and redo the change "
                    f"({refusal.detail})"
                ) from refusal
            if namespace and refusal.status == 403 and refusal.field == "tenant":
                raise click.ClickException(
                    f"{path}: {job_name} is in namespace {namespace!r}, and this token may not "
                    f"act for that tenant ({refusal.detail}); use the tenant's own token or "
                    "an admin token"
                ) from refusal
            raise
        client.show(job, JOB_COLUMNS)


@jobs.command("run")
@click.argument("name")
@click.option("--payload", default=None, help="JSON payload (overrides the job's).")
@click.option("--delay", "delay_seconds", type=float, default=None, help="Run after seconds.")
@click.option(
    "--at",
    "run_at",
    type=click.DateTime(["%Y-%m-%dT%H:%M:%S%z"]),
    default=None,
    help="Run at this instant (e.g. 2026-03-15T02:00:00+01:00).",
)
@click.option("--idempotency-key", default=None, help="Same key twice → same run.")
@click.option("--priority", type=click.Choice(["critical", "default", "bulk"]), default=None)
@click.option("--if-not-running", is_flag=True, help="Refuse while the job is at its limit.")
@with_client
def jobs_run(
    client: Client,
    name: str,
    payload: str | None,
    delay_seconds: float | None,
    run_at: datetime | None,
    idempotency_key: str | None,
    priority: str | None,
    if_not_running: bool,
) -> None:
    """Enqueue a run of a job now, later, or at an instant."""
    body: dict[str, Any] = {}
    if payload is not None:
        try:
            body["payload"] = json.loads(payload)
        except ValueError as error:
            raise click.BadParameter(f"not JSON: {error}", param_hint="--payload") from error
    if delay_seconds is not None:
        body["delaySeconds"] = delay_seconds
    if run_at is not None:
        body["runAt"] = run_at.isoformat()
    if priority is not None:
        body["priority"] = priority
    if if_not_running:
        body["ifNotRunning"] = True
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    client.show(
        client.call("POST", f"/v1/jobs/{name}/runs", body=body, headers=headers), RUN_COLUMNS
    )


@click.group()
def runs() -> None:
    """Inspect and cancel runs."""


@runs.command("get")
@click.argument("run_id")
@with_client
def runs_get(client: Client, run_id: str) -> None:
    """One run with its attempts."""
    document = client.call("GET", f"/v1/runs/{run_id}")
    if client.as_json:
        client.show(document)
        return
    attempts = document.pop("attempts", [])
    client.show(document)
    if attempts:
        click.echo("")
        _table(attempts, ATTEMPT_COLUMNS)


@click.group()
def dlq() -> None:
    """The dead-letter queue."""


@click.command()
@click.option("--job", default=None, help="Only this job's entries.")
@paged
@with_client
def audit(client: Client, job: str | None, cursor: str | None, limit: int | None) -> None:
    """Who changed which job or run, newest first."""
    client.show(
        client.call("GET", "/v1/audit", params={"job": job, "cursor": cursor, "limit": limit}),
        AUDIT_COLUMNS,
    )


@click.group()
def queues() -> None:
    """A tenant's queues: pause one while what its runs call recovers."""


@click.group("notification-targets")
def notification_targets() -> None:
    """A tenant's webhooks, told when a run goes dead or a job is auto-paused."""


@notification_targets.command("put")
@click.argument("name")
# Not --url: that names the API, as for every client command.
@click.option("--webhook", required=True, help="Where to post: an http or https URL.")
@click.option(
    "--format",
    "format_",
    type=click.Choice(["json", "slack"]),
    default="json",
    show_default=True,
    help="json: the notification as a JSON object; slack: a Slack incoming-webhook message.",
)
@click.option(
    "--secret-env",
    default=None,
    help="Sign bodies with the HMAC key in this environment variable of the scheduler.",
)
@click.option(
    "--secret-file",
    default=None,
    help="Sign bodies with the HMAC key in this file of the scheduler (an absolute path).",
)
@click.option("--default", "is_default", is_flag=True, help="The target of jobs without a notify.")
@with_client
def targets_put(
    client: Client,
    name: str,
    webhook: str,
    format_: str,
    secret_env: str | None,
    secret_file: str | None,
    is_default: bool,
) -> None:
    """Create or replace a notification target (what is left out is reset: no signing,
    not the default).

    The key is named, never sent: the scheduler reads it from its environment or a
    mounted file when it signs."""
    if secret_env is not None and secret_file is not None:
        raise click.UsageError("give one of --secret-env and --secret-file, not both")
    body: dict[str, Any] = {"url": webhook, "format": format_, "default": is_default}
    if secret_env is not None:
        body["secretRef"] = {"env": secret_env}
    elif secret_file is not None:
        body["secretRef"] = {"file": secret_file}
    client.show(client.call("PUT", f"/v1/notification-targets/{name}", body=body), TARGET_COLUMNS)


@notification_targets.command("delete")
@click.argument("name")
@with_client
def targets_delete(client: Client, name: str) -> None:
    """Delete a notification target (jobs that name it notify nobody)."""
    client.request("DELETE", f"/v1/notification-targets/{name}")
    # The API answers 204 with no body: there is no document for --json to print.
    if not client.as_json:
        click.echo(f"{name}: deleted")


@click.command()
@click.argument("job")
@click.option(
    "--from",
    "start",
    required=True,
    help="The range's start (inclusive), RFC 3339 with an offset: 2026-03-14T00:00:00Z.",
)
@click.option(
    "--to",
    "end",
    required=True,
    help="The range's end (exclusive), not after now.",
)
@click.option("--dry-run", is_flag=True, help="List the fire times; make nothing.")
@with_client
def backfill(client: Client, job: str, start: str, end: str, dry_run: bool) -> None:
    """Make the runs JOB's schedule would have made from --from to --to.

    Each fire time becomes a run due then and ready now, keyed as the scheduler keys it:
    a fire time that has a run already makes nothing, so running it twice (or over an
    overlapping range) is safe. A long range is made 1 000 fire times a call."""
    created = existing = 0
    times: list[str] = []
    cursor: str | None = start
    while cursor is not None:
        answer = client.call(
            "POST",
            f"/v1/jobs/{job}:backfill",
            body={"from": cursor, "to": end, "dryRun": dry_run},
        )
        times += answer["fireTimes"]
        created += answer["created"]
        existing += answer["existing"]
        cursor = answer["nextFrom"]
        if not dry_run and cursor is not None:
            click.echo(f"{len(times)} fire times so far (up to {cursor}) ...", err=True)
    if client.as_json:
        click.echo(
            json.dumps(
                {
                    "job": job,
                    "dryRun": dry_run,
                    "fireTimes": times,
                    "created": created,
                    "existing": existing,
                },
                indent=2,
            )
        )
        return
    if dry_run:
        for instant in times:
            click.echo(_cell(instant))
        click.echo(
            f"{len(times)} fire time(s); {existing} have a run already, "
            f"{len(times) - existing} would be made",
            err=True,
        )
        return
    click.echo(f"{job}: {created} run(s) made, {existing} fire time(s) had one already")


# The commands that are one call of the API, their answer shown: group, name, method and
# path (the command's argument in braces), columns (None: the document's fields), help,
# and the options that are the call's query parameters.
for _group, _name, _call, _columns, _help, _options in (
    (jobs, "list", "GET /v1/jobs", JOB_COLUMNS, "The tenant's jobs.", (paged,)),
    (
        jobs,
        "delete",
        "DELETE /v1/jobs/{name}",
        None,
        "Delete a job (cancels its pending runs, keeps history).",
        (),
    ),
    (
        jobs,
        "pause",
        "POST /v1/jobs/{name}:pause",
        JOB_COLUMNS,
        "Pause a job: no new cron runs.",
        (),
    ),
    (
        jobs,
        "resume",
        "POST /v1/jobs/{name}:resume",
        JOB_COLUMNS,
        "Resume a job (missed runs follow its missedRunPolicy).",
        (),
    ),
    (
        runs,
        "list",
        "GET /v1/jobs/{job}/runs",
        RUN_COLUMNS,
        "A job's runs, newest first.",
        (click.option("--state", default=None, help="Only runs in this state."), paged),
    ),
    (
        runs,
        "cancel",
        "POST /v1/runs/{run_id}:cancel",
        RUN_COLUMNS,
        "Cancel a run (a leased run is asked to stop).",
        (),
    ),
    (
        dlq,
        "list",
        "GET /v1/dlq",
        DEAD_COLUMNS,
        "Dead runs, newest first.",
        (click.option("--job", default=None, help="Only this job's dead runs."), paged),
    ),
    (
        dlq,
        "replay",
        "POST /v1/dlq/{run_id}:replay",
        RUN_COLUMNS,
        "Re-enqueue a dead run with a fresh attempt budget.",
        (),
    ),
    (dlq, "discard", "POST /v1/dlq/{run_id}:discard", RUN_COLUMNS, "End a dead run.", ()),
    (
        queues,
        "list",
        "GET /v1/queues",
        QUEUE_COLUMNS,
        "The queues the tenant's jobs name, and those paused.",
        (),
    ),
    (
        queues,
        "pause",
        "POST /v1/queues/{queue}:pause",
        QUEUE_COLUMNS,
        "Pause a queue: enqueues go on, no run is leased until it is resumed.",
        (),
    ),
    (
        queues,
        "resume",
        "POST /v1/queues/{queue}:resume",
        QUEUE_COLUMNS,
        "Resume a paused queue: its waiting runs are leased again.",
        (),
    ),
    (
        notification_targets,
        "list",
        "GET /v1/notification-targets",
        TARGET_COLUMNS,
        "The tenant's notification targets.",
        (),
    ),
    (
        notification_targets,
        "get",
        "GET /v1/notification-targets/{name}",
        None,
        "One notification target.",
        (),
    ),
):
    call_command(_group, _name, _call, _columns, help=_help, options=_options)

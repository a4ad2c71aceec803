"""Settings: what each role of tickwork can be told, one model per role, documented at
the field.

Every role (the worker SDK, ``tickwork scheduler``, ``tickwork dispatcher``,
``tickwork operator``, ``tickwork migrate``, ``tickwork dev``) takes one frozen settings
object. Each field
carries its default, its bounds and, in the docstring under it, what it means: the
command line builds its options from these fields (name, environment variable,
default, bounds and help), and the tables of ``docs/configuration.md`` and
``docs/workers.md`` are generated from them, so code, ``--help`` and documentation
cannot disagree. Groups of settings used by several roles (the connection pools, the
HTTP edge) are models of their own, nested under the role's model, as kopf groups its
``OperatorSettings``.

Protocol limits (what a client may send) are not settings: they live in ``limits``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic.fields import FieldInfo

from tickwork.core import fairness, limits, queue_limits
from tickwork.core.shards import DEFAULT_SHARD_COUNT


class Settings(BaseModel):
    """Base of every settings model: immutable, unknown fields refused, and each
    field's docstring kept as its description."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


@dataclass(frozen=True, slots=True)
class Option:
    """Marks a setting the command line reads: ``flag`` (``--port``) and the
    environment variable that stands in for it, or only a variable (secrets). ``path``
    says a path names a file or a folder; ``exists`` that it must exist."""

    flag: str | None = None
    env: str | None = None
    path: Literal["file", "dir"] | None = None
    exists: bool = False


@dataclass(frozen=True, slots=True)
class Setting:
    """One field of a settings model, anywhere in its nesting."""

    path: tuple[str, ...]  # ("database", "shards")
    field: FieldInfo
    option: Option | None

    @property
    def name(self) -> str:
        """The dotted name the documentation uses: ``database.shards``."""
        return ".".join(self.path)

    @property
    def parameter(self) -> str:
        """The click parameter that carries it: ``database__shards``."""
        return "__".join(self.path)

    @property
    def annotation(self) -> Any:
        return self.field.annotation

    @property
    def required(self) -> bool:
        return self.field.is_required()

    @property
    def default(self) -> Any:
        return None if self.required else self.field.get_default(call_default_factory=True)

    @property
    def description(self) -> str:
        return self.field.description or ""


def settings_of(model: type[Settings], prefix: tuple[str, ...] = ()) -> Iterator[Setting]:
    """Every leaf field of ``model``, nested groups flattened, in declaration order."""
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        group = field.annotation
        if isinstance(group, type) and issubclass(group, Settings):
            yield from settings_of(group, path)
            continue
        option = next((m for m in field.metadata if isinstance(m, Option)), None)
        yield Setting(path, field, option)


# --- the database ---


def _words(value: Any, *, commas: bool = False) -> Any:
    """A repeatable option as given (one string, or a list of them): its words, split
    at blanks (and at commas), as a tuple. Anything else is returned as it is, for
    the field's own type to refuse."""
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, tuple | list):
        return value
    if commas:
        value = [str(item).replace(",", " ") for item in value]
    return tuple(word for item in value for word in str(item).split())


def _printable(value: str | None) -> str | None:
    if value is not None and (not value.strip() or not value.isprintable()):
        raise ValueError("must be printable text, not only blanks")
    return value


# The options of a replica taking Leases (the schedulers' shard leases, the operator's
# leader election): the same flags and variables everywhere, read alike.
LeaseNamespace = Annotated[
    str | None,
    Field(min_length=1, max_length=63),
    Option("--lease-namespace", env="TICKWORK_LEASE_NAMESPACE"),
]
Identity = Annotated[
    str | None,
    Field(min_length=1, max_length=200),
    AfterValidator(_printable),
    Option("--identity", env="TICKWORK_IDENTITY"),
]


class PoolSettings(Settings):
    """The connection pools of one process: one per shard. Every database call is
    bounded, so a hung link costs a timely error (the API answers 503, loops back off)
    rather than a hang. Opening the pools makes no connection: a role starts while its
    database is down and connects once it is back."""

    min_size: Annotated[int, Field(ge=0)] = 0
    """Connections each shard's pool keeps open when idle (and its pool of claims)."""

    max_size: Annotated[int, Field(ge=1)] = 4
    """Connections each shard's pool opens at most; the dispatcher's claims have a pool
    of their own, as large."""

    command_timeout: Annotated[float, Field(gt=0)] = 10.0
    """Seconds one statement may take; the longest healthy ones take milliseconds."""

    acquire_timeout: Annotated[float, Field(gt=0)] = 5.0
    """Seconds to wait for a free pooled connection."""

    connect_timeout: Annotated[float, Field(gt=0)] = 5.0
    """Seconds to open a new connection."""


_DATABASE_URL_DOC: Final = (
    "PostgreSQL URL: once for all shards (a schema each), or once per shard in shard "
    "order (the variable: space-separated)."
)


class DatabaseSettings(Settings):
    """Where the shards live: every server role has these."""

    database_urls: Annotated[
        tuple[str, ...],
        Field(description=_DATABASE_URL_DOC),
        Option("--database-url", env="TICKWORK_DATABASE_URL"),
    ] = ()

    shards: Annotated[int, Field(ge=1, le=4096), Option("--shards", env="TICKWORK_SHARDS")] = (
        DEFAULT_SHARD_COUNT
    )
    """Number of shards S (chosen at install time; ``tickwork reshard`` doubles it)."""

    pool: PoolSettings = PoolSettings()
    """The connection pools."""


class LogSettings(Settings):
    """How a role logs (to stderr): every role has these."""

    format: Annotated[
        Literal["text", "json"], Option("--log-format", env="TICKWORK_LOG_FORMAT")
    ] = "text"
    """``text`` (time level logger [action] message) or ``json`` (one object a line:
    time, level, logger, message and the call's fields, with the stable ``action``
    key)."""

    level: Annotated[
        Literal["DEBUG", "INFO", "WARNING", "ERROR"],
        Option("--log-level", env="TICKWORK_LOG_LEVEL"),
    ] = "INFO"
    """Log level."""

    @field_validator("level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


class MetricsSettings(Settings):
    """Which jobs get series of their own in the per-job metrics."""

    jobs: Annotated[tuple[str, ...], Option("--metrics-job", env="TICKWORK_METRICS_JOBS")] = ()
    """A job (``tenant/name``; shell patterns such as ``payments/*``) with its own
    series in the per-job metrics, repeatable (the variable: space-separated); at most
    ``job_limit`` jobs, every other job counts under ``tickwork_job="_other"``."""

    job_limit: Annotated[int, Field(ge=0)] = 200
    """Jobs with series of their own at most, per process."""


# The audience of the token a worker presents (docs/operations.md, worker
# authentication): one the API server itself does not accept.
DEFAULT_AUDIENCES: Final = ("tickwork",)


class KubernetesAuthSettings(Settings):
    """``--auth kubernetes``: ServiceAccount tokens checked with TokenReview, each call
    authorised with SubjectAccessReview on the ``tickwork.dev`` API group (namespace =
    tenant)."""

    cache_seconds: Annotated[
        float, Field(ge=0), Option("--auth-cache-seconds", env="TICKWORK_AUTH_CACHE_SECONDS")
    ] = 10.0
    """Seconds a TokenReview or SubjectAccessReview answer is reused (a refusal: half as
    long)."""

    audiences: Annotated[
        tuple[str, ...], Option("--auth-audience", env="TICKWORK_AUTH_AUDIENCE")
    ] = DEFAULT_AUDIENCES
    """An audience the ServiceAccount token must be issued for, repeatable: a token
    issued for none of them is refused (401). Workers present a projected token with
    audience ``tickwork``, which cannot be replayed to the API server; a pod's default
    token is issued for the API server, so accepting it means naming the API server's
    audience here as well."""

    cache_size: Annotated[int, Field(ge=1)] = 10_000
    """Answers each cache holds at most (least recently used go first)."""

    timeout_seconds: Annotated[float, Field(gt=0)] = 2.0
    """Seconds one review may take before the call is refused with 503
    auth-unavailable."""

    @field_validator("audiences", mode="before")
    @classmethod
    def _audiences(cls, value: Any) -> Any:
        found = _words(value)
        # An empty list would fall back to the API server's own audiences, so that a
        # token stolen from any pod would do: refuse it rather than widen silently.
        if isinstance(found, tuple) and not found:
            raise ValueError("give at least one audience (the default is tickwork)")
        return found


# --- the roles ---


class MigrateSettings(Settings):
    """``tickwork migrate``: create or upgrade the schema of every shard."""

    database: DatabaseSettings = DatabaseSettings()
    """Where the shards live."""

    log: LogSettings = LogSettings()
    """Logging."""


class ReshardSettings(Settings):
    """``tickwork reshard``: double the shard count in a maintenance window
    (``docs/operations.md``, resharding)."""

    database_urls: Annotated[
        tuple[str, ...],
        Field(
            description=(
                "PostgreSQL URL of the shards AFTER the reshard: once for all shards (a "
                "schema each), or once per shard in shard order, the existing shards "
                "first and then the new ones (the variable: space-separated)."
            )
        ),
        Option("--database-url", env="TICKWORK_DATABASE_URL"),
    ] = ()

    to: Annotated[int, Field(ge=2, le=4096), Option("--to")]
    """The shard count after the reshard: twice the shards there are."""

    dry_run: Annotated[bool, Option("--dry-run")] = False
    """Print what would move, shard by shard, and change nothing."""

    coordination: Annotated[
        Literal["kubernetes", "postgres"] | None,
        Option("--coordination", env="TICKWORK_COORDINATION"),
    ] = None
    """Where the schedulers' shard leases live, checked before anything moves (the
    ``postgres`` tables are always checked). Unset: ``kubernetes`` in a pod, else
    ``postgres``."""

    lease_namespace: LeaseNamespace = None
    """Namespace of the schedulers' Lease objects (``kubernetes``). Unset:
    ``$POD_NAMESPACE``, else ``tickwork``."""

    progress_every: Annotated[int, Field(ge=1)] = 1000
    """Log the counts of a shard every this many jobs looked at."""

    log: LogSettings = LogSettings()
    """Logging."""


class CoordinationSettings(Settings):
    """Shard ownership: which scheduler replica works on which shard, through one lease
    per shard (``docs/operations.md``, shard ownership). Unset values take the
    defaults of the deployment: inside a pod, Kubernetes and the pod's name and
    namespace."""

    backend: Annotated[
        Literal["kubernetes", "postgres"] | None,
        Option("--coordination", env="TICKWORK_COORDINATION"),
    ] = None
    """Where shard ownership lives: ``coordination.k8s.io`` Leases, or tables in each
    shard's schema. Unset: ``kubernetes`` in a pod (a service-account token is
    mounted), else ``postgres``."""

    lease_namespace: LeaseNamespace = None
    """Namespace of the Lease objects (``kubernetes``). Unset: ``$POD_NAMESPACE``, else
    ``tickwork``."""

    identity: Identity = None
    """This replica's name in the leases; unique per replica. Unset: ``$POD_NAME``,
    else ``hostname-pid``."""

    lease_seconds: Annotated[
        float, Field(ge=1, le=3600), Option("--lease-seconds", env="TICKWORK_LEASE_SECONDS")
    ] = 10.0
    """Duration of the shard and membership leases. A replica renews them every 30 % of
    it and stops writing to a shard 10 % of it before its lease can have expired for the
    others; a dead replica's shards are re-owned within about this long."""

    takeover_wait_seconds: Annotated[float, Field(gt=0)] = 1.0
    """A new owner waits this long for the old owner's transactions in flight on the
    shard, then ends the sessions still holding them (their process paused or cut off)."""

    stall_seconds: Annotated[float, Field(gt=0)] = 10.0
    """A scheduler transaction left idle this long (its process paused or cut off
    mid-way) is ended by the server."""


class SchedulerSettings(Settings):
    """``tickwork scheduler``: on the shards this replica owns, materialise cron runs,
    flip due runs to ready, reap expired leases, keep the attempt history's
    partitions."""

    database: DatabaseSettings = DatabaseSettings()
    """Where the shards live."""

    log: LogSettings = LogSettings()
    """Logging."""

    interval: Annotated[float, Field(gt=0), Option("--interval")] = 1.0
    """Seconds between passes over each owned shard (sooner when a run falls due
    before)."""

    batch: Annotated[int, Field(ge=1)] = 5000
    """Rows one step of a pass (due flip, reaper) changes at most."""

    retention_days: Annotated[
        int, Field(ge=1), Option("--retention-days", env="TICKWORK_RETENTION_DAYS")
    ] = 30
    """Days of run history kept (finished runs, attempts, the DLQ); older daily
    partitions are dropped."""

    audit_retention_days: Annotated[
        int, Field(ge=1), Option("--audit-retention-days", env="TICKWORK_AUDIT_RETENTION_DAYS")
    ] = 365
    """Days of audit log kept; older entries are deleted."""

    maintenance_interval: Annotated[float, Field(gt=0)] = 3600.0
    """Seconds between partition maintenances of a shard."""

    retry_base_seconds: Annotated[float, Field(ge=0)] = 0.25
    """A shard that failed a pass is tried again after a backoff from this..."""

    retry_max_seconds: Annotated[float, Field(ge=0)] = 5.0
    """...doubling up to this."""

    coordination: CoordinationSettings = CoordinationSettings()
    """Shard ownership."""

    health_host: Annotated[str, Option("--health-host", env="TICKWORK_HEALTH_HOST")] = "0.0.0.0"  # noqa: S104 - the kubelet probes the pod's address
    """Address the health port listens on."""

    health_port: Annotated[
        int, Field(ge=-1, le=65535), Option("--health-port", env="TICKWORK_HEALTH_PORT")
    ] = 8081
    """Port of ``/healthz`` (alive), ``/readyz`` (coordinating; names the shards whose
    database is down) and ``/metrics``; 0 picks a free port (printed), -1 serves none."""

    observe_interval: Annotated[float, Field(gt=0)] = 15.0
    """Seconds between reads of an owned shard's backlog, dead runs and canary."""

    operations_batch: Annotated[int, Field(ge=1)] = 500
    """Runs one batch (one transaction) of a bulk operation acts on."""

    operations_budget_seconds: Annotated[float, Field(gt=0)] = 0.25
    """Seconds of bulk-operation batches per pass and shard, so that a large operation
    never holds a shard's pass (its due flips, its reaping) up."""

    metrics: MetricsSettings = MetricsSettings()
    """Per-job metrics."""


class EdgeSettings(Settings):
    """What one API process accepts from the network (see ``docs/http-api.md``, the
    HTTP edge), whether it speaks TLS, and whom it believes about the scheme."""

    max_header_bytes: Annotated[int, Field(ge=1024)] = limits.MAX_HEADER_BYTES
    """Request line and headers together; more is answered 431."""

    header_timeout_seconds: Annotated[float, Field(gt=0)] = limits.HEADER_READ_TIMEOUT_SECONDS
    """From a connection's opening, or a request's first byte, to its last header;
    later is answered 408."""

    keep_alive_seconds: Annotated[int, Field(ge=1)] = 5
    """An idle keep-alive connection is closed after this long."""

    max_connections: Annotated[
        int, Field(ge=1), Option("--max-connections", env="TICKWORK_MAX_CONNECTIONS")
    ] = limits.MAX_CONNECTIONS
    """Open HTTP connections this process accepts; over it: 503 server-busy."""

    backlog: Annotated[int, Field(ge=1)] = 1024
    """Connections the kernel queues before the process accepts them."""

    linger_seconds: Annotated[float, Field(ge=0)] = 5.0
    """After an answer given before its request arrived whole: how long the rest is
    read (and thrown away) so the client can read the answer, before the close."""

    tls_cert_file: Annotated[
        Path | None, Option("--tls-cert", env="TICKWORK_TLS_CERT", path="file", exists=True)
    ] = None
    """PEM certificate (chain) to serve HTTPS with, together with ``--tls-key``; without
    both the API speaks plain HTTP."""

    tls_key_file: Annotated[
        Path | None,
        Field(validate_default=True),
        Option("--tls-key", env="TICKWORK_TLS_KEY", path="file", exists=True),
    ] = None
    """PEM private key of ``--tls-cert``."""

    tls_reload_seconds: Annotated[float, Field(gt=0)] = 60.0
    """Seconds between looks at the certificate and key files: a renewed pair (a
    Secret cert-manager rewrote) is served to new connections without a restart."""

    forwarded_allow_ips: Annotated[
        tuple[str, ...],
        # Not "127.0.0.1/::1", which reads as a network.
        Field(json_schema_extra={"shown": "127.0.0.1 ::1"}),
        Option("--forwarded-allow-ips", env="TICKWORK_FORWARDED_ALLOW_IPS"),
    ] = ("127.0.0.1", "::1")
    """Addresses or networks (``10.0.0.0/8``) of the proxies whose
    ``X-Forwarded-Proto`` and ``X-Forwarded-For`` are believed (the scheme and the
    client's address), repeatable or comma-separated; empty: nobody's. ``*`` believes
    every client, which lets anyone claim HTTPS (the dashboard's Secure cookies and
    Origin check rely on it) or another address."""

    @field_validator("forwarded_allow_ips", mode="before")
    @classmethod
    def _addresses(cls, value: Any) -> Any:
        found = _words(value, commas=True)
        if not isinstance(found, tuple):
            return found
        if "*" in found:
            if len(found) > 1:
                # uvicorn would read a "*" among addresses as a host name that never
                # matches: say so instead of trusting less than was asked.
                raise ValueError("'*' stands alone: it already trusts every address")
            return found
        for item in found:
            # uvicorn takes what it cannot parse for a host name, which never matches a
            # client address: a typo would silently trust nobody.
            if "/" in item:
                ipaddress.ip_network(item)
            else:
                ipaddress.ip_address(item)
        return found

    @field_validator("tls_key_file")
    @classmethod
    def _key_with_cert(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        if (info.data.get("tls_cert_file") is None) != (value is None):
            raise ValueError("--tls-cert and --tls-key go together")
        return value

    @property
    def tls(self) -> bool:
        return self.tls_cert_file is not None


class ApiSettings(Settings):
    """How the HTTP API serves its routes."""

    max_body_bytes: Annotated[int, Field(ge=1)] = limits.MAX_BODY_BYTES
    """A request body larger than this is refused (413)."""

    long_poll_recheck_seconds: Annotated[float, Field(gt=0)] = 5.0
    """A long-poll looks at the database at least this often, in case a notification
    was lost while a listening connection was being re-established."""

    default_page_size: Annotated[int, Field(ge=1, le=limits.MAX_PAGE_SIZE)] = (
        limits.DEFAULT_PAGE_SIZE
    )
    """``limit`` of a list call when not given."""

    enqueue_rate: Annotated[
        float, Field(gt=0), Option("--enqueue-rate", env="TICKWORK_ENQUEUE_RATE")
    ] = 1000.0
    """Enqueues per second per tenant, across every dispatcher (``enqueueRate`` per
    tenant in the tokens file); over it: 429 quota-exceeded."""

    enqueue_burst: Annotated[
        float, Field(ge=1), Option("--enqueue-burst", env="TICKWORK_ENQUEUE_BURST")
    ] = 5000.0
    """Enqueues a tenant may make at once above the rate (``enqueueBurst`` per tenant in
    the tokens file)."""

    max_pending_runs: Annotated[
        int, Field(ge=1), Option("--max-pending-runs", env="TICKWORK_MAX_PENDING_RUNS")
    ] = 1_000_000
    """Runs a tenant may have waiting (scheduled, ready, retry_wait); over it: 429
    quota-exceeded. The tokens file may set ``maxPendingRuns`` per tenant."""

    quota_overrides: Mapping[str, Mapping[str, int | float]] = Field(default_factory=dict)
    """Per-tenant quotas (``enqueue_rate``, ``enqueue_burst``, ``max_pending_runs``), as
    the tokens file gives them (``enqueueRate``, ...); not an option of its own."""

    priority_weights: Annotated[
        tuple[float, float, float],
        Option("--priority-weights", env="TICKWORK_PRIORITY_WEIGHTS"),
    ] = fairness.DEFAULT_WEIGHTS
    """Shares of claims for critical/default/bulk when all have ready work (written
    ``70/25/5``); an idle priority's share goes to the others."""

    queue_rate_limits: Annotated[
        tuple[str, ...], Option("--queue-rate-limit", env="TICKWORK_QUEUE_RATE_LIMITS")
    ] = ()
    """A queue's rate limit, ``QUEUE=LIMIT/SECONDS`` (``reports=100/60``): at most LIMIT
    runs of the queue leased in any SECONDS, across all tenants and dispatchers; give
    every dispatcher the same. Repeatable (the variable: space-separated)."""

    readiness_timeout_seconds: Annotated[float, Field(gt=0)] = 1.0
    """``/readyz`` answers within this many seconds even when a shard's link hangs."""

    auth_failure_burst: Annotated[
        int, Field(ge=1), Option("--auth-failure-burst", env="TICKWORK_AUTH_FAILURE_BURST")
    ] = 20
    """Failed authentications (unknown tokens, refused sign-ins) one client address may
    make at once; then its calls are refused with 429 too-many-auth-failures until
    ``auth_failure_rate`` gives it another."""

    auth_failure_rate: Annotated[
        float, Field(ge=0), Option("--auth-failure-rate", env="TICKWORK_AUTH_FAILURE_RATE")
    ] = 0.5
    """Failed authentications per second one client address may make beyond the burst
    (IPv6: per /64); 0 turns the throttle off."""

    body_timeout_seconds: Annotated[float, Field(gt=0)] = limits.BODY_READ_TIMEOUT_SECONDS
    """From a request's headers to the last byte of its body; later is answered 408."""

    ui_secret: Annotated[
        str | None, Field(min_length=32, repr=False), Option(env="TICKWORK_UI_SECRET")
    ] = None
    """The secret that seals dashboard session cookies: give every API replica the same
    one (at least 32 characters; from the environment only, never a flag, since a
    command line is visible to every user of the machine). Without it each process
    draws its own, and a session lasts as long as the process that signed it."""

    ui_session_seconds: Annotated[int, Field(ge=60)] = 8 * 3600
    """How long a dashboard session lasts."""

    ui_poll_seconds: Annotated[float, Field(gt=0)] = 5.0
    """How often an open dashboard page refreshes its live region."""

    @field_validator("priority_weights", mode="before")
    @classmethod
    def _weights(cls, value: Any) -> Any:
        return fairness.parse_weights(value) if isinstance(value, str) else value

    @field_validator("queue_rate_limits")
    @classmethod
    def _queue_rates(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(str(rule) for rule in queue_limits.parse_all(value).values())

    def queue_rates(self) -> dict[str, queue_limits.QueueRateLimit]:
        """The queue rate limits, by queue."""
        return queue_limits.parse_all(self.queue_rate_limits)

    def default_limits(self) -> TenantLimits:
        """The quotas of a tenant the tokens file says nothing about."""
        return TenantLimits(self.enqueue_rate, self.enqueue_burst, self.max_pending_runs)

    def tenant_limits(self) -> dict[str, TenantLimits]:
        """The quotas of the tenants the tokens file gives their own."""
        defaults = self.default_limits()
        return {
            tenant: dataclasses.replace(defaults, **given)  # type: ignore[arg-type]
            for tenant, given in self.quota_overrides.items()
        }


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """One tenant's quotas."""

    enqueue_rate: float = ApiSettings.model_fields["enqueue_rate"].default
    enqueue_burst: float = ApiSettings.model_fields["enqueue_burst"].default
    max_pending_runs: int = ApiSettings.model_fields["max_pending_runs"].default

    def __post_init__(self) -> None:
        if self.enqueue_rate <= 0 or self.enqueue_burst < 1 or self.max_pending_runs < 1:
            raise ValueError("quotas need enqueueRate > 0, enqueueBurst >= 1, maxPendingRuns >= 1")


class DispatcherSettings(Settings):
    """``tickwork dispatcher``: the HTTP API (stateless; run as many as needed)."""

    database: DatabaseSettings = DatabaseSettings()
    """Where the shards live."""

    log: LogSettings = LogSettings()
    """Logging."""

    host: Annotated[str, Option("--host")] = "0.0.0.0"  # noqa: S104 - a server role
    """Address to listen on."""

    port: Annotated[int, Field(ge=0, le=65535), Option("--port")] = 8080
    """Port to listen on (0: any free port)."""

    tokens_file: Annotated[
        Path | None, Option("--tokens", env="TICKWORK_TOKENS_FILE", path="file", exists=True)
    ] = None
    """YAML list of ``{token, tenant, role, queues}``, optionally with the tenant's
    ``enqueueRate``, ``enqueueBurst``, ``maxPendingRuns``; with ``--auth kubernetes`` it
    is asked first."""

    auth: Annotated[
        Literal["tokens", "kubernetes"] | None, Option("--auth", env="TICKWORK_AUTH")
    ] = None
    """``tokens``: the ``--tokens`` file decides. ``kubernetes``: ServiceAccount tokens
    are checked with TokenReview and each call authorised with SubjectAccessReview on
    the ``tickwork.dev`` API group (namespace = tenant). Default: ``kubernetes`` in a pod
    without ``--tokens``, else ``tokens``."""

    kubernetes: KubernetesAuthSettings = KubernetesAuthSettings()
    """Kubernetes-native authentication."""

    metrics: MetricsSettings = MetricsSettings()
    """Per-job metrics."""

    canary_interval: Annotated[float, Field(gt=0)] = 2.0
    """Seconds between the dispatcher's rounds completing the shards' canary runs."""

    api: ApiSettings = ApiSettings()
    """How the routes are served."""

    edge: EdgeSettings = EdgeSettings()
    """What the process accepts from the network."""


class WebhookSettings(Settings):
    """The operator's admission webhook (Kopf serves it) and who keeps its
    ``ValidatingWebhookConfiguration`` (``docs/kubernetes.md``, Admission)."""

    port: Annotated[int | None, Field(ge=0, le=65535), Option("--webhook-port")] = 9443
    """Port of the admission webhook; 0 turns the webhook off (embedded in a program,
    ``None`` takes any free port)."""

    bind: Annotated[str, Option("--webhook-bind")] = "0.0.0.0"  # noqa: S104 - from the API server
    """Address the webhook listens on."""

    host: Annotated[str | None, Option("--webhook-host")] = None
    """Host name the API server reaches the webhook at, written into a managed
    ``clientConfig.url`` (default: the bind address)."""

    insecure: Annotated[bool, Option("--webhook-insecure")] = False
    """Serve the webhook over plain HTTP (development and tests only)."""

    manage: Annotated[bool, Option("--webhook-manage/--no-webhook-manage")] = True
    """Create and update the ``ValidatingWebhookConfiguration`` (``clientConfig.url``);
    ``--no-webhook-manage`` leaves it to the Helm chart (``clientConfig.service`` and
    ``caBundle``)."""

    cert_file: Annotated[Path | None, Option("--webhook-cert", path="file", exists=True)] = None
    """PEM certificate of the webhook (with ``--webhook-key``); without both a
    self-signed one is made."""

    key_file: Annotated[Path | None, Option("--webhook-key", path="file", exists=True)] = None
    """PEM private key of ``--webhook-cert``."""

    ca_file: Annotated[Path | None, Option("--webhook-ca", path="file", exists=True)] = None
    """PEM certificate of the CA that signed ``--webhook-cert``: written as the
    configuration's ``caBundle`` (managed), or with ``--no-webhook-manage`` into the
    ``caBundle`` of the configuration the chart keeps, and again whenever the files
    change (the Helm chart's generated certificate)."""

    configuration: Annotated[
        str,
        Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"),
        Option("--webhook-configuration"),
    ] = "scheduledjobs.tickwork.dev"
    """Name of the ``ValidatingWebhookConfiguration`` the operator writes (managed) or
    whose ``caBundle`` it keeps (``--webhook-ca`` with ``--no-webhook-manage``); the
    Helm chart names one per release."""

    @field_validator("ca_file")
    @classmethod
    def _ca_signs_the_given_certificate(
        cls, value: Path | None, info: ValidationInfo
    ) -> Path | None:
        if value is not None and info.data.get("cert_file") is None:
            raise ValueError("needs --webhook-cert and --webhook-key (the pair the CA signed)")
        return value

    @property
    def enabled(self) -> bool:
        return self.port != 0


class LeaderElectionSettings(Settings):
    """The operator's replicas elect one leader through a ``coordination.k8s.io/v1``
    Lease, ``tickwork-operator`` (``docs/operations.md``, the operator): the leader runs
    the handlers, the status pass and the Events, the others stand by (and serve the
    admission webhook)."""

    enabled: Annotated[bool | None, Option("--leader-election/--no-leader-election")] = None
    """Elect a leader among the operator's replicas. Unset: on in a pod (a
    service-account token is mounted), off elsewhere (one operator)."""

    lease_namespace: LeaseNamespace = None
    """Namespace of the Lease. Unset: ``$POD_NAMESPACE``, else ``tickwork``."""

    identity: Identity = None
    """This replica's name in the Lease; unique per replica. Unset: ``$POD_NAME``, else
    ``hostname-pid``."""

    lease_seconds: Annotated[
        float, Field(ge=1, le=3600), Option("--lease-seconds", env="TICKWORK_LEASE_SECONDS")
    ] = 10.0
    """Duration of the Lease. The leader renews it every 30 % of it and stops writing
    10 % of it before it can have expired for the others; a dead leader is replaced
    within about this long plus one renew interval."""


class OperatorSettings(Settings):
    """``tickwork operator``: reconcile ScheduledJob objects into the shards, keep their
    status and Events, serve the admission webhook."""

    database: DatabaseSettings = DatabaseSettings()
    """Where the shards live."""

    log: LogSettings = LogSettings()
    """Logging."""

    namespaces: Annotated[tuple[str, ...], Option("--namespace")] = ()
    """Serve the ScheduledJobs of this namespace (repeatable); the command needs it or
    ``--all-namespaces`` (embedded in a program, none means every namespace)."""

    all_namespaces: Annotated[bool, Option("--all-namespaces")] = False
    """Serve the ScheduledJobs of every namespace."""

    webhook: WebhookSettings = WebhookSettings()
    """The admission webhook."""

    election: LeaderElectionSettings = LeaderElectionSettings()
    """Leader election between the operator's replicas."""

    status_interval: Annotated[float, Field(ge=0.1), Option("--status-interval")] = 10.0
    """Seconds between status passes (the run-derived status of the jobs whose runs
    changed)."""

    health_port: Annotated[int | None, Field(ge=0, le=65535), Option("--health-port")] = 8081
    """Port of ``/healthz`` (alive), ``/readyz`` (the leader: watching, store reachable;
    a standby: it reaches the Lease and serves admission) and ``/metrics``; 0: any free
    port (embedded in a program, ``None`` serves none)."""

    health_bind: str = "0.0.0.0"  # noqa: S104 - probed by the kubelet
    """Address the health server listens on."""

    kubeconfig: Annotated[
        Path | None, Option("--kubeconfig", env="KUBECONFIG", path="file", exists=True)
    ] = None
    """kubeconfig file; without it ``~/.kube/config``, else the pod's service account."""

    store_retry_seconds: Annotated[float, Field(gt=0)] = 5.0
    """While the store is down, an object's reconcile (and the resync at start) is
    tried again after this long."""

    readiness_timeout_seconds: Annotated[float, Field(gt=0)] = 1.0
    """``/readyz`` answers within this many seconds even when a shard's link hangs."""


DEV_SHARD_COUNT: Final = 4


class DevSettings(Settings):
    """``tickwork dev``: every role in one process, on an embedded PostgreSQL unless
    given a database."""

    port: Annotated[int, Field(ge=0, le=65535), Option("--port")] = 8080
    """API port (the API listens on 127.0.0.1)."""

    shards: Annotated[int, Field(ge=1, le=64), Option("--shards", env="TICKWORK_SHARDS")] = (
        DEV_SHARD_COUNT
    )
    """Number of shards (fixed when the data dir is first migrated)."""

    data_dir: Annotated[Path, Option("--data-dir", path="dir")] = Path(".tickwork/dev")
    """Where the embedded PostgreSQL keeps its data, and the generated admin token."""

    database_urls: Annotated[
        tuple[str, ...],
        Field(
            description="Use this PostgreSQL instead of the embedded one: once for all "
            "shards, or once per shard (the variable: space-separated)."
        ),
        Option("--database-url", env="TICKWORK_DATABASE_URL"),
    ] = ()

    manifest_dir: Annotated[Path | None, Option("--manifests", path="dir", exists=True)] = None
    """Folder of ScheduledJob YAML (reloaded on change)."""

    tokens_file: Annotated[
        Path | None, Option("--tokens", env="TICKWORK_TOKENS_FILE", path="file", exists=True)
    ] = None
    """Tokens file; without it an admin token is generated once and kept in the data
    dir."""

    demo_worker: Annotated[bool, Option("--demo-worker")] = False
    """Also run the demo worker for the example jobs (with a worker token of its own),
    and enqueue one run of each job at start."""

    api: ApiSettings = ApiSettings()
    """How the routes are served."""

    log: LogSettings = LogSettings()
    """Logging."""

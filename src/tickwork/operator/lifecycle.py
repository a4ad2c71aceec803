"""What the Helm chart's hook Jobs run, in the tickwork image, each as a ServiceAccount
of its own: ``python -m tickwork.operator.lifecycle secrets|uninstall``.

``secrets`` (pre-install, pre-upgrade) creates the Secrets a render must not hold.
Anything a template draws at random (``randAlphaNum``, ``genCA``) differs from one
render to the next, and a GitOps tool renders at every sync: Argo CD would rotate the
bundled database's password and the webhook's certificate each time, and ``lookup``,
which Helm uses to keep them, answers nothing there. So the chart renders none of
them; this creates each once, when it is absent, and leaves it as it is afterwards:

- the bundled PostgreSQL's password, and the URL the roles read built from it (the
  database keeps the password it was initialised with, so it must never change);
- the dashboard's session secret, shared by every dispatcher so a session opened on one
  replica is good on the others;
- the admission webhook's CA and serving certificate for its Service's names (ten
  years); the operator's leader writes the CA into the webhook configuration's
  ``caBundle``.

A Secret an older chart rendered is adopted: kept as it is, and annotated so that
neither Helm nor Argo CD deletes it when the new chart no longer renders it. Created
ones carry Helm's ownership metadata too, so a later value that makes the chart render
the Secret itself (a given password) takes it over instead of failing on it.

``uninstall`` (post-delete) removes the operator's finalizer from every ScheduledJob,
which nothing would remove once the operator is gone: the objects, their namespaces
and (when the chart does not keep it) the CRD could not be deleted. It first waits
until no operator replica leads (the Lease ``tickwork-operator`` free for a whole lease
duration): a leader still stopping would put the finalizer back. The jobs stay in the
database; a new install's operator puts the finalizers back on the objects still there
and removes the jobs whose object is gone.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import logging
import secrets
import string
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tickwork.coordination.leader import OPERATOR_LEASE
from tickwork.engine import manifests
from tickwork.operator.cluster import MERGE_PATCH, Cluster
from tickwork.operator.handlers import FINALIZER

logger = logging.getLogger("tickwork.operator.lifecycle")

# Neither Helm (when a chart stops rendering it) nor Argo CD (pruning what is not in
# Git, or reporting it as extraneous) deletes a Secret with these.
KEEP: Final = {
    "helm.sh/resource-policy": "keep",
    "argocd.argoproj.io/sync-options": "Prune=false",
    "argocd.argoproj.io/compare-options": "IgnoreExtraneous",
}
RELEASE_LABEL: Final = "tickwork.dev/release"
PASSWORD_KEY: Final = "postgres-password"  # noqa: S105 - a key's name
UI_KEY: Final = "secret"
TLS_KEYS: Final = ("ca.crt", "tls.crt", "tls.key")
CERTIFICATE_DAYS: Final = 3650
_ALPHANUMERIC: Final = string.ascii_letters + string.digits


def password(length: int = 32) -> str:
    """Letters and digits only: it goes into a URL unquoted."""
    return "".join(secrets.choice(_ALPHANUMERIC) for _ in range(length))


@dataclass(frozen=True)
class Wanted:
    """One Secret ``secrets`` keeps: ``complete`` gives its whole data from what it
    holds now (empty when absent), keeping every value already there that is usable."""

    name: str
    type: str
    complete: Callable[[Mapping[str, str]], dict[str, str]]


def database_secret(
    name: str, key: str, host: str, user: str, database: str, port: int = 5432
) -> Wanted:
    """The bundled PostgreSQL's password and the URL every role reads (``key``)."""

    def complete(held: Mapping[str, str]) -> dict[str, str]:
        chosen = held.get(PASSWORD_KEY) or password()
        url = f"postgresql://{user}:{chosen}@{host}:{port}/{database}"
        return {PASSWORD_KEY: chosen, key: held.get(key) or url}

    return Wanted(name, "Opaque", complete)


def ui_secret(name: str) -> Wanted:
    """The dashboard's session secret (``TICKWORK_UI_SECRET``, 32 characters or more)."""

    def complete(held: Mapping[str, str]) -> dict[str, str]:
        found = held.get(UI_KEY, "")
        return {UI_KEY: found if len(found) >= 32 else secrets.token_urlsafe(36)}

    return Wanted(name, "Opaque", complete)


def webhook_secret(name: str, service: str, namespace: str) -> Wanted:
    """A CA and the webhook Service's serving certificate (``kubernetes.io/tls``, with
    ``ca.crt``); a partial one is replaced whole, its parts must match."""

    def complete(held: Mapping[str, str]) -> dict[str, str]:
        if all(held.get(key) for key in TLS_KEYS):
            return {key: held[key] for key in TLS_KEYS}
        return certificate(service, namespace)

    return Wanted(name, "kubernetes.io/tls", complete)


def service_names(service: str, namespace: str) -> list[str]:
    """The names the API server may use for a Service (it uses ``<svc>.<ns>.svc``)."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def certificate(
    service: str, namespace: str, now: dt.datetime | None = None, days: int = CERTIFICATE_DAYS
) -> dict[str, str]:
    """A new CA and a serving certificate it signed for ``service``'s names, as the
    PEM texts of a ``kubernetes.io/tls`` Secret."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    start = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(hours=1)  # clock skew
    end = start + dt.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{service} CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = service_names(service, namespace)
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[2])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    encoding = serialization.Encoding.PEM
    return {
        "ca.crt": ca.public_bytes(encoding).decode(),
        "tls.crt": leaf.public_bytes(encoding).decode(),
        "tls.key": key.private_bytes(
            encoding, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode(),
    }


def _decoded(data: Mapping[str, str] | None) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in (data or {}).items()}


def _encoded(data: Mapping[str, str]) -> dict[str, str]:
    return {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}


async def ensure_secrets(
    api: client.ApiClient, namespace: str, release: str, wanted: Sequence[Wanted]
) -> dict[str, str]:
    """Create each wanted Secret that is absent, complete or adopt those that are not
    as wanted; what was done to each (``created``, ``completed``, ``adopted``, ``kept``)."""
    core = client.CoreV1Api(api)
    done: dict[str, str] = {}
    for secret in wanted:
        for attempt in (1, 2):
            try:
                found = await core.read_namespaced_secret(secret.name, namespace)
            except ApiException as error:
                if error.status != 404:
                    raise
                found = None
            if found is None:
                body = {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "type": secret.type,
                    "metadata": {
                        "name": secret.name,
                        "namespace": namespace,
                        "labels": {
                            "app.kubernetes.io/part-of": "tickwork",
                            "app.kubernetes.io/managed-by": "Helm",
                            RELEASE_LABEL: release,
                        },
                        "annotations": {
                            **KEEP,
                            "meta.helm.sh/release-name": release,
                            "meta.helm.sh/release-namespace": namespace,
                        },
                    },
                    "data": _encoded(secret.complete({})),
                }
                try:
                    await core.create_namespaced_secret(namespace, body)  # type: ignore[arg-type]
                except ApiException as error:
                    if error.status == 409 and attempt == 1:
                        continue  # made meanwhile (another run of the hook): look again
                    raise
                done[secret.name] = "created"
                break
            held = _decoded(found.data)
            data = secret.complete(held)
            changed = {k: v for k, v in data.items() if held.get(k) != v}
            annotations = found.metadata.annotations or {}
            missing = {k: v for k, v in KEEP.items() if annotations.get(k) != v}
            if not changed and not missing:
                done[secret.name] = "kept"
                break
            patch: dict[str, Any] = {
                "metadata": {
                    "annotations": missing,
                    # Optimistic concurrency: a Secret changed since the read is read again.
                    "resourceVersion": found.metadata.resource_version,
                }
            }
            if changed:
                patch["data"] = _encoded(changed)
            try:
                await core.patch_namespaced_secret(
                    secret.name,
                    namespace,
                    patch,
                    _content_type=MERGE_PATCH,  # type: ignore[call-arg]
                )
            except ApiException as error:
                if error.status in (404, 409) and attempt == 1:
                    continue
                raise
            done[secret.name] = "completed" if changed else "adopted"
            break
    return done


# --- uninstall ---


Clock = Callable[[], dt.datetime]
Sleep = Callable[[float], Awaitable[None]]


class StillLeading(Exception):
    """An operator replica still holds its Lease: removing finalizers would race it."""


def _utc(value: dt.datetime) -> dt.datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


async def wait_until_no_leader(
    api: client.ApiClient,
    namespace: str,
    *,
    lease: str = OPERATOR_LEASE,
    patience: float = 240.0,
    poll: float = 1.0,
    now: Clock | None = None,
    sleep: Sleep = asyncio.sleep,
) -> None:
    """Return once the Lease ``lease`` has been free (absent, released or expired) for
    a whole lease duration, in which any replica left would have taken it; raise
    ``StillLeading`` after ``patience`` seconds (of ``now``'s clock: a test moves it)."""
    clock = now or (lambda: dt.datetime.now(dt.UTC))
    leases = client.CoordinationV1Api(api)
    start = clock()
    free_since: dt.datetime | None = None
    while True:
        at = clock()
        try:
            found = await leases.read_namespaced_lease(lease, namespace)
        except ApiException as error:
            if error.status != 404:
                raise
            return  # no operator ever led here
        spec = found.spec
        duration = dt.timedelta(seconds=spec.lease_duration_seconds or 10)
        holder = spec.holder_identity or None
        expired = spec.renew_time is None or _utc(spec.renew_time) + duration <= at
        if holder is not None and not expired:
            free_since = None
        else:
            free_since = free_since or at
            if at - free_since >= duration:
                return
        if (at - start).total_seconds() >= patience:
            raise StillLeading(
                f"the operator's Lease {namespace}/{lease} is still held by {holder} "
                f"after {patience:.0f} s: is an operator of this release still running?"
            )
        await sleep(poll)


async def release_finalizers(api: client.ApiClient, namespaces: Sequence[str] = ()) -> int:
    """Remove the operator's finalizer from every ScheduledJob in ``namespaces`` (empty:
    every namespace); the number of objects changed."""
    custom = client.CustomObjectsApi(api)
    group, version, plural = manifests.API_GROUP, manifests.API_VERSION, manifests.PLURAL
    try:
        if namespaces:
            items: list[dict[str, Any]] = []
            for namespace in namespaces:
                listed = await custom.list_namespaced_custom_object(
                    group, version, namespace, plural
                )
                items += listed["items"]
        else:
            items = (await custom.list_cluster_custom_object(group, version, plural))["items"]
    except ApiException as error:
        if error.status == 404:
            return 0  # no CRD, so no object
        raise
    released = 0
    for item in items:
        meta = item["metadata"]
        for _ in range(5):
            finalizers = list(meta.get("finalizers") or [])
            if FINALIZER not in finalizers:
                break
            patch = {
                "metadata": {
                    "finalizers": [f for f in finalizers if f != FINALIZER] or None,
                    # Another controller's finalizer added meanwhile is kept: read again.
                    "resourceVersion": meta["resourceVersion"],
                }
            }
            try:
                await custom.patch_namespaced_custom_object(
                    group,
                    version,
                    meta["namespace"],
                    plural,
                    meta["name"],
                    patch,
                    _content_type=MERGE_PATCH,  # type: ignore[call-arg]
                )
            except ApiException as error:
                if error.status == 404:
                    break
                if error.status != 409:
                    raise
                try:
                    fresh = await custom.get_namespaced_custom_object(
                        group, version, meta["namespace"], plural, meta["name"]
                    )
                except ApiException as gone:
                    if gone.status == 404:
                        break
                    raise
                meta = fresh["metadata"]
                continue
            released += 1
            logger.info(
                "removed the finalizer of ScheduledJob %s/%s",
                meta["namespace"],
                meta["name"],
                extra={"action": "uninstall-finalizer-removed"},
            )
            break
    return released


# --- the command ---


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tickwork.operator.lifecycle",
        description="What the Helm chart's hook Jobs run.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    made = commands.add_parser("secrets", help="create the Secrets a render must not hold")
    made.add_argument("--namespace", required=True)
    made.add_argument("--release", required=True)
    made.add_argument("--database", help="Secret of the bundled PostgreSQL's password and URL")
    made.add_argument("--database-key", default="urls")
    made.add_argument("--postgresql-host")
    made.add_argument("--postgresql-user", default="tickwork")
    made.add_argument("--postgresql-database", default="tickwork")
    made.add_argument("--ui", help="Secret of the dashboard's session secret")
    made.add_argument("--webhook", help="Secret of the webhook's CA and certificate")
    made.add_argument("--webhook-service")
    gone = commands.add_parser("uninstall", help="release the operator's finalizers")
    gone.add_argument("--lease-namespace", required=True)
    gone.add_argument("--namespace", action="append", default=[], dest="namespaces")
    gone.add_argument("--patience", type=float, default=240.0, help="seconds to wait for no leader")
    parser.add_argument("--kubeconfig")
    return parser


def wanted_of(args: argparse.Namespace) -> list[Wanted]:
    found: list[Wanted] = []
    if args.database:
        if not args.postgresql_host:
            raise SystemExit("--database needs --postgresql-host")
        found.append(
            database_secret(
                args.database,
                args.database_key,
                args.postgresql_host,
                args.postgresql_user,
                args.postgresql_database,
            )
        )
    if args.ui:
        found.append(ui_secret(args.ui))
    if args.webhook:
        if not args.webhook_service:
            raise SystemExit("--webhook needs --webhook-service")
        found.append(webhook_secret(args.webhook, args.webhook_service, args.namespace))
    return found


async def run(args: argparse.Namespace) -> None:
    cluster = await Cluster.connect(args.kubeconfig)
    try:
        if args.command == "secrets":
            done = await ensure_secrets(cluster.api, args.namespace, args.release, wanted_of(args))
            for name, outcome in done.items():
                logger.info("Secret %s: %s", name, outcome, extra={"action": f"secret-{outcome}"})
            return
        await wait_until_no_leader(cluster.api, args.lease_namespace, patience=args.patience)
        released = await release_finalizers(cluster.api, args.namespaces)
        logger.info(
            "no operator leads: the finalizer of %d ScheduledJob(s) removed",
            released,
            extra={"action": "uninstall-done"},
        )
    finally:
        await cluster.close()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        asyncio.run(run(args))
    except StillLeading as error:
        logger.error("%s", error)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

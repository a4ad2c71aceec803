"""Admission: the checks CEL cannot make, and the webhook configuration that asks them.

``refusal`` decides one AdmissionReview: an UPDATE that leaves ``spec`` as it was
(finalizers, status, labels) or that carries ``deletionTimestamp`` is always allowed,
so an invalid object can still be finalised and deleted; anything else must parse as a
ScheduledJob (cron syntax, IANA zone, payload size and content, name and namespace
rules), and a refusal names the field (``spec.schedule.cron: ...``).

Kopf serves the webhook (``on.validate``); ``ManagedWebhook`` keeps the
``ValidatingWebhookConfiguration`` (``scheduledjobs.tickwork.dev`` unless named
otherwise) pointing at it. Kopf's own managed mode cannot set the contract's
``timeoutSeconds: 5`` (it writes 30) and removes the webhooks on exit, so the operator
writes the configuration itself, with Kopf's naming
(``<handler-id>.scheduledjobs.tickwork.dev``, the handler id as the URL path) and the
client config Kopf's server yields (its URL and CA bundle).

Under the Helm chart the configuration is the chart's (``clientConfig.service``, one
per release) and only its ``caBundle`` is the operator's: the chart cannot render a
certificate that stays the same from one render to the next, so a hook generates it
into a Secret at install and the leader writes its CA where the API server reads it.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import urllib.parse
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from types import TracebackType
from typing import Any, Final, Protocol

from tickwork.engine import manifests
from tickwork.engine.manifests import ManifestError

logger = logging.getLogger("tickwork.operator.admission")

CONFIGURATION_NAME: Final = f"{manifests.PLURAL}.{manifests.API_GROUP}"
HANDLER_ID: Final = "validate"
TIMEOUT_SECONDS: Final = 5
# A refusal is the object's fault: 4xx. Kopf's AdmissionError would answer 500.
REFUSAL_CODE: Final = 422
OPERATIONS: Final = ("CREATE", "UPDATE")


def refusal(
    operation: str,
    new: Mapping[str, Any] | None,
    old: Mapping[str, Any] | None,
    parse: Callable[[Mapping[str, Any], str], object],
) -> str | None:
    """Why the API server should refuse this CREATE or UPDATE (None: allow it)."""
    if new is None or operation not in OPERATIONS:
        return None
    if operation == "UPDATE":
        if (new.get("metadata") or {}).get("deletionTimestamp") is not None:
            return None
        if old is not None and old.get("spec") == new.get("spec"):
            return None
    meta = new.get("metadata") or {}
    try:
        parse(new, f"ScheduledJob {meta.get('namespace')}/{meta.get('name')}")
    except ManifestError as error:
        return error.detail
    return None


def configuration(
    client_config: Mapping[str, Any],
    namespaces: Collection[str] = (),
    name: str = CONFIGURATION_NAME,
) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration ``name`` for a webhook server's client
    config; with ``namespaces``, only objects in those namespaces are sent to it."""
    webhook: dict[str, Any] = {
        "name": f"{HANDLER_ID}.{CONFIGURATION_NAME}",
        "clientConfig": _with_handler_path(client_config, HANDLER_ID),
        "rules": [
            {
                "apiGroups": [manifests.API_GROUP],
                "apiVersions": [manifests.API_VERSION],
                "resources": [manifests.PLURAL],
                "operations": list(OPERATIONS),
                "scope": "Namespaced",
            }
        ],
        # An operator outage must not block every apply: the InvalidSpec status is the
        # backstop for what gets in meanwhile.
        "failurePolicy": "Ignore",
        "timeoutSeconds": TIMEOUT_SECONDS,
        "sideEffects": "None",
        "matchPolicy": "Equivalent",
        "admissionReviewVersions": ["v1"],
    }
    if namespaces:
        webhook["namespaceSelector"] = {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "In",
                    "values": sorted(namespaces),
                }
            ]
        }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "tickwork"},
        },
        "webhooks": [webhook],
    }


def _with_handler_path(client_config: Mapping[str, Any], handler_id: str) -> dict[str, Any]:
    """Kopf's server routes a request by the handler id at the end of the URL path."""
    config = copy.deepcopy(dict(client_config))
    suffix = urllib.parse.quote(handler_id)
    if config.get("url") is not None:
        config["url"] = f"{str(config['url']).rstrip('/')}/{suffix}"
    service = config.get("service")
    if isinstance(service, dict):
        service["path"] = f"{service.get('path', '')}/{suffix}"
    return config


class WebhookServer(Protocol):
    """Kopf's webhook server protocol (``kopf.WebhookServer`` and its kin)."""

    def __call__(self, fn: Any) -> AsyncIterator[Any]: ...


class Applier(Protocol):
    async def apply_validating_webhook(self, configuration: Mapping[str, Any]) -> None: ...

    async def keep_ca_bundle(self, name: str, ca_bundle: str) -> bool: ...


class ManagedWebhook:
    """Wraps Kopf's webhook server: every client config it yields (at start, and when
    its certificate files change) is written into the webhook configuration, whole or
    (``ca_bundle_only``: the chart keeps the rest) its ``caBundle`` alone."""

    def __init__(
        self,
        server: WebhookServer,
        cluster: Applier | None,
        namespaces: Collection[str] = (),
        retry_seconds: float = 5.0,
        *,
        name: str = CONFIGURATION_NAME,
        ca_bundle_only: bool = False,
    ) -> None:
        self.server = server
        self.cluster = cluster  # None: the configuration is kept elsewhere (the chart)
        self.namespaces = tuple(namespaces)
        self.retry_seconds = retry_seconds
        self.name = name
        self.ca_bundle_only = ca_bundle_only
        self._inner: Any = server
        self._latest: Mapping[str, Any] | None = None
        self._changed = asyncio.Event()
        # Test signal: set once the configuration points at the running server.
        self.configured = asyncio.Event()

    async def __aenter__(self) -> ManagedWebhook:
        enter = getattr(self.server, "__aenter__", None)
        if enter is not None:
            self._inner = await enter()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        leave = getattr(self.server, "__aexit__", None)
        return None if leave is None else bool(await leave(exc_type, exc, tb))

    async def __call__(self, fn: Any) -> AsyncIterator[Any]:
        async for client_config in self._inner(fn):
            self._latest = client_config
            self._changed.set()
            yield client_config

    @property
    def client_config(self) -> Mapping[str, Any] | None:
        """How the API server reaches this replica's webhook server (None: not up yet)."""
        return self._latest

    def rewrite(self) -> None:
        """Write the configuration again at the next chance (a new leader's)."""
        if self._latest is not None:
            self._changed.set()

    async def keep(self, stop: asyncio.Event) -> None:
        """Write the configuration whenever the server's client config changes."""
        if self.cluster is None:
            return
        stopping = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                changed = asyncio.create_task(self._changed.wait())
                await asyncio.wait({changed, stopping}, return_when=asyncio.FIRST_COMPLETED)
                changed.cancel()
                if stop.is_set() or self._latest is None:
                    continue
                self._changed.clear()
                try:
                    where = await self._write(self._latest)
                except Exception as error:
                    logger.warning(
                        "cannot write the webhook configuration %s (retrying in %.0f s): %s",
                        self.name,
                        self.retry_seconds,
                        error,
                        extra={"action": "webhook-config-error"},
                    )
                    self._changed.set()
                    await asyncio.wait({stopping}, timeout=self.retry_seconds)
                    continue
                if where is not None:
                    logger.info(
                        "webhook configuration %s %s",
                        self.name,
                        where,
                        extra={"action": "webhook-configured"},
                    )
                self.configured.set()
        finally:
            stopping.cancel()

    async def _write(self, client_config: Mapping[str, Any]) -> str | None:
        """Write what is this replica's to write; what changed (None: nothing did)."""
        assert self.cluster is not None
        if self.ca_bundle_only:
            bundle = client_config.get("caBundle")
            if not bundle:
                return None
            changed = await self.cluster.keep_ca_bundle(self.name, str(bundle))
            return "trusts the webhook's CA" if changed else None
        wanted = configuration(client_config, self.namespaces, self.name)
        await self.cluster.apply_validating_webhook(wanted)
        return f"points at {wanted['webhooks'][0]['clientConfig'].get('url', 'its service')}"

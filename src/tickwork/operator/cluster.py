"""The Kubernetes API as the operator uses it outside Kopf's handlers: the initial
listing, batched status writes, Events and the webhook configuration.

One identity for everything, loaded as every role loads it (``coordination.kubeconfig``):
the kubeconfig, else the pod's service account; Kopf logs in with the same credentials
(``connection_info``), re-read whenever Kopf asks again (tokens rotate).

The writes (status, Events, the webhook configuration) are the leader's: with
``may_write`` set, each is refused (``NotLeading``) once this replica may no longer
write, so a leader that lost its Lease stops writing at that instant.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
import kopf
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tickwork.coordination import kubeconfig as kubeconfigs
from tickwork.engine import manifests

GROUP: Final = manifests.API_GROUP
VERSION: Final = manifests.API_VERSION
PLURAL: Final = manifests.PLURAL
MERGE_PATCH: Final = "application/merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
# An answer of the API server, or no answer at all.
_FAILURES: Final = (ApiException, aiohttp.ClientError, TimeoutError)


class ClusterError(Exception):
    """The Kubernetes API refused or could not be reached."""


class NotServed(ClusterError):
    """The API server does not serve ScheduledJobs: the CRD is not installed."""


class NotLeading(ClusterError):
    """A write refused here: this replica is not (or no longer) the leader."""


async def load_configuration(kubeconfig: str | None) -> client.Configuration:
    try:
        return await kubeconfigs.load_configuration(kubeconfig)
    except kubeconfigs.KubeconfigError as error:
        raise ClusterError(str(error)) from error


async def connection_info(configuration: client.Configuration) -> kopf.ConnectionInfo:
    """Kopf's credentials from a client configuration (as kopf.login_via_async_client
    does it for the default configuration)."""
    header = await configuration.get_api_key_with_prefix("BearerToken")
    parts = header.split(" ", 1) if header else []
    scheme: str | None = parts[0] if len(parts) == 2 else None
    token: str | None = parts[-1] if parts else None
    assert configuration.host is not None
    return kopf.ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        username=configuration.username or None,
        password=configuration.password or None,
        scheme=scheme,
        token=token,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
    )


@dataclass
class Cluster:
    """An authenticated client of the Kubernetes API."""

    kubeconfig: str | None
    api: client.ApiClient
    # None: every write goes out (one operator, no election).
    may_write: Callable[[], bool] | None = None

    @classmethod
    async def connect(cls, kubeconfig: str | None = None) -> Cluster:
        configuration = await load_configuration(kubeconfig)
        return cls(kubeconfig, client.ApiClient(configuration))

    async def close(self) -> None:
        await self.api.close()

    async def connection_info(self) -> kopf.ConnectionInfo:
        """Fresh credentials for Kopf (re-read: a rotated token is picked up)."""
        return await connection_info(await load_configuration(self.kubeconfig))

    def _check_leading(self, what: str) -> None:
        if self.may_write is not None and not self.may_write():
            raise NotLeading(f"cannot {what}: this replica is not the leader")

    @property
    def _custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    async def list_scheduled_jobs(self, namespaces: Collection[str]) -> list[dict[str, Any]]:
        """Every ScheduledJob in ``namespaces`` (empty: all namespaces)."""
        try:
            if not namespaces:
                listed = await self._custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
                return list(listed["items"])
            found: list[dict[str, Any]] = []
            for namespace in namespaces:
                listed = await self._custom.list_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL
                )
                found += listed["items"]
            return found
        except _FAILURES as error:
            if isinstance(error, ApiException) and error.status == 404:
                raise NotServed(
                    "the API server does not serve ScheduledJobs: install the CRD first "
                    "(kubectl apply -f crds/scheduledjob.yaml)"
                ) from error
            raise _error("list ScheduledJobs", error) from error

    async def get_scheduled_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """One ScheduledJob as the API server has it now; None if there is none."""
        try:
            found: dict[str, Any] = await self._custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name
            )
        except _FAILURES as error:
            if isinstance(error, ApiException) and error.status == 404:
                return None
            raise _error(f"read {namespace}/{name}", error) from error
        return found

    async def patch_status(
        self, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Merge-patch a ScheduledJob's status; None if the object is gone."""
        self._check_leading(f"patch the status of {namespace}/{name}")
        try:
            result: dict[str, Any] = await self._custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                {"status": dict(patch)},
                # Else the client sends a strategic merge patch, which custom resources
                # refuse (415); the stubs do not know the keyword.
                _content_type=MERGE_PATCH,  # type: ignore[call-arg]
            )
        except _FAILURES as error:
            if isinstance(error, ApiException) and error.status == 404:
                return None
            raise _error(f"patch the status of {namespace}/{name}", error) from error
        return result

    async def create_event(self, namespace: str, event: Mapping[str, Any]) -> None:
        self._check_leading(f"create an Event in {namespace}")
        try:
            # Plain JSON goes through the client as it is; the stubs want its models.
            await client.CoreV1Api(self.api).create_namespaced_event(
                namespace,
                dict(event),  # type: ignore[arg-type]
            )
        except _FAILURES as error:
            raise _error(f"create an Event in {namespace}", error) from error

    async def apply_validating_webhook(self, configuration: Mapping[str, Any]) -> None:
        """Create the ValidatingWebhookConfiguration, or replace its webhooks."""
        admission = client.AdmissionregistrationV1Api(self.api)
        name = configuration["metadata"]["name"]
        self._check_leading(f"write the webhook configuration {name}")
        try:
            await admission.create_validating_webhook_configuration(
                dict(configuration)  # type: ignore[arg-type]
            )
            return
        except _FAILURES as error:
            if not (isinstance(error, ApiException) and error.status == 409):
                raise _error(f"create the webhook configuration {name}", error) from error
        try:
            await admission.patch_validating_webhook_configuration(
                name,
                {"webhooks": configuration["webhooks"]},
                _content_type=MERGE_PATCH,  # type: ignore[call-arg]
            )
        except _FAILURES as error:
            raise _error(f"update the webhook configuration {name}", error) from error

    async def keep_ca_bundle(self, name: str, ca_bundle: str) -> bool:
        """Write ``ca_bundle`` into every webhook of the ValidatingWebhookConfiguration
        ``name``, which someone else keeps (the chart): a JSON patch of that field
        alone, each entry tested by name first, so a concurrent change of the rest is
        neither lost nor overwritten. False when each already had it (no write)."""
        admission = client.AdmissionregistrationV1Api(self.api)
        self._check_leading(f"write the caBundle of {name}")
        try:
            found = await admission.read_validating_webhook_configuration(name)
        except _FAILURES as error:
            if isinstance(error, ApiException) and error.status == 404:
                raise ClusterError(
                    f"the webhook configuration {name} does not exist (yet): "
                    "the chart creates it with the release"
                ) from error
            raise _error(f"read the webhook configuration {name}", error) from error
        operations: list[dict[str, Any]] = []
        for index, webhook in enumerate(found.webhooks or []):
            if webhook.client_config.ca_bundle == ca_bundle:
                continue
            path = f"/webhooks/{index}"
            operations.append({"op": "test", "path": f"{path}/name", "value": webhook.name})
            operations.append(
                {"op": "add", "path": f"{path}/clientConfig/caBundle", "value": ca_bundle}
            )
        if not operations:
            return False
        try:
            await admission.patch_validating_webhook_configuration(
                name,
                operations,
                _content_type=JSON_PATCH,  # type: ignore[call-arg]
            )
        except _FAILURES as error:
            raise _error(f"write the caBundle of {name}", error) from error
        return True


def _error(what: str, error: Exception) -> ClusterError:
    if isinstance(error, ApiException):
        return ClusterError(f"cannot {what}: {error.status} {error.reason}")
    return ClusterError(f"cannot {what}: {error!r}")

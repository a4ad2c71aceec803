"""The official clients against the emulator: ``kubernetes`` (sync, off the event loop)
and ``kubernetes_asyncio``, with the kubeconfig the fixture writes."""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import kubernetes
import kubernetes_asyncio
import pytest
from kubernetes import client as sync_client
from kubernetes import watch as sync_watch
from kubernetes_asyncio import client as async_client
from kubernetes_asyncio import watch as async_watch

from kube import emulator, samples

GROUP, VERSION = samples.GROUP, "v1"


@pytest.fixture
def api(kube: emulator.Emulator) -> Iterator[sync_client.ApiClient]:
    assert kube.kubeconfig is not None
    client = kubernetes.config.new_client_from_config(config_file=str(kube.kubeconfig))
    yield client
    client.close()


@pytest.fixture
async def async_api(kube: emulator.Emulator) -> AsyncIterator[async_client.ApiClient]:
    assert kube.kubeconfig is not None
    client = await kubernetes_asyncio.config.new_client_from_config(
        config_file=str(kube.kubeconfig)
    )
    async with client:
        yield client


def lease_body(name: str, holder: str) -> sync_client.V1Lease:
    now = datetime.datetime.now(datetime.UTC)
    return sync_client.V1Lease(
        metadata=sync_client.V1ObjectMeta(
            name=name, labels={"app.kubernetes.io/managed-by": "tickwork"}
        ),
        spec=sync_client.V1LeaseSpec(
            holder_identity=holder,
            lease_duration_seconds=10,
            acquire_time=now,
            renew_time=now,
            lease_transitions=0,
        ),
    )


async def test_sync_client_leases_with_optimistic_concurrency(
    kube: emulator.Emulator, api: sync_client.ApiClient
) -> None:
    await kube.create_namespace("tickwork")
    leases = sync_client.CoordinationV1Api(api)
    created = await asyncio.to_thread(
        leases.create_namespaced_lease, "tickwork", lease_body("tickwork-shard-0", "a")
    )
    assert created.metadata.resource_version and created.metadata.uid
    assert created.spec.renew_time.tzinfo is not None
    taken = await asyncio.to_thread(leases.read_namespaced_lease, "tickwork-shard-0", "tickwork")
    taken.spec.holder_identity = "b"
    replaced = await asyncio.to_thread(
        leases.replace_namespaced_lease, "tickwork-shard-0", "tickwork", taken
    )
    assert replaced.spec.holder_identity == "b"
    created.spec.holder_identity = "c"  # based on the first resourceVersion: someone else won
    with pytest.raises(sync_client.ApiException) as raised:
        await asyncio.to_thread(
            leases.replace_namespaced_lease, "tickwork-shard-0", "tickwork", created
        )
    assert raised.value.status == 409
    assert json.loads(raised.value.body)["reason"] == "Conflict"
    stale_patch = {
        "metadata": {"resourceVersion": created.metadata.resource_version},
        "spec": {"holderIdentity": "c"},
    }
    with pytest.raises(sync_client.ApiException) as raised:
        await asyncio.to_thread(
            leases.patch_namespaced_lease, "tickwork-shard-0", "tickwork", stale_patch
        )
    assert raised.value.status == 409
    listed = await asyncio.to_thread(
        leases.list_namespaced_lease,
        "tickwork",
        label_selector="app.kubernetes.io/managed-by=tickwork",
    )
    assert [item.spec.holder_identity for item in listed.items] == ["b"]
    assert kube.count("update", "leases") == 2 and kube.count("patch", "leases") == 1


async def test_sync_client_custom_objects_crud_and_watch(
    widgets: emulator.Emulator, api: sync_client.ApiClient
) -> None:
    custom = sync_client.CustomObjectsApi(api)
    created = await asyncio.to_thread(
        custom.create_namespaced_custom_object,
        GROUP,
        VERSION,
        "default",
        "widgets",
        samples.widget("a"),
    )
    since = created["metadata"]["resourceVersion"]
    with pytest.raises(sync_client.ApiException) as raised:
        await asyncio.to_thread(
            custom.create_namespaced_custom_object,
            GROUP,
            VERSION,
            "default",
            "widgets",
            samples.widget("b", 99),
        )
    assert raised.value.status == 422
    assert json.loads(raised.value.body)["details"]["causes"][0]["field"] == "spec.size"
    patched = await asyncio.to_thread(
        custom.patch_namespaced_custom_object,
        GROUP,
        VERSION,
        "default",
        "widgets",
        "a",
        {"spec": {"size": 5}},
    )
    assert patched["metadata"]["generation"] == 2
    status = await asyncio.to_thread(
        custom.patch_namespaced_custom_object_status,
        GROUP,
        VERSION,
        "default",
        "widgets",
        "a",
        {"status": {"phase": "Ready"}},
    )
    assert status["status"] == {"phase": "Ready"}
    await asyncio.to_thread(
        custom.delete_namespaced_custom_object, GROUP, VERSION, "default", "widgets", "a"
    )

    def collect() -> list[tuple[str, str]]:
        stream = sync_watch.Watch().stream(
            custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            "default",
            "widgets",
            resource_version=since,
            timeout_seconds=2,
        )
        seen = []
        for event in stream:
            seen.append((event["type"], event["object"]["metadata"]["name"]))
            if len(seen) == 3:
                break
        return seen

    assert await asyncio.to_thread(collect) == [
        ("MODIFIED", "a"),
        ("MODIFIED", "a"),
        ("DELETED", "a"),
    ]


async def test_asyncio_client_crud_patch_and_watch(
    widgets: emulator.Emulator, async_api: async_client.ApiClient
) -> None:
    leases = async_client.CoordinationV1Api(async_api)
    created = await leases.create_namespaced_lease("default", lease_body("tickwork-shard-1", "a"))
    with pytest.raises(async_client.ApiException) as raised:
        await leases.create_namespaced_lease("default", lease_body("tickwork-shard-1", "b"))
    assert raised.value.status == 409
    created.spec.holder_identity = "b"
    replaced = await leases.replace_namespaced_lease("tickwork-shard-1", "default", created)
    with pytest.raises(async_client.ApiException) as raised:
        await leases.replace_namespaced_lease("tickwork-shard-1", "default", created)  # stale now
    assert raised.value.status == 409

    custom = async_client.CustomObjectsApi(async_api)
    listed = await custom.list_namespaced_custom_object(GROUP, VERSION, "default", "widgets")
    events: list[tuple[str, str]] = []

    async def follow() -> None:
        stream = async_watch.Watch().stream(
            custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            "default",
            "widgets",
            resource_version=listed["metadata"]["resourceVersion"],
            timeout_seconds=2,
        )
        async with stream as watching:
            async for event in watching:
                events.append((event["type"], event["object"]["metadata"]["name"]))
                if len(events) == 2:
                    return

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0.05)  # let the watch connect: the events below must come through it
    await custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", "widgets", samples.widget("x")
    )
    # kubernetes_asyncio sends a dict as a JSON patch unless told otherwise; a real server
    # refuses that with 400, and so does the emulator.
    with pytest.raises(async_client.ApiException) as raised:
        await custom.patch_namespaced_custom_object(
            GROUP, VERSION, "default", "widgets", "x", {"spec": {}}
        )
    assert raised.value.status == 400
    await custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        "widgets",
        "x",
        {"spec": {"size": 4}},
        _content_type="application/merge-patch+json",
    )
    await asyncio.wait_for(follower, 5)
    assert events == [("ADDED", "x"), ("MODIFIED", "x")]
    assert replaced.metadata.resource_version != created.metadata.resource_version


async def test_asyncio_client_reviews(
    kube: emulator.Emulator, async_api: async_client.ApiClient
) -> None:
    from kube.reviews import User

    kube.tokens["sa-token"] = User.service_account("team-a", "worker")
    kube.access.allow(
        group="system:serviceaccounts:team-a",
        verb="create",
        resource="runs",
        api_group="tickwork.dev",
    )
    authn = async_client.AuthenticationV1Api(async_api)
    review = await authn.create_token_review(
        async_client.V1TokenReview(spec=async_client.V1TokenReviewSpec(token="sa-token"))
    )
    assert (
        review.status.authenticated
        and review.status.user.username == "system:serviceaccount:team-a:worker"
    )
    authz = async_client.AuthorizationV1Api(async_api)
    attributes: dict[str, Any] = {
        "group": "tickwork.dev",
        "resource": "runs",
        "verb": "create",
        "namespace": "team-a",
    }
    sar = async_client.V1SubjectAccessReview(
        spec=async_client.V1SubjectAccessReviewSpec(
            user=review.status.user.username,
            groups=review.status.user.groups,
            resource_attributes=async_client.V1ResourceAttributes(**attributes),
        )
    )
    assert (await authz.create_subject_access_review(sar)).status.allowed is True
    kube.fail("create", "subjectaccessreviews", code=500)
    with pytest.raises(async_client.ApiException) as raised:
        await authz.create_subject_access_review(sar)
    assert raised.value.status == 500
    kube.hang("create", "tokenreviews", seconds=5)
    with pytest.raises(asyncio.TimeoutError):
        await authn.create_token_review(
            async_client.V1TokenReview(spec=async_client.V1TokenReviewSpec(token="sa-token")),
            _request_timeout=0.2,
        )

"""The Kubernetes API as the job-runner uses it: JSON in and out, and caches kept
current by list and watch.

Objects stay plain JSON (what a manifest says), never the client's models: a Job's pod
template is copied from a ScheduledJob as it is, unknown fields included. The client
configuration is loaded as every tickwork role loads it (``coordination.kubeconfig``:
the kubeconfig given, else ``KUBECONFIG``'s first file, else ``~/.kube/config``, else
the pod's service account).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiohttp
import orjson
from kubernetes_asyncio import client

from tickwork.coordination import kubeconfig as kubeconfigs
from tickwork.core.backoff import Backoff

log: Final = logging.getLogger("tickwork.jobrunner")

MERGE_PATCH: Final = "application/merge-patch+json"
# A watch is ended by the server after this long and opened again from where it was.
WATCH_SECONDS: Final = 290

Key = tuple[str, str]  # (namespace, name)


class KubeError(Exception):
    """The API server could not be reached, or answered an error (``status``, its
    ``reason`` such as ``AlreadyExists``, its ``message``)."""

    def __init__(self, what: str, status: int = 0, reason: str = "", message: str = "") -> None:
        shown = f"{status} {reason}".strip() if status else "no answer"
        super().__init__(f"cannot {what}: {shown}{': ' + message if message else ''}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def transient(self) -> bool:
        """No answer, a server error, too many requests, a timeout: worth trying again."""
        return self.status == 0 or self.status >= 500 or self.status in (408, 429)


async def load_configuration(kubeconfig: Path | None = None) -> client.Configuration:
    """A client configuration, as every role loads one (``coordination.kubeconfig``)."""
    try:
        return await kubeconfigs.load_configuration(kubeconfig)
    except kubeconfigs.KubeconfigError as error:
        raise KubeError("load the Kubernetes client configuration", message=str(error)) from error


def jobs_path(namespace: str, name: str | None = None) -> str:
    return _path("/apis/batch/v1", namespace, "jobs", name)


def pods_path(namespace: str) -> str:
    return _path("/api/v1", namespace, "pods", None)


def scheduled_jobs_path(namespace: str, name: str | None = None) -> str:
    return _path("/apis/tickwork.dev/v1alpha1", namespace, "scheduledjobs", name)


def events_path(namespace: str) -> str:
    return _path("/api/v1", namespace, "events", None)


def _path(prefix: str, namespace: str, plural: str, name: str | None) -> str:
    path = f"{prefix}/namespaces/{namespace}/{plural}"
    return path if name is None else f"{path}/{name}"


class Kube:
    """JSON calls over one ``ApiClient`` (its authentication, its connection pool)."""

    def __init__(self, api: client.ApiClient, *, request_timeout: float = 30.0) -> None:
        self.api = api
        self.request_timeout = request_timeout

    @classmethod
    async def connect(cls, kubeconfig: Path | None = None) -> Kube:
        return cls(client.ApiClient(await load_configuration(kubeconfig)))

    async def close(self) -> None:
        await self.api.close()

    async def call(
        self,
        what: str,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """One call; its JSON answer, or ``KubeError`` naming ``what`` was tried."""
        async with self._open(what, method, path, query, body, content_type) as response:
            try:
                raw = await response.read()
            except (aiohttp.ClientError, TimeoutError, OSError) as error:
                raise KubeError(what, message=repr(error)) from error
            answer = _json(raw)
            if response.status >= 400:
                raise KubeError(
                    what,
                    response.status,
                    str(answer.get("reason") or response.reason or ""),
                    str(answer.get("message") or ""),
                )
            return answer

    @contextlib.asynccontextmanager
    async def _open(
        self,
        what: str,
        method: str,
        path: str,
        query: Mapping[str, str] | None,
        body: Mapping[str, Any] | None,
        content_type: str,
        seconds: float | None = None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        try:
            response: aiohttp.ClientResponse = await self.api.call_api(
                path,
                method,
                query_params=dict(query or {}),
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=dict(body) if body is not None else None,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=seconds or self.request_timeout,
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            raise KubeError(what, message=repr(error)) from error
        try:
            yield response
        finally:
            response.release()

    async def watch(
        self, what: str, path: str, query: Mapping[str, str]
    ) -> AsyncIterator[dict[str, Any]]:
        """The events of a watch (``{"type", "object"}``), until the server ends it."""
        query = {**query, "watch": "true", "allowWatchBookmarks": "true"}
        query.setdefault("timeoutSeconds", str(WATCH_SECONDS))
        seconds = float(query["timeoutSeconds"]) + self.request_timeout
        async with self._open(what, "GET", path, query, None, "application/json", seconds) as got:
            if got.status >= 400:
                answer = _json(await got.read())
                raise KubeError(
                    what, got.status, str(answer.get("reason") or ""), str(answer.get("message"))
                )
            try:
                while line := await got.content.readline():
                    if line.strip():
                        yield orjson.loads(line)
            except (aiohttp.ClientError, TimeoutError, OSError) as error:
                raise KubeError(what, message=repr(error)) from error


def _json(raw: bytes) -> dict[str, Any]:
    try:
        answer = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        return {"message": raw[:200].decode(errors="replace")}
    return answer if isinstance(answer, dict) else {}


# Called with the namespace, the name and the object now (None: it is gone).
OnChange = Callable[[str, str, dict[str, Any] | None], None]


@dataclass
class _Watched:
    resource_version: str = ""
    synced: bool = False


class Informer:
    """The objects of one kind in ``namespaces`` (with ``selector``), listed then
    watched, in memory: ``get`` reads them without a call. A watch that ends is opened
    again from where it was; one that is too old (410) or fails lists again first,
    after a backoff. ``on_change`` hears every change."""

    def __init__(
        self,
        kube: Kube,
        kind: str,
        path: Callable[[str], str],
        namespaces: Sequence[str],
        *,
        selector: str | None = None,
        on_change: OnChange | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.kube = kube
        self.kind = kind
        self.path = path
        self.namespaces = tuple(namespaces)
        self.selector = selector
        self.on_change = on_change
        self.objects: dict[Key, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self._rng = rng or random.Random()
        self._state = {namespace: _Watched() for namespace in self.namespaces}

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((namespace, name))

    def observe(self, obj: Mapping[str, Any]) -> None:
        """An object this process wrote, known before its watch event arrives."""
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        held = self.objects.get(key)
        if held is not None and _older(obj, held):
            return
        self._set(key, dict(obj))

    def forget(self, namespace: str, name: str) -> None:
        """An object this process deleted."""
        self._set((namespace, name), None)

    async def run(self) -> None:
        """Keep every namespace current until cancelled."""
        async with asyncio.TaskGroup() as group:
            for namespace in self.namespaces:
                group.create_task(self._keep(namespace))

    async def _keep(self, namespace: str) -> None:
        state = self._state[namespace]
        backoff = Backoff(0.5, 30.0, self._rng)
        while True:
            try:
                if not state.resource_version:
                    await self._list(namespace, state)
                await self._watch(namespace, state)
                backoff.reset()
            except KubeError as error:
                state.resource_version = ""
                delay = backoff.next_delay()
                log.warning(
                    "%s of %s: %s; listing again in %.1fs",
                    self.kind,
                    namespace,
                    error,
                    delay,
                    extra={"action": "watch-failed", "namespace": namespace},
                )
                await asyncio.sleep(delay)

    def _query(self) -> dict[str, str]:
        return {"labelSelector": self.selector} if self.selector else {}

    async def _list(self, namespace: str, state: _Watched) -> None:
        listed = await self.kube.call(
            f"list {self.kind}", "GET", self.path(namespace), query=self._query()
        )
        found = {
            (namespace, str(item["metadata"]["name"])): item for item in listed.get("items") or []
        }
        for key in [k for k in self.objects if k[0] == namespace and k not in found]:
            self._set(key, None)
        for key, item in found.items():
            self._set(key, item)
        state.resource_version = str((listed.get("metadata") or {}).get("resourceVersion") or "")
        if not state.synced:
            state.synced = True
            if all(s.synced for s in self._state.values()):
                self.synced.set()

    async def _watch(self, namespace: str, state: _Watched) -> None:
        query = {**self._query(), "resourceVersion": state.resource_version}
        async for event in self.kube.watch(f"watch {self.kind}", self.path(namespace), query):
            kind, obj = event.get("type"), event.get("object") or {}
            version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            if kind == "ERROR":
                raise KubeError(
                    f"watch {self.kind}", int(obj.get("code") or 0), str(obj.get("reason") or "")
                )
            if version:
                state.resource_version = version
            if kind == "BOOKMARK":
                continue
            key = (namespace, str(obj["metadata"]["name"]))
            self._set(key, None if kind == "DELETED" else obj)

    def _set(self, key: Key, obj: dict[str, Any] | None) -> None:
        if obj is None:
            if self.objects.pop(key, None) is None:
                return
        else:
            self.objects[key] = obj
        if self.on_change is not None:
            self.on_change(key[0], key[1], obj)


def _older(candidate: Mapping[str, Any], held: Mapping[str, Any]) -> bool:
    """Whether ``candidate`` is an older version of ``held`` (resource versions are
    opaque, but numbers compare when both are)."""
    new = str((candidate.get("metadata") or {}).get("resourceVersion") or "")
    old = str((held.get("metadata") or {}).get("resourceVersion") or "")
    return new.isdigit() and old.isdigit() and int(new) < int(old)

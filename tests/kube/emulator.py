"""An emulated Kubernetes API server for in-process tests on 127.0.0.1.

Why our own server and not a layer over kmock (0.8, whose ``KubernetesEmulator`` is the
closest ready tool): kmock applies every write in its request interceptor *before* the
test's scripted reactions run, so a scripted 409 or 500 still changes the stored object;
its objects are untyped dicts merged key by key with no resourceVersion, uid or
generation; it has no PUT, replays every object as ADDED on each watch and has no
notion of subresources, schemas, admission or discovery beyond what test filters
declare. Making it strict would mean replacing its ``_handle`` and every ``_serve_*``
method, discovery and error rendering, i.e. keeping only the aiohttp glue while pinning
its private ``_internal`` modules. A small server on aiohttp (already a dependency)
whose store, watch log and error shapes follow the real API server is less code and
no coupling to another project's internals.

What it emulates (see ``README.md`` beside this file for the full list and the gaps):
one global resourceVersion counter and an event log per server (etcd's revision), so
LIST/GET/WATCH/PUT/PATCH/DELETE behave as clients expect: optimistic concurrency (409),
finalizers, generation, status subresources, selectors, watch from a resourceVersion
with bookmarks and 410 Gone, structural schemas and CEL for custom resources, validating
admission webhooks, discovery, Table output for kubectl, scripted faults that write
nothing, and an audit trail.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import dataclasses
import datetime
import json
import random
import re
import string
import traceback
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiohttp import web

from kube import admission, jsonpath, patches, resources, reviews, schema, selectors, status, tables
from kube.faults import AuditRecord, Fault
from kube.resources import ResourceType

StoreKey = tuple[str, str]  # (group, plural): where objects live, across versions
ObjectKey = tuple[str, str]  # (namespace or "", name)

SERVER_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-emulated",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.23",
    "compiler": "gc",
    "platform": "linux/amd64",
}
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
MAX_BODY = 3 * 1024 * 1024  # the API server's request size limit

_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_MICRO_TIME_FIELDS = ("acquireTime", "renewTime")
_NAMESPACE_MISMATCH = (
    "the namespace of the provided object does not match the namespace sent on the request"
)
_LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character"
)


def _copy(value: Any) -> Any:
    """A deep copy of JSON data (an order of magnitude faster than ``copy.deepcopy``)."""
    return orjson.loads(orjson.dumps(value))


def _now_text(now: datetime.datetime) -> str:
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes version ordering: v2 > v1 > v1beta2 > v1beta1 > v1alpha1 > others."""
    match = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not match:
        return (0, 0, 0)
    stability = {"alpha": 1, "beta": 2, None: 3}[match[2]]
    return (stability, int(match[1]), int(match[3] or 0))


@dataclasses.dataclass(frozen=True)
class Change:
    rv: int
    key: StoreKey
    type: str  # ADDED, MODIFIED, DELETED
    obj: dict[str, Any]  # stored form, after the change (last state for DELETED)
    old: dict[str, Any] | None


@dataclasses.dataclass(eq=False)
class Watch:
    rt: ResourceType
    namespace: str | None
    labels: selectors.LabelSelector
    fields: selectors.FieldSelector
    queue: asyncio.Queue[Change | None]


@dataclasses.dataclass(frozen=True)
class Target:
    """A parsed resource URL."""

    rt: ResourceType
    namespace: str  # "" for cluster-scoped or all namespaces
    name: str
    subresource: str
    verb: str


class Emulator:
    """The emulated API server; start it with :meth:`start` or the ``kube`` fixture."""

    def __init__(
        self,
        *,
        history: int = 10_000,
        bookmark_interval: float = 60.0,
        clock: Callable[[], datetime.datetime] | None = None,
    ) -> None:
        self.clock = clock or (lambda: datetime.datetime.now(datetime.UTC))
        self.bookmark_interval = bookmark_interval
        self.url = ""
        self.kubeconfig: Path | None = None
        self.audit: list[AuditRecord] = []
        self.faults: list[Fault] = []
        self.tokens: dict[str, reviews.User] = {}  # bearer tokens: TokenReview answers and callers
        self.access = reviews.Access()
        self.services: dict[tuple[str, str], str] = {}  # (namespace, name) -> base URL for webhooks
        self.admission = admission.Dispatcher(lambda ns, name: self.services.get((ns, name)))
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self._store: dict[StoreKey, dict[ObjectKey, dict[str, Any]]] = collections.defaultdict(dict)
        self._rv = 0
        self._log: collections.deque[Change] = collections.deque(maxlen=history)
        self._compacted = 0
        self._watches: set[Watch] = set()
        self._tick = asyncio.Event()
        self.internal_errors: list[str] = []  # emulator bugs: the fixture fails the test on any
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        for rt in resources.BUILT_IN:
            self._types[(rt.group, rt.version, rt.plural)] = rt
        for name in DEFAULT_NAMESPACES:
            self._seed_namespace(name)

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_route("*", "/{tail:.*}", self._serve)
        self._runner = web.AppRunner(
            app, handle_signals=False, access_log=None, shutdown_timeout=1.0
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server
        assert server is not None
        bound = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://{host}:{bound}"
        return self.url

    async def stop(self) -> None:
        self._closing.set()
        for watch in list(self._watches):
            watch.queue.put_nowait(None)
        await self.admission.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def write_kubeconfig(
        self, path: Path, *, token: str = "emulator-admin", namespace: str = "default"
    ) -> Path:
        """A kubeconfig for ``kubectl --kubeconfig`` and ``kubernetes.config.load_kube_config``."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
            "users": [{"name": "emulator", "user": {"token": token}}],
            "contexts": [
                {
                    "name": "emulator",
                    "context": {"cluster": "emulator", "user": "emulator", "namespace": namespace},
                }
            ],
            "current-context": "emulator",
            "preferences": {},
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # --- test-facing API ---------------------------------------------------------------

    def resource(self, name: str) -> ResourceType:
        """A served resource by plural, ``plural.group``, kind, short name or singular."""
        lowered = name.lower()
        candidates = []
        for rt in self._types.values():
            names = {
                rt.plural,
                rt.group_resource,
                rt.kind.lower(),
                rt.singular,
                *rt.short_names,
                f"{rt.kind.lower()}.{rt.group}",
                f"{rt.plural}.{rt.version}.{rt.group}",
            }
            if lowered in names:
                candidates.append(rt)
        if not candidates:
            raise KeyError(f"no served resource called {name!r}")
        # Prefer core over other groups (kubectl does: "events" is core), then preferred versions.
        candidates.sort(
            key=lambda rt: (rt.group != "", rt.group, [-p for p in _version_priority(rt.version)])
        )
        return candidates[0]

    def get(self, resource: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        rt = self.resource(resource)
        stored = self._store[rt.store_key].get((namespace or "" if rt.namespaced else "", name))
        return self._view(rt, stored) if stored is not None else None

    def objects(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        rt = self.resource(resource)
        return [
            self._view(rt, obj)
            for (ns, _), obj in sorted(self._store[rt.store_key].items())
            if namespace is None or ns == namespace
        ]

    async def create(self, obj: dict[str, Any], *, admit: bool = False) -> dict[str, Any]:
        """Create ``obj`` as a client would, validated (webhooks only with ``admit``)."""
        rt = self._resource_for(obj)
        namespace = (obj.get("metadata") or {}).get("namespace", "default") if rt.namespaced else ""
        created, _ = await self._create(
            rt, namespace, _copy(obj), reviews.ADMIN, dry_run=False, admit=admit
        )
        return created

    async def patch(
        self,
        resource: str,
        name: str,
        patch: dict[str, Any],
        *,
        namespace: str | None = None,
        subresource: str = "",
    ) -> dict[str, Any]:
        """Merge-patch an object (``subresource="status"`` to write status)."""
        rt = self.resource(resource)
        target = Target(rt, namespace or "" if rt.namespaced else "", name, subresource, "patch")
        updated, _ = await self._update(
            target,
            lambda current: patches.merge(current, patch),
            reviews.ADMIN,
            dry_run=False,
            admit=False,
        )
        return updated

    async def delete(self, resource: str, name: str, *, namespace: str | None = None) -> None:
        rt = self.resource(resource)
        target = Target(rt, namespace or "" if rt.namespaced else "", name, "", "delete")
        await self._delete(target, {}, reviews.ADMIN, dry_run=False, admit=False)

    async def create_namespace(
        self, name: str, labels: dict[str, str] | None = None
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name}
        if labels:
            meta["labels"] = labels
        return await self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})

    async def wait_for(
        self,
        resource: str,
        name: str,
        predicate: Callable[[dict[str, Any] | None], bool],
        *,
        namespace: str | None = None,
        timeout: float = 5.0,  # noqa: ASYNC109  (a test must never hang on a missed change)
    ) -> dict[str, Any] | None:
        """Wait until the stored object (None: absent) satisfies ``predicate``."""
        async with asyncio.timeout(timeout):
            while True:
                current = self.get(resource, name, namespace)
                if predicate(current):
                    return current
                await self._tick.wait()

    async def wait_until(
        self,
        condition: Callable[[], bool],
        *,
        timeout: float = 5.0,  # noqa: ASYNC109  (a test must never hang on a missed change)
    ) -> None:
        """Wait until ``condition()`` holds, re-checking after every stored change."""
        async with asyncio.timeout(timeout):
            while not condition():
                await self._tick.wait()

    def fail(self, verb: str | None = None, resource: str | None = None, **options: Any) -> Fault:
        """Answer the next matching call(s) with an error; nothing is written."""
        fault = Fault(verb=verb, resource=resource, **options)
        self.faults.append(fault)
        return fault

    def hang(self, verb: str | None = None, resource: str | None = None, **options: Any) -> Fault:
        """Give no answer to the next matching call(s) until the client times out."""
        return self.fail(verb, resource, hang=True, **options)

    def slow(self, verb: str | None, resource: str | None, delay: float, **options: Any) -> Fault:
        """Serve the next matching call(s) normally, ``delay`` seconds late."""
        return self.fail(verb, resource, delay=delay, **options)

    def count(
        self,
        verb: str | None = None,
        resource: str | None = None,
        *,
        namespace: str | None = None,
        name: str | None = None,
    ) -> int:
        """How many requests matched (faulted ones included)."""
        probe = Fault(verb=verb, resource=resource, namespace=namespace, name=name, times=None)
        return sum(probe.matches(record) for record in self.audit)

    @property
    def calls(self) -> collections.Counter[tuple[str, str]]:
        """Requests per (verb, resource[/subresource])."""
        return collections.Counter((r.verb, r.target) for r in self.audit)

    @property
    def resource_version(self) -> int:
        return self._rv

    def compact(self) -> None:
        """Forget the event history (as etcd compaction does): older watches get 410."""
        self._log.clear()
        self._compacted = self._rv

    def bookmark(self) -> None:
        """Send a BOOKMARK to every watch that asked for bookmarks, now."""
        for watch in self._watches:
            watch.queue.put_nowait(Change(self._rv, watch.rt.store_key, "BOOKMARK", {}, None))

    # --- storage -----------------------------------------------------------------------

    def _seed_namespace(self, name: str) -> None:
        rt = self._types[("", "v1", "namespaces")]
        obj = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }
        self._system_fields(rt, obj)
        self._commit(rt.store_key, "ADDED", obj, None)

    def _system_fields(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now_text(self.clock())
        if rt.generation or rt.custom:
            meta["generation"] = 1
        for key in (
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "resourceVersion",
            "selfLink",
        ):
            meta.pop(key, None)

    def _commit(
        self, key: StoreKey, kind: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> dict[str, Any]:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        object_key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if kind == "DELETED":
            self._store[key].pop(object_key, None)
        else:
            self._store[key][object_key] = obj
        change = Change(self._rv, key, kind, _copy(obj), _copy(old) if old else None)
        if len(self._log) == self._log.maxlen and self._log:
            self._compacted = self._log[0].rv
        self._log.append(change)
        for watch in self._watches:
            if watch.rt.store_key == key:
                watch.queue.put_nowait(change)
        tick, self._tick = self._tick, asyncio.Event()
        tick.set()
        return obj

    def _view(self, rt: ResourceType, stored: dict[str, Any]) -> dict[str, Any]:
        obj = rt.from_storage(_copy(stored))
        obj["apiVersion"] = rt.api_version
        obj["kind"] = rt.kind
        if rt.custom and rt.openapi:
            schema.apply_defaults(rt.openapi, obj)
        return obj

    def _resource_for(self, obj: dict[str, Any]) -> ResourceType:
        api_version = obj.get("apiVersion", "")
        group, _, version = api_version.rpartition("/")
        for rt in self._types.values():
            if rt.group == group and rt.version == version and rt.kind == obj.get("kind"):
                return rt
        raise KeyError(f"no served resource for {api_version} {obj.get('kind')}")

    def _namespace(self, name: str) -> dict[str, Any] | None:
        return self._store[("", "namespaces")].get(("", name))

    # --- HTTP --------------------------------------------------------------------------

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        record: AuditRecord | None = None
        try:
            parts = [p for p in request.path.split("/") if p]
            discovery = self._discovery(request, parts)
            if discovery is not None:
                return discovery
            target = self._target(request, parts)
            body = (
                await self._body(request)
                if request.method in ("POST", "PUT", "PATCH", "DELETE")
                else None
            )
            user = self._caller(request)
            record = AuditRecord(
                method=request.method,
                path=request.path,
                query=dict(request.query),
                verb=target.verb,
                group=target.rt.group,
                version=target.rt.version,
                resource=target.rt.plural,
                subresource=target.subresource,
                namespace=target.namespace,
                name=target.name,
                user=user.username,
                body=body,
                at=self.clock(),
            )
            position = len(self.audit)
            self.audit.append(record)
            response = await self._faulted(record)
            if response is None:
                response = await self._dispatch(request, target, body, user)
        except status.ApiError as error:
            response = self._error(error)
        except Exception as error:  # an emulator bug: answer like the server, fail the test later
            self.internal_errors.append(traceback.format_exc())
            response = self._error(status.internal(repr(error)))
        if record is not None:
            self.audit[position] = dataclasses.replace(
                record, code=response.status, fault=getattr(response, "_faulted", False)
            )
        return response

    def _error(self, error: status.ApiError) -> web.Response:
        return web.json_response(error.status(), status=error.code, headers=error.headers)

    async def _faulted(self, record: AuditRecord) -> web.StreamResponse | None:
        for fault in self.faults:
            if not fault.matches(record):
                continue
            fault.hits += 1
            if fault.delay:
                await asyncio.sleep(fault.delay)
                return None
            if fault.hang:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), fault.seconds)
                answer = self._error(status.for_code(504))
            else:
                answer = self._error(status.for_code(fault.code, fault.message, fault.reason))
            answer._faulted = True  # type: ignore[attr-defined]
            return answer
        return None

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            return None
        content_type = request.headers.get("Content-Type", "application/json")
        try:
            if "yaml" in content_type and "apply-patch" not in content_type:
                return yaml.safe_load(raw)
            return json.loads(raw)
        except (ValueError, yaml.YAMLError) as error:
            raise status.bad_request(f"error decoding request body: {error}") from error

    def _caller(self, request: web.Request) -> reviews.User:
        header = request.headers.get("Authorization", "")
        if header.lower().startswith("bearer "):
            user = self.tokens.get(header[7:].strip())
            if user is not None:
                return user
        return reviews.ADMIN

    # --- discovery ---------------------------------------------------------------------

    def _groups(self) -> dict[str, list[str]]:
        groups: dict[str, set[str]] = collections.defaultdict(set)
        for group, version, _ in self._types:
            if group:
                groups[group].add(version)
        return {
            g: sorted(v, key=_version_priority, reverse=True) for g, v in sorted(groups.items())
        }

    def _discovery(self, request: web.Request, parts: list[str]) -> web.StreamResponse | None:
        if request.method != "GET":
            if parts in ([], ["api"], ["apis"], ["version"]):
                raise status.method_not_allowed()
            return None
        if not parts:
            paths = ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]
            for group, versions in self._groups().items():
                paths += [f"/apis/{group}"] + [f"/apis/{group}/{v}" for v in versions]
            return web.json_response({"paths": sorted(paths)})
        if parts == ["version"]:
            return web.json_response(SERVER_VERSION)
        if parts[0] in ("healthz", "livez", "readyz") and len(parts) == 1:
            return web.Response(text="ok")
        if parts[0] == "openapi":
            raise status.ApiError(
                404, "the server could not find the requested resource (OpenAPI is not emulated)"
            )
        if parts == ["api"]:
            host = self.url.removeprefix("http://")
            return web.json_response(
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [
                        {"clientCIDR": "0.0.0.0/0", "serverAddress": host}
                    ],
                }
            )
        if parts == ["apis"]:
            return web.json_response(
                {
                    "kind": "APIGroupList",
                    "apiVersion": "v1",
                    "groups": [self._group_entry(g, v) for g, v in self._groups().items()],
                }
            )
        if parts[0] == "apis" and len(parts) == 2:
            versions = self._groups().get(parts[1])
            if not versions:
                raise status.ApiError(404, "the server could not find the requested resource")
            return web.json_response(
                {"kind": "APIGroup", "apiVersion": "v1", **self._group_entry(parts[1], versions)}
            )
        if (parts[0] == "api" and len(parts) == 2) or (parts[0] == "apis" and len(parts) == 3):
            group, version = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[2])
            served = [
                rt for (g, v, _), rt in sorted(self._types.items()) if g == group and v == version
            ]
            if not served:
                raise status.ApiError(404, "the server could not find the requested resource")
            return web.json_response(
                {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": f"{group}/{version}" if group else version,
                    "resources": [entry for rt in served for entry in rt.discovery()],
                }
            )
        return None

    @staticmethod
    def _group_entry(group: str, versions: list[str]) -> dict[str, Any]:
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": entries, "preferredVersion": entries[0]}

    # --- routing -----------------------------------------------------------------------

    def _target(self, request: web.Request, parts: list[str]) -> Target:
        not_found = status.ApiError(404, "the server could not find the requested resource")
        if len(parts) < 3 or parts[0] not in ("api", "apis"):
            raise not_found
        if parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        else:
            if len(parts) < 4:
                raise not_found
            group, version, rest = parts[1], parts[2], parts[3:]
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3:
            candidate = self._types.get((group, version, rest[2]))
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise not_found
        rt = self._types.get((group, version, rest[0]))
        if rt is None:
            raise not_found
        name = rest[1] if len(rest) > 1 else ""
        subresource = rest[2] if len(rest) > 2 else ""
        if subresource and not (
            (subresource == "status" and rt.status_subresource)
            or subresource in rt.extra_subresources
        ):
            raise not_found
        if rt.namespaced and name and not namespace:
            raise not_found
        if not rt.namespaced and namespace:
            raise not_found
        watch = request.query.get("watch", "").lower() in ("true", "1")
        method = request.method
        if method == "GET":
            verb = "watch" if watch else ("get" if name else "list")
        elif method == "POST" and not name:
            verb = "create"
        elif method == "PUT" and name:
            verb = "update"
        elif method == "PATCH" and name:
            verb = "patch"
        elif method == "DELETE":
            verb = "delete" if name else "deletecollection"
        else:
            raise status.method_not_allowed()
        if verb not in rt.verbs and not (subresource and verb in ("get", "update", "patch")):
            raise status.method_not_allowed()
        return Target(rt, namespace, name, subresource, verb)

    async def _dispatch(
        self, request: web.Request, target: Target, body: Any, user: reviews.User
    ) -> web.StreamResponse:
        query = request.query
        dry_run = query.get("dryRun") == "All"
        rt = target.rt
        if target.verb == "watch":
            return await self._watch(request, target)
        if target.verb == "list":
            return self._list(request, target)
        if target.verb == "get":
            return self._get(request, target)
        if rt.plural in resources.REVIEWS:
            return web.json_response(self._review(target, body, user), status=201)
        if target.verb == "create":
            if not isinstance(body, dict):
                raise status.bad_request("the body of the request must be a JSON object")
            created, warnings = await self._create(
                rt, target.namespace, body, user, dry_run=dry_run, admit=True
            )
            return web.json_response(created, status=201, headers=_warning_headers(warnings))
        if target.verb in ("update", "patch"):
            content_type = request.headers.get("Content-Type", "application/json")
            if target.verb == "update":
                if not isinstance(body, dict):
                    raise status.bad_request("the body of the request must be a JSON object")
                self._check_put_identity(target, body)
                missing = (target.namespace, target.name) not in self._store[rt.store_key]
                if missing and rt.create_on_update and not target.subresource:
                    if (body.get("metadata") or {}).get("resourceVersion"):
                        raise status.conflict(rt.group_resource, target.name, rt.group, rt.plural)
                    body = {
                        **body,
                        "metadata": {**(body.get("metadata") or {}), "name": target.name},
                    }
                    created, warnings = await self._create(
                        rt, target.namespace, body, user, dry_run=dry_run, admit=True
                    )
                    return web.json_response(
                        created, status=201, headers=_warning_headers(warnings)
                    )

            def mutate(current: dict[str, Any]) -> dict[str, Any]:
                if target.verb == "update":
                    return _copy(body)  # type: ignore[no-any-return]
                return patches.apply(content_type, current, body, custom=rt.custom)

            updated, warnings = await self._update(
                target, mutate, user, dry_run=dry_run, admit=True, put=target.verb == "update"
            )
            return web.json_response(updated, headers=_warning_headers(warnings))
        if target.verb == "delete":
            answer, code = await self._delete(target, body or {}, user, dry_run=dry_run, admit=True)
            return web.json_response(answer, status=code)
        return await self._delete_collection(request, target, user, dry_run)

    # --- reads -------------------------------------------------------------------------

    def _selection(
        self, request: web.Request, target: Target
    ) -> tuple[selectors.LabelSelector, selectors.FieldSelector]:
        labels = selectors.parse_labels(request.query.get("labelSelector"))
        fields = selectors.parse_fields(
            request.query.get("fieldSelector"), target.rt.supports_field
        )
        if target.name:
            fields = selectors.FieldSelector((*fields.terms, ("metadata.name", True, target.name)))
        return labels, fields

    @staticmethod
    def _matches(
        rt: ResourceType,
        view: dict[str, Any],
        namespace: str | None,
        labels: selectors.LabelSelector,
        fields: selectors.FieldSelector,
    ) -> bool:
        meta = view.get("metadata") or {}
        if namespace and meta.get("namespace", "") != namespace:
            return False
        if not labels.matches(meta.get("labels")):
            return False

        def lookup(field: str) -> str | None:
            value = jsonpath.dotted(view, field)
            if value is None:
                return None
            return ("true" if value else "false") if isinstance(value, bool) else str(value)

        return fields.matches(lookup)

    def _get(self, request: web.Request, target: Target) -> web.StreamResponse:
        rt = target.rt
        stored = self._store[rt.store_key].get((target.namespace, target.name))
        if stored is None:
            raise status.not_found(rt.group_resource, target.name, rt.group, rt.plural)
        view = self._view(rt, stored)
        table_version = tables.wants_table(request.headers.get("Accept", ""))
        if table_version:
            meta = {"resourceVersion": view["metadata"]["resourceVersion"]}
            return _table_response(
                tables.table(
                    rt,
                    [view],
                    table_version,
                    meta,
                    request.query.get("includeObject", ""),
                    self.clock(),
                ),
                table_version,
            )
        return web.json_response(view)

    def _list(self, request: web.Request, target: Target) -> web.StreamResponse:
        rt = target.rt
        labels, fields = self._selection(request, target)
        views = [
            view
            for key, stored in sorted(self._store[rt.store_key].items())
            for view in [self._view(rt, stored)]
            if self._matches(rt, view, target.namespace, labels, fields)
        ]
        meta: dict[str, Any] = {"resourceVersion": str(self._rv)}
        start = request.query.get("continue")
        if start:
            try:
                after = tuple(json.loads(base64.urlsafe_b64decode(start.encode())))
            except ValueError as error:
                raise status.ApiError(400, "continue key is not valid") from error
            views = [
                v
                for v in views
                if (v["metadata"].get("namespace", ""), v["metadata"]["name"]) > after
            ]
        limit = int(request.query.get("limit") or 0)
        if limit and len(views) > limit:
            last = views[limit - 1]["metadata"]
            meta["continue"] = base64.urlsafe_b64encode(
                json.dumps([last.get("namespace", ""), last["name"]]).encode()
            ).decode()
            meta["remainingItemCount"] = len(views) - limit
            views = views[:limit]
        table_version = tables.wants_table(request.headers.get("Accept", ""))
        if table_version:
            return _table_response(
                tables.table(
                    rt,
                    views,
                    table_version,
                    meta,
                    request.query.get("includeObject", ""),
                    self.clock(),
                ),
                table_version,
            )
        return web.json_response(
            {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta, "items": views}
        )

    async def _watch(self, request: web.Request, target: Target) -> web.StreamResponse:
        rt = target.rt
        query = request.query
        labels, fields = self._selection(request, target)
        bookmarks = query.get("allowWatchBookmarks", "").lower() in ("true", "1")
        initial_events = query.get("sendInitialEvents", "").lower() == "true"
        since = query.get("resourceVersion", "")
        if initial_events and (
            query.get("resourceVersionMatch") != "NotOlderThan" or not bookmarks
        ):
            raise status.invalid_object(
                "ListOptions.meta.k8s.io",
                "",
                "meta.k8s.io",
                "ListOptions",
                [
                    status.forbidden(
                        "sendInitialEvents",
                        "sendInitialEvents requires setting resourceVersionMatch "
                        "to NotOlderThan and allowWatchBookmarks to true",
                    ),
                ],
            )
        timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
        namespace = target.namespace or None
        watch = Watch(rt, namespace, labels, fields, asyncio.Queue())
        expired = False
        backlog: list[dict[str, Any]] = []
        if since in ("", "0") or initial_events:
            for _, stored in sorted(self._store[rt.store_key].items()):
                view = self._view(rt, stored)
                if self._matches(rt, view, namespace, labels, fields):
                    backlog.append({"type": "ADDED", "object": view})
        else:
            try:
                since_rv = int(since)
            except ValueError as error:
                raise status.bad_request(f"invalid resource version: {since!r}") from error
            if since_rv < self._compacted:
                gone = status.ApiError(
                    410,
                    f"too old resource version: {since_rv} ({self._compacted})",
                    reason="Expired",
                )
                backlog.append({"type": "ERROR", "object": gone.status()})
                expired = True
            else:
                for change in self._log:
                    if change.rv > since_rv and change.key == rt.store_key:
                        event = self._translate(watch, change)
                        if event is not None:
                            backlog.append(event)
        registered_at = self._rv
        if not expired:
            self._watches.add(watch)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout is not None else None
        try:
            for event in backlog:
                await response.write(_line(event))
            if expired:
                return response
            if initial_events:
                marker = self._bookmark(rt, registered_at)
                marker["object"]["metadata"]["annotations"] = {"k8s.io/initial-events-end": "true"}
                await response.write(_line(marker))
            next_bookmark = loop.time() + self.bookmark_interval
            while not self._closing.is_set():
                now = loop.time()
                if deadline is not None and now >= deadline:
                    break
                transport = request.transport
                if transport is None or transport.is_closing():
                    break
                wait = min(
                    1.0, next_bookmark - now, *(() if deadline is None else (deadline - now,))
                )
                try:
                    change = await asyncio.wait_for(watch.queue.get(), max(wait, 0.0))
                except TimeoutError:
                    if bookmarks and loop.time() >= next_bookmark:
                        await response.write(_line(self._bookmark(rt, self._rv)))
                        next_bookmark = loop.time() + self.bookmark_interval
                    continue
                if change is None:
                    break
                if change.type == "BOOKMARK":
                    if bookmarks:
                        await response.write(_line(self._bookmark(rt, change.rv)))
                    continue
                event = self._translate(watch, change)
                if event is not None:
                    await response.write(_line(event))
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            self._watches.discard(watch)
        return response

    @staticmethod
    def _bookmark(rt: ResourceType, rv: int) -> dict[str, Any]:
        return {
            "type": "BOOKMARK",
            "object": {
                "kind": rt.kind,
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(rv)},
            },
        }

    def _translate(self, watch: Watch, change: Change) -> dict[str, Any] | None:
        """The event a watch sees: objects moving in or out of its selection are ADDED or
        DELETED for it, as the API server's watch cache reports them."""
        rt = watch.rt
        new = self._view(rt, change.obj)
        now_in = self._matches(rt, new, watch.namespace, watch.labels, watch.fields)
        was_in = change.old is not None and self._matches(
            rt, self._view(rt, change.old), watch.namespace, watch.labels, watch.fields
        )
        if change.type == "DELETED":
            return {"type": "DELETED", "object": new} if was_in or now_in else None
        if change.type == "ADDED":
            return {"type": "ADDED", "object": new} if now_in else None
        if now_in and was_in:
            return {"type": "MODIFIED", "object": new}
        if now_in:
            return {"type": "ADDED", "object": new}
        if was_in:
            return {"type": "DELETED", "object": new}
        return None

    # --- writes ------------------------------------------------------------------------

    def _check_body_type(self, rt: ResourceType, body: dict[str, Any]) -> None:
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if rt.custom and not kind:
            raise status.bad_request(f"Object 'Kind' is missing in '{json.dumps(body)[:200]}'")
        if rt.custom and not api_version:
            raise status.bad_request(
                f"Object 'apiVersion' is missing in '{json.dumps(body)[:200]}'"
            )
        if api_version and api_version != rt.api_version:
            raise status.bad_request(
                f"the API version in the data ({api_version}) does not match "
                f"the expected API version ({rt.api_version})"
            )
        if kind and kind != rt.kind:
            raise status.bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )

    def _check_put_identity(self, target: Target, body: dict[str, Any]) -> None:
        meta = body.get("metadata") or {}
        if meta.get("name") and meta["name"] != target.name:
            raise status.bad_request(
                f"the name of the object ({meta['name']}) does not match "
                f"the name on the URL ({target.name})"
            )
        if target.rt.namespaced and meta.get("namespace") and meta["namespace"] != target.namespace:
            raise status.bad_request(_NAMESPACE_MISMATCH)

    async def _create(
        self,
        rt: ResourceType,
        namespace: str,
        body: dict[str, Any],
        user: reviews.User,
        *,
        dry_run: bool,
        admit: bool,
    ) -> tuple[dict[str, Any], list[str]]:
        self._check_body_type(rt, body)
        body = _copy(body)
        body["apiVersion"], body["kind"] = rt.api_version, rt.kind
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise status.bad_request("metadata must be an object")
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise status.bad_request(_NAMESPACE_MISMATCH)
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            alphabet = string.ascii_lowercase + string.digits
            meta["name"] = meta["generateName"] + "".join(random.choices(alphabet, k=5))
        errors = self._meta_errors(rt, meta)
        if errors:
            raise status.invalid_object(
                rt.kind_group, meta.get("name", ""), rt.group, rt.kind, errors
            )
        name = meta["name"]
        if rt.namespaced:
            ns = self._namespace(namespace)
            if ns is None:
                raise status.not_found("namespaces", namespace, "", "namespaces")
            if ns["metadata"].get("deletionTimestamp"):
                raise status.ApiError(
                    403,
                    f'{rt.plural} "{name}" is forbidden: unable to create new content '
                    f"in namespace {namespace} because it is being terminated",
                    details={
                        "name": name,
                        "group": rt.group,
                        "kind": rt.plural,
                        "causes": [
                            {
                                "reason": "NamespaceTerminating",
                                "field": "metadata.namespace",
                                "message": f"namespace {namespace} is being terminated",
                            }
                        ],
                    },
                )
        if (namespace if rt.namespaced else "", name) in self._store[rt.store_key]:
            raise status.already_exists(rt.group_resource, name, rt.group, rt.plural)
        self._system_fields(rt, body)
        if rt.status_subresource and (rt.custom or rt.plural in ("jobs", "pods")):
            body.pop("status", None)  # create cannot set status (their controllers do)
        body = self._prepare(rt, body)
        self._validate(rt, body, None, "")
        warnings: list[str] = []
        if admit:
            warnings = await self._admit(
                "CREATE", rt, "", namespace, name, body, None, user, dry_run
            )
            if (namespace if rt.namespaced else "", name) in self._store[rt.store_key]:
                raise status.already_exists(rt.group_resource, name, rt.group, rt.plural)
        stored = rt.to_storage(_copy(body))
        if dry_run:
            stored["metadata"]["resourceVersion"] = ""
            return self._view(rt, stored), warnings
        self._commit(rt.store_key, "ADDED", stored, None)
        self._after_write(rt, stored, None)
        return self._view(rt, stored), warnings

    def _meta_errors(self, rt: ResourceType, meta: dict[str, Any]) -> list[status.FieldError]:
        errors: list[status.FieldError] = []
        name = meta.get("name")
        if not name:
            return [status.required("metadata.name", "name or generateName is required")]
        if rt.plural == "namespaces" and not rt.group:
            if len(name) > 63 or not _LABEL.fullmatch(name):
                errors.append(
                    status.invalid(
                        "metadata.name",
                        name,
                        _LABEL_MESSAGE,
                    )
                )
        elif len(name) > 253 or not _SUBDOMAIN.fullmatch(name):
            errors.append(
                status.invalid(
                    "metadata.name",
                    name,
                    _SUBDOMAIN_MESSAGE,
                )
            )
        for key, value in (meta.get("labels") or {}).items():
            if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
                errors.append(
                    status.invalid(
                        "metadata.labels",
                        value,
                        _LABEL_VALUE_MESSAGE,
                    )
                )
            prefix, _, short = key.rpartition("/")
            if (
                not short
                or len(short) > 63
                or not re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", short)
                or (prefix and not _SUBDOMAIN.fullmatch(prefix))
            ):
                errors.append(
                    status.invalid(
                        "metadata.labels",
                        key,
                        "name part must consist of alphanumeric "
                        "characters, '-', '_' or '.', and must start and end with an "
                        "alphanumeric character",
                    )
                )
        for value in (meta.get("annotations") or {}).values():
            if not isinstance(value, str):
                raise status.bad_request("metadata.annotations: values must be strings")
        finalizers = meta.get("finalizers")
        if finalizers is not None and (
            not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers)
        ):
            errors.append(
                status.invalid("metadata.finalizers", finalizers, "must be a list of strings")
            )
        return errors

    def _prepare(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side normalisation: pruning and defaults, MicroTime, Secret stringData."""
        if rt.custom and rt.openapi:
            obj = schema.prune_object(rt.openapi, obj)
            schema.apply_defaults(rt.openapi, obj)
        if rt.plural == "leases":
            spec = obj.get("spec") or {}
            for field in _MICRO_TIME_FIELDS:
                if spec.get(field):
                    spec[field] = _micro_time(spec[field], f"spec.{field}")
        if rt.plural == "secrets" and not rt.group:
            obj.setdefault("type", "Opaque")
            for key, value in (obj.pop("stringData", None) or {}).items():
                obj.setdefault("data", {})[key] = base64.b64encode(str(value).encode()).decode()
        if rt.plural == "customresourcedefinitions" and not (obj.get("status") or {}).get(
            "conditions"
        ):
            obj["status"] = _established(obj, _now_text(self.clock()))
        if rt.plural == "namespaces" and not rt.group:
            obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            obj.setdefault("status", {}).setdefault("phase", "Active")
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj[
                "metadata"
            ]["name"]
        return obj

    def _validate(
        self, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None, subresource: str
    ) -> None:
        errors: list[status.FieldError] = []
        if rt.custom and rt.openapi:
            if subresource == "status":
                sub_schema = (rt.openapi.get("properties") or {}).get("status")
                if sub_schema is not None and "status" in obj:
                    errors = schema.validate(
                        sub_schema,
                        obj["status"],
                        "status",
                        (old or {}).get("status", schema.MISSING),
                    )
            else:
                target = obj
                if rt.status_subresource:
                    target = {k: v for k, v in obj.items() if k != "status"}
                errors = schema.validate(
                    rt.openapi, target, "", schema.MISSING if old is None else old
                )
        elif rt.plural == "customresourcedefinitions":
            errors = resources.validate_crd(obj)
            if old is not None:
                for field in ("group", "scope"):
                    if (old.get("spec") or {}).get(field) != (obj.get("spec") or {}).get(field):
                        errors.append(
                            status.invalid(
                                f"spec.{field}",
                                (obj.get("spec") or {}).get(field),
                                "field is immutable",
                            )
                        )
        elif rt.plural in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
            errors = _webhook_configuration_errors(obj)
        elif rt.plural == "leases":
            errors = _lease_errors(obj)
        elif rt.plural == "jobs" and rt.group == "batch" and subresource != "status":
            errors = _job_errors(obj)
        elif rt.group == "events.k8s.io" or (rt.plural == "events" and not rt.group):
            errors = _event_errors(rt, obj)
        if errors:
            name = obj["metadata"].get("name", "")
            raise status.invalid_object(rt.kind_group, name, rt.group, rt.kind, errors)

    async def _admit(
        self,
        operation: str,
        rt: ResourceType,
        subresource: str,
        namespace: str,
        name: str,
        obj: dict[str, Any] | None,
        old: dict[str, Any] | None,
        user: reviews.User,
        dry_run: bool,
    ) -> list[str]:
        configurations = [
            self._view(
                self._types[
                    ("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations")
                ],
                c,
            )
            for c in self._store[
                ("admissionregistration.k8s.io", "validatingwebhookconfigurations")
            ].values()
        ]
        if not configurations:
            return []
        ns = self._namespace(namespace) if rt.namespaced else None
        labels = ((ns or {}).get("metadata") or {}).get("labels") or {}
        attrs = admission.Attributes(
            operation, rt, subresource, namespace, name, obj, old, user, dry_run, labels
        )
        return await self.admission.admit(configurations, attrs)

    async def _update(
        self,
        target: Target,
        mutate: Callable[[dict[str, Any]], dict[str, Any]],
        user: reviews.User,
        *,
        dry_run: bool,
        admit: bool,
        put: bool = False,
    ) -> tuple[dict[str, Any], list[str]]:
        rt = target.rt
        key = (target.namespace, target.name)
        for _ in range(10):  # the server's GuaranteedUpdate: retry if someone wrote meanwhile
            stored = self._store[rt.store_key].get(key)
            if stored is None:
                raise status.not_found(rt.group_resource, target.name, rt.group, rt.plural)
            current = self._view(rt, stored)
            based_on = stored["metadata"]["resourceVersion"]
            candidate = mutate(_copy(current))
            if not isinstance(candidate, dict):
                raise status.bad_request("the patched object must be a JSON object")
            self._check_body_type(
                rt, {k: v for k, v in candidate.items() if k in ("apiVersion", "kind") and v}
            )
            meta = candidate.get("metadata")
            if not isinstance(meta, dict):
                candidate["metadata"] = meta = {}
            wanted_rv = meta.get("resourceVersion")
            if put and not wanted_rv and not rt.unconditional_update:
                # Leases and custom resources refuse blind replaces: the API server's
                # AllowUnconditionalUpdate is false for them.
                field = status.invalid(
                    "metadata.resourceVersion", 0, "must be specified for an update"
                )
                raise status.invalid_object(
                    rt.group_resource, target.name, rt.group, rt.plural, [field]
                )
            if wanted_rv not in (None, "") and str(wanted_rv) != based_on:
                raise status.conflict(rt.group_resource, target.name, rt.group, rt.plural)
            if meta.get("name", target.name) != target.name:
                raise status.bad_request(
                    f"the name of the object ({meta.get('name')}) does not match "
                    f"the name on the URL ({target.name})"
                )
            new = self._merge_update(rt, current, candidate, target.subresource)
            errors = self._meta_errors(rt, new["metadata"])
            old_meta = current["metadata"]
            if old_meta.get("deletionTimestamp"):
                added = [
                    f
                    for f in new["metadata"].get("finalizers") or []
                    if f not in (old_meta.get("finalizers") or [])
                ]
                if added:
                    errors.append(
                        status.forbidden(
                            "metadata.finalizers",
                            "no new finalizers can be added if the object is being deleted, "
                            f"found new finalizers {added!r}",
                        )
                    )
            if errors:
                raise status.invalid_object(rt.kind_group, target.name, rt.group, rt.kind, errors)
            new = self._prepare(rt, new)
            if _comparable(new) == _comparable(current):
                return current, []  # a no-op write changes nothing, not even the resourceVersion
            self._validate(rt, new, current, target.subresource)
            if (rt.generation or rt.custom) and _generation_part(rt, new) != _generation_part(
                rt, current
            ):
                new["metadata"]["generation"] = int(current["metadata"].get("generation") or 0) + 1
            warnings: list[str] = []
            if admit:
                warnings = await self._admit(
                    "UPDATE",
                    rt,
                    target.subresource,
                    target.namespace,
                    target.name,
                    new,
                    current,
                    user,
                    dry_run,
                )
            latest = self._store[rt.store_key].get(key)
            if latest is None or latest["metadata"]["resourceVersion"] != based_on:
                if put and wanted_rv:
                    raise status.conflict(rt.group_resource, target.name, rt.group, rt.plural)
                continue
            if dry_run:
                return new, warnings
            stored_new = rt.to_storage(_copy(new))
            old_stored = rt.to_storage(_copy(current))
            meta_new = stored_new["metadata"]
            if (
                meta_new.get("deletionTimestamp")
                and not meta_new.get("finalizers")
                and not _waits_for_content(rt, stored_new)
            ):
                self._commit(rt.store_key, "DELETED", stored_new, old_stored)
                self._after_delete(rt, stored_new)
            else:
                self._commit(rt.store_key, "MODIFIED", stored_new, old_stored)
                self._after_write(rt, stored_new, old_stored)
            return self._view(rt, stored_new), warnings
        raise status.conflict(
            rt.group_resource, target.name, rt.group, rt.plural, "too many concurrent writes"
        )

    def _merge_update(
        self, rt: ResourceType, current: dict[str, Any], candidate: dict[str, Any], subresource: str
    ) -> dict[str, Any]:
        """The object to store: read-only metadata kept, status split by subresource."""
        if subresource in ("status", "finalize"):
            new = _copy(current)
            if subresource == "finalize":
                new["spec"] = candidate.get("spec") or {}
            elif "status" in candidate:
                new["status"] = candidate["status"]
            else:
                new.pop("status", None)
            return new
        new = _copy(candidate)
        new["apiVersion"], new["kind"] = rt.api_version, rt.kind
        meta = new["metadata"]
        old_meta = current["metadata"]
        for field in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "resourceVersion",
            "namespace",
            "name",
        ):
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        if rt.status_subresource:
            if "status" in current:
                new["status"] = current["status"]
            else:
                new.pop("status", None)
        return new

    async def _delete(
        self,
        target: Target,
        options: dict[str, Any],
        user: reviews.User,
        *,
        dry_run: bool,
        admit: bool,
    ) -> tuple[dict[str, Any], int]:
        rt = target.rt
        key = (target.namespace, target.name)
        stored = self._store[rt.store_key].get(key)
        if stored is None:
            raise status.not_found(rt.group_resource, target.name, rt.group, rt.plural)
        preconditions = (options or {}).get("preconditions") or {}
        meta = stored["metadata"]
        if preconditions.get("uid") and preconditions["uid"] != meta["uid"]:
            raise status.conflict(
                rt.group_resource,
                target.name,
                rt.group,
                rt.plural,
                f"Precondition failed: UID in precondition: {preconditions['uid']}, "
                f"UID in object meta: {meta['uid']}",
            )
        if (
            preconditions.get("resourceVersion")
            and preconditions["resourceVersion"] != meta["resourceVersion"]
        ):
            raise status.conflict(
                rt.group_resource,
                target.name,
                rt.group,
                rt.plural,
                f"Precondition failed: ResourceVersion in precondition: "
                f"{preconditions['resourceVersion']}, ResourceVersion in object meta: "
                f"{meta['resourceVersion']}",
            )
        current = self._view(rt, stored)
        if admit:
            await self._admit(
                "DELETE", rt, "", target.namespace, target.name, None, current, user, dry_run
            )
        if dry_run:
            return current, 200
        if meta.get("finalizers") or _waits_for_content(rt, stored):
            if not meta.get("deletionTimestamp"):
                new = _copy(stored)
                new["metadata"]["deletionTimestamp"] = _now_text(self.clock())
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                if rt.plural == "namespaces" and not rt.group:
                    new.setdefault("status", {})["phase"] = "Terminating"
                if rt.generation or rt.custom:
                    new["metadata"]["generation"] = int(meta.get("generation") or 0) + 1
                self._commit(rt.store_key, "MODIFIED", new, stored)
                self._after_write(rt, new, stored)
                stored = self._store[rt.store_key].get(key, new)
            return self._view(rt, stored), 200
        gone = _copy(stored)
        self._commit(rt.store_key, "DELETED", gone, stored)
        self._after_delete(rt, gone)
        if rt.custom:
            return self._view(rt, gone), 200
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {
                "name": target.name,
                "group": rt.group,
                "kind": rt.plural,
                "uid": meta["uid"],
            },
        }, 200

    async def _delete_collection(
        self, request: web.Request, target: Target, user: reviews.User, dry_run: bool
    ) -> web.StreamResponse:
        rt = target.rt
        labels, fields = self._selection(request, target)
        chosen = [
            stored
            for _, stored in sorted(self._store[rt.store_key].items())
            if self._matches(rt, self._view(rt, stored), target.namespace or None, labels, fields)
        ]
        deleted = []
        for stored in chosen:
            meta = stored["metadata"]
            item = Target(rt, meta.get("namespace", ""), meta["name"], "", "delete")
            view, _ = await self._delete(item, {}, user, dry_run=dry_run, admit=True)
            deleted.append(view if view.get("kind") != "Status" else self._view(rt, stored))
        return web.json_response(
            {
                "kind": rt.list_kind,
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(self._rv)},
                "items": deleted,
            }
        )

    # --- controllers the API server runs ------------------------------------------------

    def _after_write(
        self, rt: ResourceType, stored: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        if rt.plural == "customresourcedefinitions":
            self._serve_crd(stored)
        terminating = stored["metadata"].get("deletionTimestamp")
        if terminating and not (old or {}).get("metadata", {}).get("deletionTimestamp"):
            if rt.plural == "namespaces" and not rt.group:
                self._cascade_namespace(stored["metadata"]["name"])
            elif rt.plural == "customresourcedefinitions":
                self._cascade_crd(stored)

    def _after_delete(self, rt: ResourceType, stored: dict[str, Any]) -> None:
        if rt.plural == "customresourcedefinitions":
            self._unserve_crd(stored)
        namespace = stored["metadata"].get("namespace")
        if namespace:
            self._finish_namespace(namespace)
        for crd in list(
            self._store[("apiextensions.k8s.io", "customresourcedefinitions")].values()
        ):
            if crd["metadata"].get("deletionTimestamp"):
                self._finish_crd(crd)

    def _serve_crd(self, crd: dict[str, Any]) -> None:
        spec = crd["spec"]
        key = (spec["group"], spec["names"]["plural"])
        for type_key in [
            k for k, rt in self._types.items() if rt.custom and (rt.group, rt.plural) == key
        ]:
            del self._types[type_key]
        for rt in resources.from_crd(crd):
            self._types[(rt.group, rt.version, rt.plural)] = rt

    def _unserve_crd(self, crd: dict[str, Any]) -> None:
        spec = crd["spec"]
        key = (spec["group"], spec["names"]["plural"])
        for type_key in [
            k for k, rt in self._types.items() if rt.custom and (rt.group, rt.plural) == key
        ]:
            del self._types[type_key]
        for watch in list(self._watches):
            if watch.rt.store_key == key:
                watch.queue.put_nowait(None)

    def _cascade_namespace(self, namespace: str) -> None:
        for key, objects in list(self._store.items()):
            for (ns, _), stored in list(objects.items()):
                if ns == namespace:
                    self._cascade_delete(key, stored)
        self._finish_namespace(namespace)

    def _cascade_crd(self, crd: dict[str, Any]) -> None:
        key = (crd["spec"]["group"], crd["spec"]["names"]["plural"])
        for stored in list(self._store[key].values()):
            self._cascade_delete(key, stored)
        self._finish_crd(crd)

    def _cascade_delete(self, key: StoreKey, stored: dict[str, Any]) -> None:
        meta = stored["metadata"]
        if meta.get("finalizers"):
            if not meta.get("deletionTimestamp"):
                new = _copy(stored)
                new["metadata"]["deletionTimestamp"] = _now_text(self.clock())
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                self._commit(key, "MODIFIED", new, stored)
        else:
            self._commit(key, "DELETED", _copy(stored), stored)

    def _finish_namespace(self, namespace: str) -> None:
        ns = self._namespace(namespace)
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return
        if any(ns_key == namespace for objects in self._store.values() for (ns_key, _) in objects):
            return
        if not ns["metadata"].get("finalizers"):
            self._commit(("", "namespaces"), "DELETED", _copy(ns), ns)

    def _finish_crd(self, crd: dict[str, Any]) -> None:
        key = (crd["spec"]["group"], crd["spec"]["names"]["plural"])
        if self._store[key] or crd["metadata"].get("finalizers"):
            return
        if (
            crd["metadata"].get("name")
            and ("", crd["metadata"]["name"])
            in self._store[("apiextensions.k8s.io", "customresourcedefinitions")]
        ):
            self._commit(
                ("apiextensions.k8s.io", "customresourcedefinitions"),
                "DELETED",
                _copy(crd),
                crd,
            )
            self._unserve_crd(crd)

    # --- reviews -----------------------------------------------------------------------

    def _review(self, target: Target, body: Any, user: reviews.User) -> dict[str, Any]:
        rt = target.rt
        if not isinstance(body, dict):
            raise status.bad_request("the body of the request must be a JSON object")
        self._check_body_type(rt, body)
        spec = dict(body.get("spec") or {})
        answer = {
            "kind": rt.kind,
            "apiVersion": rt.api_version,
            "metadata": {"creationTimestamp": None, **(body.get("metadata") or {})},
            "spec": spec,
        }
        if rt.plural == "tokenreviews":
            answer["status"] = reviews.token_review(self.tokens, spec)
            return answer
        if rt.plural == "selfsubjectaccessreviews":
            spec = {**spec, "user": user.username, "groups": list(user.groups)}
        errors: list[status.FieldError] = []
        if not spec.get("resourceAttributes") and not spec.get("nonResourceAttributes"):
            errors.append(
                status.required(
                    "spec.resourceAttributes",
                    "exactly one of nonResourceAttributes or resourceAttributes must be specified",
                )
            )
        if (
            rt.plural != "selfsubjectaccessreviews"
            and not spec.get("user")
            and not spec.get("groups")
        ):
            errors.append(
                status.invalid("spec.user", "", "at least one of user or group must be specified")
            )
        if rt.plural == "localsubjectaccessreviews":
            asked = (spec.get("resourceAttributes") or {}).get("namespace", "")
            if asked != target.namespace:
                errors.append(
                    status.invalid(
                        "spec.resourceAttributes.namespace", asked, "must match metadata.namespace"
                    )
                )
        if errors:
            raise status.invalid_object(rt.kind_group, "", rt.group, rt.kind, errors)
        answer["status"] = self.access.review(spec)
        return answer


# --- helpers of the write path ---------------------------------------------------------


def _established(crd: dict[str, Any], now: str) -> dict[str, Any]:
    """The status the API server's CRD controllers write once the names are accepted."""
    spec = crd.get("spec") or {}
    return {
        "acceptedNames": spec.get("names") or {},
        "storedVersions": [v["name"] for v in spec.get("versions") or [] if v.get("storage")],
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": now,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": now,
            },
        ],
    }


def _comparable(obj: dict[str, Any]) -> dict[str, Any]:
    result = _copy(obj)
    result.get("metadata", {}).pop("resourceVersion", None)
    result.get("metadata", {}).pop("managedFields", None)
    return result


def _generation_part(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """What ``metadata.generation`` tracks: all but metadata (and status when it is a
    subresource); for built-ins, the spec."""
    skip = {"metadata", "apiVersion", "kind"} | ({"status"} if rt.status_subresource else set())
    if rt.custom or rt.plural in (
        "validatingwebhookconfigurations",
        "mutatingwebhookconfigurations",
    ):
        return {k: v for k, v in obj.items() if k not in skip}
    return {"spec": obj.get("spec")}


def _waits_for_content(rt: ResourceType, stored: dict[str, Any]) -> bool:
    """Namespaces and CRDs stay (terminating) until what they contain is gone."""
    if rt.plural == "namespaces" and not rt.group:
        return True
    return rt.plural == "customresourcedefinitions"


def _micro_time(value: Any, field: str) -> str:
    try:
        parsed = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError as error:
        raise status.bad_request(f'{field}: parsing time "{value}" as RFC 3339 failed') from error
    if parsed.tzinfo is None:
        raise status.bad_request(f'{field}: parsing time "{value}": missing time zone')
    return parsed.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _lease_errors(obj: dict[str, Any]) -> list[status.FieldError]:
    spec = obj.get("spec") or {}
    errors = []
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and (not isinstance(duration, int) or duration <= 0):
        errors.append(
            status.invalid("spec.leaseDurationSeconds", duration, "must be greater than 0")
        )
    transitions = spec.get("leaseTransitions")
    if transitions is not None and (not isinstance(transitions, int) or transitions < 0):
        errors.append(
            status.invalid(
                "spec.leaseTransitions", transitions, "must be greater than or equal to 0"
            )
        )
    return errors


def _job_errors(obj: dict[str, Any]) -> list[status.FieldError]:
    """What the API server checks of a batch/v1 Job that its tests rely on: a name its
    pods' job-name label can hold, a pod template with containers and a restart policy
    a Job allows."""
    errors = []
    name = (obj.get("metadata") or {}).get("name") or ""
    if len(name) > 63:
        errors.append(status.invalid("metadata.name", name, "must be no more than 63 characters"))
    template = (obj.get("spec") or {}).get("template")
    if not isinstance(template, dict):
        return [*errors, status.required("spec.template")]
    pod = template.get("spec") or {}
    containers = pod.get("containers")
    if not isinstance(containers, list) or not containers:
        errors.append(status.required("spec.template.spec.containers"))
    else:
        for index, container in enumerate(containers):
            for field in ("name", "image"):
                if not (container or {}).get(field):
                    errors.append(
                        status.required(f"spec.template.spec.containers[{index}].{field}")
                    )
    policy = pod.get("restartPolicy")
    if policy not in ("Never", "OnFailure"):
        errors.append(
            status.not_supported("spec.template.spec.restartPolicy", policy, ["OnFailure", "Never"])
        )
    return errors


def _event_errors(rt: ResourceType, obj: dict[str, Any]) -> list[status.FieldError]:
    errors = []
    if rt.group == "events.k8s.io":
        # events.k8s.io/v1 validates new-style events strictly (core/v1 stays lenient).
        view = obj
        for field in ("eventTime", "reportingController", "reportingInstance", "action", "reason"):
            if not view.get(field):
                errors.append(status.required(field))
        if view.get("type") not in ("Normal", "Warning"):
            errors.append(status.not_supported("type", view.get("type"), ["Normal", "Warning"]))
        if len(view.get("note") or "") > 1024:
            errors.append(status.too_long("note", 1024))
    elif not obj.get("involvedObject"):
        errors.append(status.required("involvedObject"))
    return errors


def _webhook_configuration_errors(obj: dict[str, Any]) -> list[status.FieldError]:
    errors: list[status.FieldError] = []
    names: set[str] = set()
    for index, webhook in enumerate(obj.get("webhooks") or []):
        path = f"webhooks[{index}]"
        name = webhook.get("name") or ""
        if not name:
            errors.append(status.required(f"{path}.name"))
        elif name.count(".") < 2:
            errors.append(
                status.invalid(
                    f"{path}.name",
                    name,
                    "should be a domain with at least three segments separated by dots",
                )
            )
        if name in names:
            errors.append(status.duplicate(f"{path}.name", name))
        names.add(name)
        client = webhook.get("clientConfig") or {}
        if bool(client.get("url")) == bool(client.get("service")):
            errors.append(
                status.required(f"{path}.clientConfig", "exactly one of url or service is required")
            )
        versions = webhook.get("admissionReviewVersions") or []
        if not versions:
            errors.append(
                status.required(
                    f"{path}.admissionReviewVersions", "must specify one of v1, v1beta1"
                )
            )
        elif not {"v1", "v1beta1"} & set(versions):
            errors.append(
                status.invalid(
                    f"{path}.admissionReviewVersions",
                    versions,
                    "must include at least one of v1, v1beta1",
                )
            )
        if webhook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            errors.append(
                status.not_supported(
                    f"{path}.sideEffects", webhook.get("sideEffects"), ["None", "NoneOnDryRun"]
                )
            )
        if webhook.get("failurePolicy", "Fail") not in ("Fail", "Ignore"):
            errors.append(
                status.not_supported(
                    f"{path}.failurePolicy", webhook.get("failurePolicy"), ["Fail", "Ignore"]
                )
            )
        timeout = webhook.get("timeoutSeconds")
        if timeout is not None and not (isinstance(timeout, int) and 1 <= timeout <= 30):
            errors.append(
                status.invalid(
                    f"{path}.timeoutSeconds",
                    timeout,
                    "the timeout value must be between 1 and 30 seconds",
                )
            )
        for rule_index, rule in enumerate(webhook.get("rules") or []):
            for op in rule.get("operations") or []:
                if op not in ("*", "CREATE", "UPDATE", "DELETE", "CONNECT"):
                    errors.append(
                        status.not_supported(
                            f"{path}.rules[{rule_index}].operations",
                            op,
                            ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"],
                        )
                    )
    return errors


def _warning_headers(warnings: list[str]) -> dict[str, str]:
    if not warnings:
        return {}
    return {"Warning": ", ".join(f'299 - "{w}"' for w in warnings)}


def _line(event: dict[str, Any]) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode() + b"\n"


def _table_response(body: dict[str, Any], version: str) -> web.Response:
    return web.Response(
        body=json.dumps(body).encode(),
        headers={"Content-Type": f"application/json;as=Table;v={version};g=meta.k8s.io"},
    )


@contextlib.asynccontextmanager
async def serve(**options: Any) -> AsyncIterator[Emulator]:
    """Start an emulator on 127.0.0.1 port 0 for the duration of a block."""
    emulator = Emulator(**options)
    await emulator.start()
    try:
        yield emulator
    finally:
        await emulator.stop()

"""Kubernetes-native authentication and authorisation of API calls.

A worker, or a team's service, presents its ServiceAccount token as the bearer token.
The dispatcher asks the API server who it is (``TokenReview``) and, for each call,
whether RBAC lets that user do it (``SubjectAccessReview`` on the API group
``tickwork.dev``, namespace = tenant; the routes name the verb, the resource and the
resourceName). The tenant of ``system:serviceaccount:NS:NAME`` is ``NS``.

Both answers are cached for a few seconds, positive and negative alike, in bounded
caches, and concurrent identical reviews share one call, so the lease path does not
call the API server per request. Nothing is cached from a failure: an API server that
errs or does not answer in time lets nobody in (``503 auth-unavailable``); a token it
rejects is ``401 unauthenticated``, an action RBAC denies ``403 forbidden``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

import aiohttp
import cachetools
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tickwork.api.auth import Action, Principal, Role
from tickwork.api.review_settings import ReviewSettings
from tickwork.coordination import kubeconfig as kubeconfigs
from tickwork.core.errors import AuthUnavailable, Forbidden, Unauthenticated
from tickwork.core.spec import check_tenant

log = logging.getLogger(__name__)

API_GROUP: Final = "tickwork.dev"
SERVICE_ACCOUNT_PREFIX: Final = "system:serviceaccount:"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class User:
    """A user as TokenReview reports it: what a SubjectAccessReview must repeat."""

    username: str
    uid: str
    groups: tuple[str, ...]
    extra: tuple[tuple[str, tuple[str, ...]], ...]

    @property
    def namespace(self) -> str | None:
        """The namespace of a ServiceAccount user, else None."""
        if not self.username.startswith(SERVICE_ACCOUNT_PREFIX):
            return None
        namespace, _, name = self.username.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
        return namespace if namespace and name else None


def _user_of(info: client.V1UserInfo) -> User:
    extra = info.extra or {}
    return User(
        username=info.username or "",
        uid=info.uid or "",
        groups=tuple(info.groups or ()),
        extra=tuple(sorted((key, tuple(values or ())) for key, values in extra.items())),
    )


class _Cache:
    """Answers by key for a while, with a shorter life for refusals; concurrent misses
    of one key share one lookup, and failed lookups are not kept."""

    def __init__(self, settings: ReviewSettings, clock: Callable[[], float]) -> None:
        self._yes: cachetools.TTLCache[Hashable, Any] = cachetools.TTLCache(
            settings.cache_size, settings.cache_seconds, timer=clock
        )
        self._no: cachetools.TTLCache[Hashable, Any] = cachetools.TTLCache(
            settings.cache_size, settings.negative_cache_seconds, timer=clock
        )
        self._pending: dict[Hashable, asyncio.Future[Any]] = {}

    async def get(
        self, key: Hashable, lookup: Callable[[], Awaitable[T]], positive: Callable[[T], bool]
    ) -> T:
        for cache in (self._yes, self._no):
            found = cache.get(key, _MISSING)
            if found is not _MISSING:
                answer: T = found
                return answer
        pending = self._pending.get(key)
        if pending is None:
            pending = asyncio.ensure_future(lookup())
            self._pending[key] = pending
            pending.add_done_callback(lambda done: self._settle(key, done, positive))
        # Shielded: one caller giving up (a worker that hung up) does not cancel the
        # lookup the others wait for.
        result: T = await asyncio.shield(pending)
        return result

    def _settle(
        self, key: Hashable, done: asyncio.Future[Any], positive: Callable[[Any], bool]
    ) -> None:
        self._pending.pop(key, None)
        if done.cancelled() or done.exception() is not None:
            return
        answer = done.result()
        (self._yes if positive(answer) else self._no)[key] = answer


_MISSING: Final = object()


class KubernetesAuth:
    """The ``Authenticator`` for in-cluster installs (see the module docstring)."""

    def __init__(
        self,
        api: client.ApiClient,
        settings: ReviewSettings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings or ReviewSettings()
        self._authentication = client.AuthenticationV1Api(api)
        self._authorization = client.AuthorizationV1Api(api)
        self._users = _Cache(self.settings, clock)
        self._decisions = _Cache(self.settings, clock)

    async def authenticate(self, token: str) -> Principal | None:
        digest = hashlib.sha256(token.encode("utf-8")).digest()
        user = await self._users.get(
            digest, lambda: self._token_review(token), lambda found: found is not None
        )
        if user is None:
            return None
        namespace = user.namespace
        if namespace is None:
            raise Unauthenticated(
                f"{user.username} is not a ServiceAccount: tickwork accepts ServiceAccount "
                "tokens (system:serviceaccount:NAMESPACE:NAME; the namespace is the tenant)"
            )
        try:
            check_tenant(namespace)
        except ValueError as error:
            raise Unauthenticated(f"namespace {namespace!r} cannot be a tenant: {error}") from None
        return Principal(
            subject=user.username,
            tenant=namespace,
            role=Role.kubernetes,
            grants=_Grants(self, user),
        )

    async def allowed(self, user: User, action: Action) -> tuple[bool, str]:
        """Whether RBAC lets ``user`` do ``action``, and the API server's reason."""
        key = (user, action)
        answer: tuple[bool, str] = await self._decisions.get(
            key, lambda: self._access_review(user, action), lambda found: found[0]
        )
        return answer

    async def _token_review(self, token: str) -> User | None:
        review = client.V1TokenReview(
            spec=client.V1TokenReviewSpec(token=token, audiences=list(self.settings.audiences))
        )
        answer = await self._call("TokenReview", self._authentication.create_token_review, review)
        status = answer.status
        if status is None or not status.authenticated or status.user is None:
            return None
        if self.settings.audiences and not set(self.settings.audiences) & set(
            status.audiences or ()
        ):
            return None
        return _user_of(status.user)

    async def _access_review(self, user: User, action: Action) -> tuple[bool, str]:
        spec = client.V1SubjectAccessReviewSpec(
            user=user.username,
            uid=user.uid or None,
            groups=list(user.groups),
            extra={key: list(values) for key, values in user.extra} or None,
        )
        if action.path is not None:
            spec.non_resource_attributes = client.V1NonResourceAttributes(
                path=action.path, verb=action.verb
            )
        else:
            spec.resource_attributes = client.V1ResourceAttributes(
                group=API_GROUP,
                verb=action.verb,
                resource=action.resource,
                namespace=action.tenant,
                name=action.name,
            )
        review = client.V1SubjectAccessReview(spec=spec)
        answer = await self._call(
            "SubjectAccessReview", self._authorization.create_subject_access_review, review
        )
        status = answer.status
        if status is None:
            return False, ""
        return bool(status.allowed) and not status.denied, status.reason or ""

    async def _call(self, kind: str, method: Callable[..., Awaitable[Any]], body: Any) -> Any:
        seconds = self.settings.timeout_seconds
        try:
            async with asyncio.timeout(seconds):
                return await method(body, _request_timeout=seconds)
        except TimeoutError:
            problem = f"the Kubernetes API server did not answer a {kind} within {seconds:g} s"
        except ApiException as error:
            problem = f"the Kubernetes API server answered a {kind} with {error.status}"
            if error.status in (401, 403):
                problem += (
                    f" (may this dispatcher's ServiceAccount create {kind.lower()}s? "
                    "the chart's ClusterRole grants it)"
                )
        except (OSError, aiohttp.ClientError) as error:
            problem = f"the Kubernetes API server cannot be reached for a {kind} ({error})"
        log.warning("%s", problem, extra={"action": "auth_unavailable"})
        raise AuthUnavailable(f"{problem}; try again shortly")


@dataclass(frozen=True, slots=True)
class _Grants:
    """A reviewed user's grants: each action asked of the API server (cached)."""

    auth: KubernetesAuth
    user: User

    async def check(self, actions: Sequence[Action]) -> None:
        unique = list(dict.fromkeys(actions))
        answers = await self._answers(unique)
        for action, (allowed, reason) in zip(unique, answers, strict=True):
            if not allowed:
                because = f" ({reason})" if reason else ""
                raise Forbidden(
                    f"{self.user.username} may not {action.describe()} "
                    f"(RBAC on the {API_GROUP} API group){because}",
                    field="queues" if action.resource == "queues" else None,
                )

    async def permitted(self, actions: Sequence[Action]) -> list[bool]:
        answers = await self._answers(actions)
        return [allowed for allowed, _ in answers]

    async def _answers(self, actions: Sequence[Action]) -> list[tuple[bool, str]]:
        return list(await asyncio.gather(*(self.auth.allowed(self.user, a) for a in actions)))


async def api_client(kubeconfig: Path | None = None) -> client.ApiClient:
    """A client for the cluster, its configuration loaded as every role loads one
    (``coordination.kubeconfig``)."""
    return client.ApiClient(await kubeconfigs.load_configuration(kubeconfig))

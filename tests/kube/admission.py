"""Validating admission: calling the webhooks of ``ValidatingWebhookConfiguration``
objects the way the API server does (rule matching, selectors, ``matchConditions``,
``AdmissionReview`` v1, ``timeoutSeconds``, ``failurePolicy``, denials as Status)."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
import ssl
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp

from kube import cel, selectors, status
from kube.resources import ResourceType
from kube.reviews import User


@dataclasses.dataclass(frozen=True)
class Attributes:
    """What is being admitted."""

    operation: str  # CREATE, UPDATE, DELETE
    rt: ResourceType
    subresource: str
    namespace: str
    name: str
    obj: dict[str, Any] | None
    old: dict[str, Any] | None
    user: User
    dry_run: bool
    namespace_labels: dict[str, str] | None

    @property
    def options_kind(self) -> str:
        return {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}[
            self.operation
        ]


@dataclasses.dataclass(frozen=True)
class Call:
    """One webhook call, kept for tests: what was asked and how it ended."""

    webhook: str
    url: str
    operation: str
    resource: str
    outcome: str  # allowed, denied, error, ignored-error
    detail: str
    review: dict[str, Any]
    at: datetime.datetime


def _matches_rule(rule: dict[str, Any], attrs: Attributes) -> bool:
    def listed(values: list[str] | None, value: str) -> bool:
        return bool(values) and ("*" in values or value in (values or []))

    if not listed(rule.get("operations"), attrs.operation):
        return False
    if not listed(rule.get("apiGroups"), attrs.rt.group) or not listed(
        rule.get("apiVersions"), attrs.rt.version
    ):
        return False
    scope = rule.get("scope", "*")
    if (scope == "Cluster" and attrs.rt.namespaced) or (
        scope == "Namespaced" and not attrs.rt.namespaced
    ):
        return False
    for entry in rule.get("resources") or []:
        resource, _, sub = entry.partition("/")
        if resource not in ("*", attrs.rt.plural):
            continue
        if (sub or "") == attrs.subresource or (sub == "*" and attrs.subresource) or entry == "*/*":
            return True
    return False


def _labels(obj: dict[str, Any] | None) -> dict[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def matches(webhook: dict[str, Any], attrs: Attributes) -> bool:
    if not any(_matches_rule(rule, attrs) for rule in webhook.get("rules") or []):
        return False
    namespace_selector = selectors.from_object(webhook.get("namespaceSelector"))
    if attrs.rt.namespaced:
        if not namespace_selector.matches(attrs.namespace_labels or {}):
            return False
    elif (
        attrs.rt.plural == "namespaces"
        and not attrs.rt.group
        and not namespace_selector.matches(_labels(attrs.obj or attrs.old))
    ):
        return False
    object_selector = selectors.from_object(webhook.get("objectSelector"))
    if webhook.get("objectSelector"):
        selected = [object_selector.matches(_labels(o)) for o in (attrs.obj, attrs.old) if o]
        if not any(selected):
            return False
    return True


def review(attrs: Attributes, uid: str) -> dict[str, Any]:
    rt = attrs.rt
    kind = {"group": rt.group, "version": rt.version, "kind": rt.kind}
    resource = {"group": rt.group, "version": rt.version, "resource": rt.plural}
    request: dict[str, Any] = {
        "uid": uid,
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": attrs.name,
        "operation": attrs.operation,
        "userInfo": attrs.user.info(),
        "object": attrs.obj,
        "oldObject": attrs.old,
        "dryRun": attrs.dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": attrs.options_kind},
    }
    if attrs.subresource:
        request["subResource"] = attrs.subresource
        request["requestSubResource"] = attrs.subresource
    if rt.namespaced:
        request["namespace"] = attrs.namespace
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


class WebhookFailure(Exception):
    pass


class Dispatcher:
    """Calls matching webhooks; ``resolve`` turns a ``service`` reference into a base URL."""

    def __init__(self, resolve: Callable[[str, str], str | None]) -> None:
        self.resolve = resolve
        self.calls: list[Call] = []
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _url(self, client: dict[str, Any]) -> str:
        if client.get("url"):
            return str(client["url"])
        service = client.get("service") or {}
        base = self.resolve(service.get("namespace", ""), service.get("name", ""))
        if base is None:
            raise WebhookFailure(
                f'service "{service.get("name")}" in namespace "{service.get("namespace")}" '
                "has no endpoints (map it with kube.services)"
            )
        return base.rstrip("/") + (service.get("path") or "")

    async def admit(self, configurations: list[dict[str, Any]], attrs: Attributes) -> list[str]:
        """Warnings to pass on; raises the Status a denial or a failing webhook causes."""
        webhooks = [w for c in configurations for w in c.get("webhooks") or [] if matches(w, attrs)]
        if not webhooks:
            return []
        outcomes = await asyncio.gather(*(self._call(w, attrs) for w in webhooks))
        warnings: list[str] = []
        for webhook, (error, found) in zip(webhooks, outcomes, strict=True):
            warnings.extend(found)
            if error is not None:
                raise error
            del webhook
        return warnings

    async def _call(
        self, webhook: dict[str, Any], attrs: Attributes
    ) -> tuple[status.ApiError | None, list[str]]:
        name = webhook.get("name", "")
        policy = webhook.get("failurePolicy", "Fail")
        uid = str(uuid.uuid4())
        body = review(attrs, uid)
        url = ""
        resource = attrs.rt.plural + (f"/{attrs.subresource}" if attrs.subresource else "")

        def record(outcome: str, detail: str) -> None:
            self.calls.append(
                Call(
                    name,
                    url,
                    attrs.operation,
                    resource,
                    outcome,
                    detail,
                    body,
                    datetime.datetime.now(datetime.UTC),
                )
            )

        if attrs.dry_run and webhook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            record("denied", "no dry-run support")
            return status.ApiError(400, f'admission webhook "{name}" does not support dry run'), []
        try:
            if not self._conditions_hold(webhook, attrs, body["request"]):
                return None, []
            url = self._url(webhook.get("clientConfig") or {})
            response = await self._post(url, webhook, body)
        except WebhookFailure as failure:
            detail = str(failure)
            if policy == "Ignore":
                record("ignored-error", detail)
                return None, []
            record("error", detail)
            return status.internal(f'failed calling webhook "{name}": {detail}'), []
        warnings = [str(w) for w in response.get("warnings") or []]
        if response.get("allowed"):
            record("allowed", "")
            return None, warnings
        result = dict(response.get("status") or {})
        code = int(result.get("code") or 0)
        if code < 400:
            code = 400
        denied_by = f'admission webhook "{name}" denied the request'
        if result.get("message"):
            message = f"{denied_by}: {result['message']}"
        elif result.get("reason"):
            message = f"{denied_by}: {result['reason']}"
        else:
            message = f"{denied_by} without explanation"
        record("denied", message)
        return status.ApiError(
            code, message, reason=result.get("reason", ""), details=result.get("details")
        ), warnings

    def _conditions_hold(
        self, webhook: dict[str, Any], attrs: Attributes, request: dict[str, Any]
    ) -> bool:
        for condition in webhook.get("matchConditions") or []:
            try:
                program = cel._program(condition["expression"])
                result = program.evaluate(
                    {
                        "object": cel.to_cel(attrs.obj),
                        "oldObject": cel.to_cel(attrs.old),
                        "request": cel.to_cel(request),
                    }
                )
            except Exception as error:
                raise WebhookFailure(
                    f"matchCondition {condition.get('name')!r} failed: {error}"
                ) from error
            if not bool(result):
                return False
        return True

    async def _post(
        self, url: str, webhook: dict[str, Any], body: dict[str, Any]
    ) -> dict[str, Any]:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        timeout = float(webhook.get("timeoutSeconds") or 10)
        context: ssl.SSLContext | bool = True
        bundle = (webhook.get("clientConfig") or {}).get("caBundle")
        if url.startswith("https://") and bundle:
            context = ssl.create_default_context(cadata=base64.b64decode(bundle).decode())
        try:
            async with self._session.post(
                url, json=body, ssl=context, timeout=aiohttp.ClientTimeout(total=timeout)
            ) as answer:
                if answer.status != 200:
                    raise WebhookFailure(
                        f'failed to call webhook: Post "{url}": '
                        f"the server responded with {answer.status}"
                    )
                data = await answer.json(content_type=None)
        except TimeoutError as error:
            raise WebhookFailure(
                f'failed to call webhook: Post "{url}": context deadline exceeded'
            ) from error
        except (aiohttp.ClientError, OSError, ValueError) as error:
            raise WebhookFailure(f'failed to call webhook: Post "{url}": {error}') from error
        response = data.get("response") if isinstance(data, dict) else None
        if not isinstance(response, dict):
            raise WebhookFailure("received invalid webhook response: no response field")
        if response.get("uid") != body["request"]["uid"]:
            raise WebhookFailure(
                f"expected response.uid={body['request']['uid']!r}, got {response.get('uid')!r}"
            )
        return response

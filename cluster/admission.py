"""Dynamic admission as the apiserver does it: Mutating/ValidatingWebhookConfiguration objects.

Honours rules (operations, apiGroups, apiVersions, resources incl. ``*`` and ``pods/*``),
scope, namespaceSelector, objectSelector, failurePolicy, timeoutSeconds, sideEffects with
dryRun, reinvocationPolicy IfNeeded, and caBundle verification; applies JSON patches;
denials and call failures become the apiserver's errors; warnings go back to the client.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import ssl
import threading
import urllib.parse
import uuid
from dataclasses import dataclass
from typing import Any

import jsonpatch

from cluster.resources import Registry, Resource
from cluster.selectors import selector_from_dict
from cluster.store import ApiError, Obj, Store

_CONFIGS = {"mutating": "mutatingwebhookconfigurations", "validating": "validatingwebhookconfigurations"}


@dataclass(frozen=True)
class User:
    username: str
    groups: tuple[str, ...] = ("system:authenticated",)

    def info(self) -> Obj:
        return {"username": self.username, "groups": list(self.groups)}


@dataclass(frozen=True)
class Request:
    operation: str
    resource: Resource
    subresource: str
    namespace: str | None
    name: str
    obj: Obj | None
    old: Obj | None
    user: User
    dry_run: bool


def _rule_matches(rule: Obj, req: Request) -> bool:
    operations = rule.get("operations") or []
    if "*" not in operations and req.operation not in operations:
        return False
    if not any(g in ("*", req.resource.group) for g in rule.get("apiGroups") or []):
        return False
    if not any(v in ("*", req.resource.version) for v in rule.get("apiVersions") or []):
        return False
    wanted = f"{req.resource.plural}/{req.subresource}" if req.subresource else req.resource.plural
    for resource in rule.get("resources") or []:
        if resource in ("*/*", wanted) or (resource == "*" and not req.subresource):
            break
        main, _, sub = resource.partition("/")
        if (main == req.resource.plural and sub == "*" and req.subresource) or (main == "*" and sub == req.subresource):
            break
    else:
        return False
    scope = rule.get("scope", "*")
    return scope == "*" or (scope == "Namespaced") == req.resource.namespaced


class _Connections:
    """Kept-alive HTTPS connections per thread and endpoint, and one TLS context per caBundle,
    as the apiserver's webhook clients reuse theirs."""

    def __init__(self) -> None:
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._local = threading.local()

    def context(self, ca_bundle: str) -> ssl.SSLContext:
        if ca_bundle not in self._contexts:
            cadata = base64.b64decode(ca_bundle).decode() if ca_bundle else None
            self._contexts[ca_bundle] = ssl.create_default_context(cadata=cadata)
        return self._contexts[ca_bundle]

    def get(self, host: str, port: int, ca_bundle: str, timeout: float) -> http.client.HTTPSConnection:
        pool = self._local.__dict__.setdefault("pool", {})
        key = (host, port, ca_bundle)
        conn = pool.get(key)
        if conn is None:
            conn = pool[key] = http.client.HTTPSConnection(host, port, context=self.context(ca_bundle))
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def drop(self, host: str, port: int, ca_bundle: str) -> None:
        conn = self._local.__dict__.get("pool", {}).pop((host, port, ca_bundle), None)
        if conn is not None:
            conn.close()


class WebhookAdmission:
    """Reads the webhook configurations from the store on every request, like the apiserver's informers."""

    def __init__(self, store: Store, registry: Registry) -> None:
        self.store, self.registry = store, registry
        self._connections = _Connections()

    def _webhooks(self, kind: str) -> list[Obj]:
        resource = self.registry.get("admissionregistration.k8s.io", "v1", _CONFIGS[kind])
        assert resource is not None
        configs, _ = self.store.list(resource, None)
        return [hook for config in configs for hook in config.get("webhooks") or []]

    def _namespace_labels(self, req: Request) -> dict[str, str] | None:
        if req.resource.kind == "Namespace" and not req.resource.group:
            return ((req.obj or req.old or {}).get("metadata") or {}).get("labels") or {}
        if not req.resource.namespaced or not req.namespace:
            return None
        namespaces = self.registry.get("", "v1", "namespaces")
        assert namespaces is not None
        try:
            return (self.store.get(namespaces, None, req.namespace).get("metadata") or {}).get("labels") or {}
        except ApiError:
            return {}

    def _applies(self, hook: Obj, req: Request) -> bool:
        if not any(_rule_matches(rule, req) for rule in hook.get("rules") or []):
            return False
        ns_labels = self._namespace_labels(req)
        if ns_labels is not None and not selector_from_dict(hook.get("namespaceSelector")).matches(ns_labels):
            return False
        objects = selector_from_dict(hook.get("objectSelector"))
        labels = [((o or {}).get("metadata") or {}).get("labels") or {} for o in (req.obj, req.old) if o]
        return any(objects.matches(lbl) for lbl in labels) if labels else objects.matches({})

    def _review(self, hook: Obj, req: Request, obj: Obj | None) -> Obj:
        kind = {"group": req.resource.group, "version": req.resource.version, "kind": req.resource.kind}
        resource = {"group": req.resource.group, "version": req.resource.version, "resource": req.resource.plural}
        request = {"uid": str(uuid.uuid4()), "kind": kind, "resource": resource, "requestKind": kind,
                   "requestResource": resource, "name": req.name, "namespace": req.namespace or "",
                   "operation": req.operation, "userInfo": req.user.info(), "object": obj, "oldObject": req.old,
                   "dryRun": req.dry_run, "options": None}
        if req.subresource:
            request["subResource"] = request["requestSubResource"] = req.subresource
        if not req.resource.namespaced:
            request.pop("namespace")
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}

    def _call(self, hook: Obj, review: Obj) -> Obj:
        """POST the review; returns its response or raises OSError/ValueError on any failure."""
        config = hook.get("clientConfig") or {}
        url = config.get("url")
        if not url:
            raise ValueError("clientConfig.service is not routable in the local cluster; use clientConfig.url")
        parts = urllib.parse.urlsplit(url)
        host, port, bundle = parts.hostname or "", parts.port or 443, config.get("caBundle") or ""
        timeout = float(hook.get("timeoutSeconds") or 10)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        for attempt in (1, 2):  # a kept-alive connection the server closed meanwhile is retried once, fresh
            conn = self._connections.get(host, port, bundle, timeout)
            reused = conn.sock is not None
            try:
                conn.request("POST", path, json.dumps(review).encode(),  # one segment with the headers
                             {"Content-Type": "application/json", "Accept": "application/json"})
                answer = conn.getresponse()
                data = answer.read()
                break
            except (OSError, http.client.HTTPException) as exc:
                self._connections.drop(host, port, bundle)
                stale = isinstance(exc, ConnectionError | http.client.RemoteDisconnected)
                if not (reused and stale and attempt == 1):
                    raise
        if answer.status != 200:
            raise ValueError(f"the server responded with HTTP {answer.status}")
        response = json.loads(data).get("response")
        if not isinstance(response, dict) or response.get("uid") != review["request"]["uid"]:
            raise ValueError("expected response.uid to match the request uid")
        return response

    def _invoke(self, hook: Obj, req: Request, obj: Obj | None, warnings: list[str], mutating: bool) -> Obj | None:
        name = hook.get("name", "")
        if req.dry_run and hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            raise ApiError(400, "BadRequest", f'admission webhook "{name}" does not support dry run')
        try:
            response = self._call(hook, self._review(hook, req, obj))
        except (OSError, ValueError, http.client.HTTPException) as exc:
            if hook.get("failurePolicy", "Fail") == "Ignore":
                return obj
            url = (hook.get("clientConfig") or {}).get("url", "")
            raise ApiError(500, "InternalError", f'Internal error occurred: failed calling webhook "{name}": '
                                                 f'failed to call webhook: Post "{url}": {exc}') from None
        warnings.extend(response.get("warnings") or [])
        if not response.get("allowed"):
            status = response.get("status") or {}
            code = status.get("code") or 403
            raise ApiError(code, status.get("reason") or "Forbidden",
                           f'admission webhook "{name}" denied the request: {status.get("message", "")}'.rstrip(": "))
        if mutating and response.get("patch") and obj is not None:
            if response.get("patchType") != "JSONPatch":
                raise ApiError(500, "InternalError", f'Internal error occurred: webhook "{name}": '
                                                     "unsupported patchType")
            try:
                patch = json.loads(base64.b64decode(response["patch"]))
                obj = jsonpatch.apply_patch(obj, patch)
            except (ValueError, jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                raise ApiError(500, "InternalError", f'Internal error occurred: webhook "{name}" returned an '
                                                     f"invalid patch: {exc}") from None
        return obj

    def mutate(self, req: Request) -> tuple[Obj | None, list[str]]:
        warnings: list[str] = []
        obj = copy.deepcopy(req.obj)
        hooks = [h for h in self._webhooks("mutating") if self._applies(h, req)]
        after: dict[int, Any] = {}
        for index, hook in enumerate(hooks):
            obj = self._invoke(hook, req, obj, warnings, mutating=True)
            after[index] = copy.deepcopy(obj)
        for index, hook in enumerate(hooks):  # reinvocationPolicy: IfNeeded, at most once more
            if hook.get("reinvocationPolicy") == "IfNeeded" and after[index] != obj:
                obj = self._invoke(hook, req, obj, warnings, mutating=True)
        return obj, warnings

    def validate(self, req: Request) -> list[str]:
        warnings: list[str] = []
        for hook in self._webhooks("validating"):
            if self._applies(hook, req):
                self._invoke(hook, req, req.obj, warnings, mutating=False)
        return warnings

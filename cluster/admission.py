"""Dynamic admission as the apiserver does it: Mutating/ValidatingWebhookConfiguration objects.

Honours rules (operations, apiGroups, apiVersions, resources incl. ``*`` and ``pods/*``),
scope, namespaceSelector, objectSelector, matchConditions, failurePolicy, timeoutSeconds,
sideEffects with dryRun, reinvocationPolicy IfNeeded, and caBundle verification; applies JSON
patches; denials and call failures become the apiserver's errors; warnings go back to the client.

matchConditions (GA in 1.30) are CEL expressions over ``object``, ``oldObject`` (null on CREATE,
``object`` null on DELETE) and ``request`` (the AdmissionRequest's attributes), evaluated with
cel-python after rules and selectors matched: any false skips the webhook; otherwise an error
follows failurePolicy (Fail: the request is forbidden with the error, Ignore: the webhook is
skipped); all true calls it. ``authorizer`` is declared but not supported here: using it is an
evaluation error. Webhook configurations are validated on write like the apiserver's
``validateMatchConditions``: at most 64, names required, qualified and unique, expressions
required and compiling, with no reference to an undeclared variable.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import select
import ssl
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from typing import Any

import jsonpatch

from cluster import cel
from cluster.resources import Registry, Resource
from cluster.selectors import selector_from_dict
from cluster.store import ApiError, Obj, Store
from cluster.validation.errors import duplicate, invalid, required
from cluster.validation.names import qualified_name

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


# --- matchConditions -------------------------------------------------------------------------------------------

MAX_MATCH_CONDITIONS = 64
_PROGRAMS = cel.Programs(frozenset({"object", "oldObject", "request", "authorizer"}))


class MatchConditionError(Exception):
    """A matchCondition that cannot be compiled or evaluated; the message is the apiserver's."""


def validate_match_conditions(conditions: Any, path: str) -> list[str]:
    """``validateMatchConditions`` for one webhook's matchConditions (errors at ``path``)."""
    if conditions is None:
        return []
    if not isinstance(conditions, list):
        return [invalid(path, conditions, "must be a list")]
    errors: list[str] = []
    if len(conditions) > MAX_MATCH_CONDITIONS:
        errors.append(f"{path}: Too many: {len(conditions)}: must have at most {MAX_MATCH_CONDITIONS} items")
    names: set[str] = set()
    for index, condition in enumerate(conditions):
        where = f"{path}[{index}]"
        condition = condition if isinstance(condition, dict) else {}
        expression = str(condition.get("expression") or "").strip()
        if not expression:
            errors.append(required(f"{where}.expression"))
        else:
            try:
                _PROGRAMS.compile(expression)
            except cel.CelError as exc:
                errors.append(invalid(f"{where}.expression", expression, str(exc)))
        name = str(condition.get("name") or "")
        if not name:
            errors.append(required(f"{where}.name"))
        else:
            errors += [invalid(f"{where}.name", name, m) for m in qualified_name(name)]
            if name in names:
                errors.append(duplicate(f"{where}.name", name))
            names.add(name)
    return errors


def validate_webhook_configuration(config: Obj) -> list[str]:
    """The parts of Mutating/ValidatingWebhookConfiguration validation the emulator checks: matchConditions."""
    hooks = config.get("webhooks")
    if not isinstance(hooks, list):
        return []
    return [error for index, hook in enumerate(hooks) if isinstance(hook, dict)
            for error in validate_match_conditions(hook.get("matchConditions"), f"webhooks[{index}].matchConditions")]


#: subresources whose request body is another kind than the resource's (AdmissionRequest.kind)
_SUBRESOURCE_KINDS = {("pods", "binding"): ("", "v1", "Binding"), ("pods", "eviction"): ("policy", "v1", "Eviction")}


def _kind(req: Request) -> Obj:
    """The kind of the object under review: a pods/eviction request reviews a policy/v1 Eviction."""
    group, version, kind = _SUBRESOURCE_KINDS.get((req.resource.plural, req.subresource),
                                                  (req.resource.group, req.resource.version, req.resource.kind))
    return {"group": group, "version": version, "kind": kind}


def _admission_request(req: Request) -> Obj:
    """The ``request`` variable: AdmissionRequest as ``CreateAdmissionRequest`` builds it, fields omitted
    when empty as their JSON tags say (so ``has(request.subResource)`` is false without one)."""
    kind = _kind(req)
    resource = {"group": req.resource.group, "version": req.resource.version, "resource": req.resource.plural}
    user: Obj = {"username": req.user.username}
    if req.user.groups:
        user["groups"] = list(req.user.groups)
    request: Obj = {"uid": "", "kind": kind, "resource": resource, "requestKind": kind, "requestResource": resource,
                    "operation": req.operation, "userInfo": user, "dryRun": req.dry_run}
    for key, value in (("subResource", req.subresource), ("requestSubResource", req.subresource),
                       ("name", req.name), ("namespace", req.namespace or "")):
        if value:
            request[key] = value
    return request


def _evaluate(expression: str, activation: dict[str, Any]) -> bool:
    try:
        compiled = _PROGRAMS.compile(expression)
    except cel.CelError as exc:
        raise MatchConditionError(str(exc)) from None
    try:
        result = cel.evaluate(compiled, activation)
    except cel.CelError as exc:
        detail = str(exc)
        if "authorizer" in compiled.reads:
            detail = f"{detail} (the local cluster does not support the authorizer variable)"
        raise MatchConditionError(f"expression '{expression}' resulted in error: {detail}") from None
    if not isinstance(result, cel.celpy().celtypes.BoolType):
        raise MatchConditionError(f"expression '{expression}' resulted in error: expected a bool, got "
                                  f"{type(result).__name__}")
    return bool(result)


def match_conditions(hook: Obj, req: Request, obj: Obj | None) -> bool:
    """Whether the webhook is called (the apiserver's ``matcher.Match``); raises MatchConditionError when it
    must not be called and the request fails (an error, none false, failurePolicy Fail)."""
    conditions = hook.get("matchConditions") or []
    if not conditions:
        return True
    try:
        activation = {"object": cel.to_cel(obj), "oldObject": cel.to_cel(req.old),
                      "request": cel.to_cel(_admission_request(req))}
    except Exception as exc:
        errors = [f"converting the request: {exc}"]
    else:
        errors = []
        for condition in conditions:
            try:
                if not _evaluate(str(condition.get("expression") or "").strip(), activation):
                    return False  # any false skips the webhook, whatever else erred
            except MatchConditionError as exc:
                errors.append(str(exc))
    if not errors:
        return True
    if hook.get("failurePolicy", "Fail") == "Ignore":
        return False
    raise MatchConditionError(errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")


# http.DefaultTransport's IdleConnTimeout, which the apiserver's webhook transports keep (SetOldTransportDefaults).
IDLE_CONN_TIMEOUT = 90.0


class _Connection(http.client.HTTPSConnection):
    """One kept-alive connection that counts the bytes of the current request it put on the wire
    (Go's ``persistConn.nwrite``): a request that failed with nothing written may be sent again."""

    written = 0
    idle_since = 0.0

    def send(self, data: Any) -> None:
        if self.sock is None:
            self.connect()  # as http.client's own send does (auto_open)
        view = memoryview(data if isinstance(data, bytes | bytearray) else bytes(data))
        while view:
            sent = self.sock.send(view)
            self.written += sent
            view = view[sent:]


def _closed_while_idle(conn: _Connection) -> bool:
    """Go's ``persistConn.readLoop``: an idle pooled connection has a read pending; EOF (the server closed it,
    e.g. at its keep-alive timeout), unsolicited bytes or an error close it and take it out of the pool
    (``readLoopPeekFailLocked``) before anyone reuses it. TLS records that carry no data (session tickets)
    are consumed and keep it."""
    sock = conn.sock
    if sock is None:
        return True
    if not select.select([sock], [], [], 0)[0]:
        return False
    timeout = sock.gettimeout()
    sock.setblocking(False)
    try:
        sock.recv(1)  # b"": EOF; data: an unsolicited response
        return True
    except ssl.SSLWantReadError:
        return False
    except OSError:
        return True
    finally:
        sock.settimeout(timeout)


class _Connections:
    """Kept-alive HTTPS connections per thread and endpoint, and one TLS context per caBundle, as the
    apiserver's webhook clients (Go ``http.Transport``) reuse theirs: a connection the server closed while
    idle, or idle longer than ``IDLE_CONN_TIMEOUT``, is closed instead of reused."""

    def __init__(self) -> None:
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._local = threading.local()

    def context(self, ca_bundle: str) -> ssl.SSLContext:
        if ca_bundle not in self._contexts:
            cadata = base64.b64decode(ca_bundle).decode() if ca_bundle else None
            self._contexts[ca_bundle] = ssl.create_default_context(cadata=cadata)
        return self._contexts[ca_bundle]

    def get(self, host: str, port: int, ca_bundle: str, timeout: float) -> _Connection:
        """A live pooled connection (``sock`` set: reused) or a new one (``sock`` None: dialled on first send)."""
        pool = self._local.__dict__.setdefault("pool", {})
        key = (host, port, ca_bundle)
        conn = pool.get(key)
        if conn is not None and conn.sock is not None and (
                time.monotonic() - conn.idle_since > IDLE_CONN_TIMEOUT or _closed_while_idle(conn)):
            conn.close()
        if conn is None:
            conn = pool[key] = _Connection(host, port, context=self.context(ca_bundle))
        conn.timeout, conn.written = timeout, 0
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def put_idle(self, conn: _Connection) -> None:
        conn.idle_since = time.monotonic()

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
        kind = _kind(req)
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
        for attempt in (1, 2):
            conn = self._connections.get(host, port, bundle, timeout)
            reused = conn.sock is not None
            try:
                conn.request("POST", path, json.dumps(review).encode(),  # one segment with the headers
                             {"Content-Type": "application/json", "Accept": "application/json"})
                answer = conn.getresponse()
                data = answer.read()
                self._connections.put_idle(conn)
                break
            except (OSError, http.client.HTTPException):
                self._connections.drop(host, port, bundle)
                # Go's shouldRetryRequest for this POST: only a reused connection on which nothing of the
                # request was written (nothingWrittenError; the body can be rewound) is retried, once, on a new
                # one. Once bytes went out a POST is not replayable: the error is the webhook call's failure.
                if not (reused and conn.written == 0 and attempt == 1):
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

    def _matches(self, hook: Obj, req: Request, obj: Obj | None) -> bool:
        """matchConditions on the object as it is now (after earlier mutations); an error with failurePolicy
        Fail forbids the request, as ``ShouldCallHook`` does."""
        try:
            return match_conditions(hook, req, obj)
        except MatchConditionError as exc:
            resource = f"{req.resource.plural}.{req.resource.group}" if req.resource.group else req.resource.plural
            what = f'{resource} "{req.name}"' if req.name else resource
            raise ApiError(403, "Forbidden", f"{what} is forbidden: {exc}",
                           {"name": req.name, "group": req.resource.group, "kind": req.resource.plural}) from None

    def mutate(self, req: Request) -> tuple[Obj | None, list[str]]:
        warnings: list[str] = []
        obj = copy.deepcopy(req.obj)
        hooks = [h for h in self._webhooks("mutating") if self._applies(h, req)]
        after: dict[int, Any] = {}
        for index, hook in enumerate(hooks):
            if self._matches(hook, req, obj):
                obj = self._invoke(hook, req, obj, warnings, mutating=True)
                after[index] = copy.deepcopy(obj)
        for index, hook in enumerate(hooks):  # reinvocationPolicy: IfNeeded, at most once more, if still matching
            if (hook.get("reinvocationPolicy") == "IfNeeded" and index in after and after[index] != obj
                    and self._matches(hook, req, obj)):
                obj = self._invoke(hook, req, obj, warnings, mutating=True)
        return obj, warnings

    def validate(self, req: Request) -> list[str]:
        warnings: list[str] = []
        for hook in self._webhooks("validating"):
            if self._applies(hook, req) and self._matches(hook, req, req.obj):
                self._invoke(hook, req, req.obj, warnings, mutating=False)
        return warnings

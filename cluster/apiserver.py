"""The emulated kube-apiserver's REST layer: discovery, CRUD, subresources, patch, list and watch.

Routing and status codes follow the Kubernetes API conventions, so that the official Python
client and kubectl work unchanged. Storage lives in ``Store``; admission (webhooks) and the
built-in validation run on every write, the way the real request pipeline orders them:
mutating admission, validation, validating admission, persistence.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from cluster import deletion, events, eviction, lifecycle, priority, tables
from cluster.admission import Request, User, WebhookAdmission, validate_webhook_configuration
from cluster.audit import AuditLog, request_info
from cluster.defaults import apply_defaults, default_priority_class, label_namespace_name, scheduling_gated_condition
from cluster.patches import APPLY_PATCH, PatchError, apply_patch, server_side_apply
from cluster.rbac import review_errors, review_status, stored_policy
from cluster.resources import Registry, Resource, from_crd
from cluster.selectors import SelectorError, parse_field_selector, parse_label_selector
from cluster.store import ApiError, Event, Obj, Store, now, precondition_failure
from cluster.validation import schema, schema_cel
from cluster.validation.binding import validate_binding
from cluster.validation.crd import validate_crd
from cluster.validation.decode import decode_errors
from cluster.validation.errors import causes, invalid_message
from cluster.validation.job import validate_job_policies
from cluster.validation.meta import validate_object_meta
from cluster.validation.namespace import validate_namespace_finalizers
from cluster.validation.pod import validate_pod_create
from cluster.validation.pod_update import validate_pod_update
from cluster.validation.priority_class import validate_priority_class, validate_priority_class_update

KUBERNETES_VERSION = {"major": "1", "minor": "31", "gitVersion": "v1.31.0-kubenexus-emulator",
                      "gitCommit": "emulator", "gitTreeState": "clean", "buildDate": "2026-11-22T00:00:00Z",
                      "goVersion": "go1.23", "compiler": "gc", "platform": "linux/amd64"}
VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
#: The apiserver's own client (the eviction subresource's writes of budgets): a privileged user
LOOPBACK = User("system:apiserver", ("system:authenticated", "system:masters"))
#: The finalizer a CRD's deletion adds; cluster/crd_finalizer.py deletes its objects, then removes it.
CRD_CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"


@dataclass
class Response:
    status: int
    body: Obj | None = None
    stream: Iterator[Obj] | None = None  # watch events, one JSON line each
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Target:
    resource: Resource
    namespace: str | None
    name: str = ""
    subresource: str = ""


_PATH = re.compile(r"^/(?:api/(?P<core>[^/]+)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
                   r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$")


class ApiServer:
    def __init__(self, store: Store, registry: Registry | None = None, address: str = "127.0.0.1:0") -> None:
        self.store, self.registry = store, registry or Registry()
        self.admission = WebhookAdmission(store, self.registry)
        self.address = address
        self.audit = AuditLog()  # every request served, as the authorizer sees it
        self.authorizer: Any = None  # cluster.rbac.StoreAuthorizer once RBAC is enforced for some users

    def _admit(self, req: Request) -> tuple[Obj | None, list[str]]:
        """The built-in NamespaceLifecycle and Priority plugins then the mutating webhooks, the strategy's
        PrepareForCreate and built-in validation, the Priority plugin then the validating webhooks: the apiserver's
        order."""
        lifecycle.admit(req, self._namespaces(), self._namespace)
        priority.admit(req, self._priority_classes)  # the request's own object, changed in place
        custom = not req.resource.builtin and req.resource.schema is not None
        writes = req.operation in ("CREATE", "UPDATE")
        if req.obj is not None and custom and writes:
            schema.default(req.obj, req.resource.schema)  # as the request is decoded: the webhooks see the defaults
        obj, warnings = self.admission.mutate(req)
        if obj is not None and req.operation == "CREATE" and not req.subresource:
            _prepare_for_create(req.resource, obj)
        if obj is not None and custom and writes:
            obj = schema.prune(obj, req.resource.schema)  # unknown fields and disallowed nulls are dropped
            schema.default(obj, req.resource.schema)  # and what the webhooks' patches left out is defaulted again
        if obj is not None and req.operation in ("CREATE", "UPDATE") and (
                req.subresource not in ("status", "binding", "eviction") or (custom and req.subresource == "status")):
            self._validate(req.resource, obj, req.old, req.subresource)
        admitted = dataclasses.replace(req, obj=obj)
        priority.validate(admitted, self._priority_classes)
        warnings += self.admission.validate(admitted)
        return obj, warnings

    def _namespaces(self) -> Resource:
        resource = self.registry.get("", "v1", "namespaces")
        assert resource is not None
        return resource

    def _namespace(self, name: str) -> Obj | None:
        """The NamespaceLifecycle plugin's lookup: the namespace stored now, if any."""
        try:
            return self.store.get(self._namespaces(), None, name)
        except ApiError as exc:
            if exc.code != 404:
                raise
            return None

    def _priority_classes(self) -> list[Obj]:
        """The Priority plugin's lister: the PriorityClasses stored now."""
        resource = self.registry.get(priority.GROUP, "v1", priority.PLURAL)
        assert resource is not None
        return self.store.items(resource)

    # --- entry point -------------------------------------------------------------------

    def handle(self, method: str, raw_path: str, headers: dict[str, str], body: bytes, user: User) -> Response:
        info = request_info(method, raw_path)
        status = 500
        try:
            denied = self.authorizer.check(user.username, user.groups, info) if self.authorizer else None
            response = Response(403, denied.status()) if denied else self._handle(method, raw_path, headers, body,
                                                                                  user)
            status = response.status
            return response
        finally:
            self.audit.record(user.username, user.groups, method, raw_path, status, info)

    def _handle(self, method: str, raw_path: str, headers: dict[str, str], body: bytes, user: User) -> Response:
        parsed = urllib.parse.urlsplit(raw_path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(parsed.query, keep_blank_values=True).items()}
        path = parsed.path.rstrip("/") or "/"
        try:
            discovery = self._discovery(method, path)
            if discovery is not None:
                return discovery
            target = self._target(path)
            if target is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return self._dispatch(method, target, query, headers, body, user)
        except ApiError as exc:
            return Response(exc.code, exc.status())

    # --- discovery ---------------------------------------------------------------------

    def _discovery(self, method: str, path: str) -> Response | None:
        if method != "GET":
            return None
        if path == "/version":
            return Response(200, KUBERNETES_VERSION)
        if path == "/api":
            return Response(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": self.address}]})
        if path == "/apis":
            groups: dict[str, list[str]] = {}
            for resource in self.registry.all():
                if resource.group:
                    versions = groups.setdefault(resource.group, [])
                    if resource.version not in versions:
                        versions.append(resource.version)
            return Response(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": group, "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
                 "preferredVersion": {"groupVersion": f"{group}/{versions[0]}", "version": versions[0]}}
                for group, versions in sorted(groups.items())]})
        if path.startswith("/openapi/v3"):
            return self._openapi(path.removeprefix("/openapi/v3").lstrip("/"))
        match = re.match(r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))$", path)
        if not match:
            return None
        group, version = match["group"] or "", match["version"] or match["core"]
        resources = [r for r in self.registry.all() if r.group == group and r.version == version]
        if not resources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        listed = []
        for r in sorted(resources, key=lambda r: r.plural):
            verbs = [v for v in VERBS if v != "deletecollection"] if lifecycle.is_namespace(r) else VERBS
            listed.append({"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind,
                           "verbs": verbs if r.stored else ["create"], "shortNames": list(r.short_names)})
            for sub in r.subresources:
                entry = {"name": f"{r.plural}/{sub}", "singularName": "", "namespaced": r.namespaced, "kind": r.kind,
                         "verbs": ["get", "patch", "update"]}
                if sub == "finalize":  # FinalizeREST is an Updater only
                    entry["verbs"] = ["update"]
                elif sub == "binding":
                    entry.update(kind="Binding", verbs=["create"])
                elif sub == "eviction":  # kubectl drain finds the Eviction's group and version here
                    entry.update(group="policy", version="v1", kind="Eviction", verbs=["create"])
                listed.append(entry)
        return Response(200, {"kind": "APIResourceList", "apiVersion": "v1",
                              "groupVersion": f"{group}/{version}" if group else version, "resources": listed})

    def _openapi(self, group_version: str) -> Response:
        """Just enough OpenAPI v3 for kubectl: each built-in PATCH operation and its query parameters.

        kubectl reads it to learn that the server validates fields itself (``fieldValidation``);
        custom resources are absent, as kubectl then checks Namespace's document instead.
        """
        builtin = [r for r in self.registry.all() if r.builtin and r.stored]  # reviews have no PATCH

        def gv_path(r: Resource) -> str:
            return f"apis/{r.group}/{r.version}" if r.group else f"api/{r.version}"

        if not group_version:
            return Response(200, {"paths": {gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash=emulator"}
                                            for gv in sorted({gv_path(r) for r in builtin})}})
        resources = [r for r in builtin if gv_path(r) == group_version]
        if not resources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        paths = {}
        for r in resources:
            scope = "/namespaces/{namespace}" if r.namespaced else ""
            paths[f"/{gv_path(r)}{scope}/{r.plural}/{{name}}"] = {"patch": {
                "x-kubernetes-group-version-kind": {"group": r.group, "version": r.version, "kind": r.kind},
                "parameters": [{"name": name, "in": "query", "schema": {"type": "string"}}
                               for name in ("dryRun", "fieldManager", "fieldValidation", "force")]}}
        return Response(200, {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.31.0"},
                              "paths": paths, "components": {"schemas": {}}})

    def _target(self, path: str) -> Target | None:
        match = _PATH.match(path)
        if not match:
            return None
        group, version = match["group"] or "", match["version"] or match["core"]
        namespace, plural, name, sub = match["ns"], match["plural"], match["name"] or "", match["sub"] or ""
        resource = self.registry.get(group, version, plural)
        if resource is None and namespace and not name and not group:  # /api/v1/namespaces/{name}/status
            namespace, plural, name, sub = None, "namespaces", namespace, plural
            resource = self.registry.get(group, version, plural)
        if resource is None:
            return None
        if sub and sub not in resource.subresources:
            return None
        return Target(resource, urllib.parse.unquote(namespace) if namespace else None,
                      urllib.parse.unquote(name), sub)

    # --- views: events.k8s.io Events are stored as the core/v1 Events they are ------------------------------------

    def _stored(self, resource: Resource) -> Resource:
        """The resource whose stored objects ``resource`` serves (itself, but for events.k8s.io Events)."""
        if events.is_events_v1(resource.group, resource.kind):
            core = self.registry.get("", "v1", "events")
            assert core is not None
            return core
        return resource

    @staticmethod
    def _out(resource: Resource, obj: Obj) -> Obj:
        """A stored object as ``resource`` serves it."""
        return events.to_events_v1(obj) if events.is_events_v1(resource.group, resource.kind) else obj

    @staticmethod
    def _in(resource: Resource, obj: Any) -> Any:
        """An object written through ``resource`` as it is stored."""
        return events.to_core(obj) if events.is_events_v1(resource.group, resource.kind) else obj

    # --- verbs -------------------------------------------------------------------------

    def _dispatch(self, method: str, target: Target, query: dict[str, str], headers: dict[str, str], body: bytes,
                  user: User) -> Response:
        resource = target.resource
        if resource.namespaced and target.namespace is None and (method != "GET" or target.name):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        dry_run = query.get("dryRun") == "All"
        content_type = headers.get("content-type", "").split(";")[0].strip()
        if method in ("POST", "PUT") and body and content_type not in ("", "application/json"):
            # This emulator decodes JSON only; a real apiserver also speaks protobuf and YAML.
            raise ApiError(415, "UnsupportedMediaType", 'the body of the request was in an unknown format - '
                                                        'accepted media types include: application/json')
        if not resource.stored:  # a review: create is the only verb, and nothing is kept
            if method == "POST" and not target.name:
                return self._review(_json(body))
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        if target.subresource == "finalize" and method != "PUT":  # FinalizeREST is an Updater only
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        table = tables.negotiate(headers.get("accept", "")) if method == "GET" else None
        include = tables.include_object(query) if table else ""
        if method == "GET" and not target.name:
            if query.get("watch") in ("true", "1"):
                return self._watch(target, query, table, include)
            return self._list(target, query, table, include)
        if method == "GET":
            obj = self._out(resource, self.store.get(self._stored(resource), target.namespace, target.name))
            if table:
                return Response(200, self._table(resource, [obj], obj["metadata"].get("resourceVersion", ""), table,
                                                 include))
            return Response(200, obj)
        if method == "POST" and target.subresource == "binding":
            return self._bind(target, _json(body), user)
        if method == "POST" and target.subresource == "eviction":
            return self._evict(target, _json(body), user, dry_run)
        if method == "POST" and not target.name:
            return self._create(target, _json(body), user, dry_run)
        if method == "PUT" and target.name:
            return self._update(target, lambda current: _json(body), user, dry_run, put=True)
        if method == "PATCH" and target.name and content_type == APPLY_PATCH:
            return self._apply(target, query, body, user, dry_run)
        if method == "PATCH" and target.name:
            def patched(current: Obj) -> Obj:
                try:
                    return apply_patch(current, content_type, body)
                except PatchError as exc:
                    raise ApiError(exc.status, exc.reason, str(exc)) from None

            return self._update(target, patched, user, dry_run, put=False)
        if method == "DELETE" and target.name:
            return self._delete(target, deletion.delete_options(_json(body) if body else None, query), user, dry_run)
        if method == "DELETE" and not lifecycle.is_namespace(resource):  # the namespace REST has no DeleteCollection
            return self._delete_collection(target, deletion.delete_options(_json(body) if body else None, query),
                                           query, user, dry_run)
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def _selectors(self, resource: Resource, query: dict[str, str]) -> Callable[[Obj], bool]:
        """Label and field selectors over the stored objects (for Events: over their core/v1 field set)."""
        is_event = resource.kind == "Event" and resource.group in ("", events.EVENTS_GROUP)
        v1_event = events.is_events_v1(resource.group, resource.kind)
        supported = tuple(events.FIELD_LABELS) if v1_event else events.CORE_FIELD_LABELS if is_event \
            else resource.field_selectors
        try:
            labels = parse_label_selector(query.get("labelSelector", ""))
            fields = parse_field_selector(query.get("fieldSelector", ""), supported)
        except SelectorError as exc:
            raise ApiError(400, "BadRequest", str(exc)) from None
        if v1_event:
            fields = events.core_selector(fields)
        if is_event:
            return lambda obj: labels.matches((obj.get("metadata") or {}).get("labels") or {}) and fields.matches(
                events.selectable(obj))
        return lambda obj: labels.matches((obj.get("metadata") or {}).get("labels") or {}) and fields.matches(obj)

    def _table(self, resource: Resource, items: list[Obj], resource_version: str, version: str, include: str,
               headers: bool = True) -> Obj:
        return tables.table(resource, items, resource_version, version, include, headers=headers,
                            printed=lambda obj: self._in(resource, obj))

    def _list(self, target: Target, query: dict[str, str], table: str | None = None, include: str = "") -> Response:
        resource = target.resource
        stored, rv = self.store.list(self._stored(resource), target.namespace, self._selectors(resource, query))
        items = [self._out(resource, obj) for obj in stored]
        if table:
            return Response(200, self._table(resource, items, str(rv), table, include))
        return Response(200, {"kind": f"{resource.kind}List", "apiVersion": resource.api_version,
                              "metadata": {"resourceVersion": str(rv)}, "items": items})

    def _watch(self, target: Target, query: dict[str, str], table: str | None = None, include: str = "") -> Response:
        resource = target.resource
        stored_resource = self._stored(resource)
        match = self._selectors(resource, query)
        timeout = float(query.get("timeoutSeconds") or 1800)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        since_text = query.get("resourceVersion", "")
        send_initial = query.get("sendInitialEvents")  # streaming list: initial state, then a marked bookmark
        if send_initial is not None and query.get("resourceVersionMatch") != "NotOlderThan":
            raise ApiError(422, "Invalid", 'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
                                           "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
        initial: list[Obj] = []
        if send_initial == "true" or (send_initial is None and since_text in ("", "0")):
            initial, since = self.store.list(stored_resource, target.namespace, match)
        elif since_text in ("", "0"):
            since = self.store.resource_version
        else:
            try:
                since = int(since_text)
            except ValueError:
                raise ApiError(400, "BadRequest", f"invalid resource version: {since_text}") from None
        deadline = time.monotonic() + timeout
        changes = self.store.watch(stored_resource, target.namespace, since, deadline, match,
                                   bookmark_every=1.0 if bookmarks else None)
        first = [True]

        def shown(obj: Obj) -> Obj:
            """The object as served; as a Table when asked, the column definitions in the first event only."""
            obj = self._out(resource, obj)
            if not table:
                return obj
            headers, first[0] = first[0], False
            return self._table(resource, [obj], obj["metadata"].get("resourceVersion", ""), table, include, headers)

        def stream() -> Iterator[Obj]:
            # Lazy, so the 200 and headers go out before the first event; a too old resourceVersion
            # (410 Expired) arrives as an ERROR event in the stream, as from the apiserver's watch cache.
            for obj in initial:
                yield {"type": "ADDED", "object": shown(obj)}
            if send_initial == "true":
                yield {"type": "BOOKMARK", "object": {"kind": resource.kind, "apiVersion": resource.api_version,
                                                      "metadata": {"resourceVersion": str(since), "annotations": {
                                                          "k8s.io/initial-events-end": "true"}}}}
            try:
                for event in changes:
                    if isinstance(event, Event):
                        yield {"type": event.type, "object": shown(event.obj)}
                    elif bookmarks:
                        yield {"type": "BOOKMARK", "object": {"kind": resource.kind,
                                                              "apiVersion": resource.api_version,
                                                              "metadata": {"resourceVersion": str(event)}}}
            except ApiError as exc:
                yield {"type": "ERROR", "object": exc.status()}

        return Response(200, stream=stream())

    def _validate(self, resource: Resource, obj: Obj, old: Obj | None, subresource: str = "") -> None:
        is_pod = resource.kind == "Pod" and not resource.group
        name = (obj.get("metadata") or {}).get("name") or (obj.get("metadata") or {}).get("generateName", "")
        if is_pod and (undecodable := decode_errors(obj)):
            raise ApiError(400, "BadRequest", "; ".join(undecodable))
        if is_pod:
            errors = validate_pod_create(obj) if old is None else validate_pod_update(old, obj)
        elif (resource.group, resource.kind) == (priority.GROUP, "PriorityClass"):
            errors = validate_priority_class(obj) if old is None else validate_priority_class_update(obj, old)
        elif subresource == "status":
            errors = []  # the metadata is the stored one's
        else:
            errors = validate_object_meta(obj, resource.namespaced,
                                          dns_label_name=resource.kind == "Namespace")
            if lifecycle.is_namespace(resource) and (old is None or subresource == "finalize"):
                errors += validate_namespace_finalizers(obj, indexed=old is not None)
            if (resource.group, resource.kind) == ("batch", "Job"):
                errors += validate_job_policies(obj)
        if not resource.builtin and resource.schema is not None:
            # The object as it will be stored (the strategy's PrepareForUpdate): its status kept, or only its status
            # taken, per the status subresource.
            prepared = obj if old is None else Store.prepared(resource, old, copy.deepcopy(obj), subresource)
            errors += schema.validate(prepared, resource.schema)
            errors += schema_cel.validate(prepared, old, resource.schema, errors)
        if resource.kind == "Event" and resource.group in ("", events.EVENTS_GROUP):
            errors += events.validate(self._in(resource, obj), self._in(resource, old) if old else None,
                                      strict=bool(resource.group))
        if resource.group == "apiextensions.k8s.io" and resource.kind == "CustomResourceDefinition":
            errors += validate_crd(obj)
        if resource.group == "admissionregistration.k8s.io" and resource.kind.endswith("WebhookConfiguration"):
            errors += validate_webhook_configuration(obj)
        if errors:
            kind = f"{resource.kind}.{resource.group}" if resource.group else resource.kind  # qualified, as NewInvalid
            raise ApiError(422, "Invalid", invalid_message(kind, name, errors),
                           {"name": name, "group": resource.group, "kind": resource.kind,
                            "causes": causes(errors)})

    def _create(self, target: Target, obj: Obj, user: User, dry_run: bool) -> Response:
        resource = target.resource
        if not isinstance(obj, dict):
            raise ApiError(400, "BadRequest", "the body of the request is not a JSON object")
        meta = obj.setdefault("metadata", {})
        if resource.namespaced:
            body_ns = meta.get("namespace")
            if body_ns and body_ns != target.namespace:
                raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the "
                                                  "namespace sent on the request")
        obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
        if resource.namespaced:
            meta["namespace"] = target.namespace
        if not resource.builtin and ((self._defining_crd(resource) or {}).get("metadata") or {}).get(
                "deletionTimestamp"):
            raise ApiError(405, "MethodNotAllowed", "create not allowed while custom resource definition is "
                                                    "terminating")
        apply_defaults(resource.kind, resource.group, obj)
        admitted, warnings = self._admit(Request("CREATE", resource, "", target.namespace, meta.get("name", ""), obj,
                                                 None, user, dry_run))
        assert admitted is not None
        obj = admitted
        if dry_run:
            return Response(201, obj, warnings=warnings)
        created = self.store.create(self._stored(resource), self._in(resource, obj), target.namespace)
        if resource.kind == "CustomResourceDefinition":
            self._establish(created)
        return Response(201, self._out(resource, created), warnings=warnings)

    def _apply(self, target: Target, query: dict[str, str], body: bytes, user: User, dry_run: bool) -> Response:
        """Server-side apply (``cluster/patches.py`` ``server_side_apply``): the object created when it does not
        exist, else the apply configuration merged into it; ``fieldManager`` is required."""
        resource = target.resource
        manager = query.get("fieldManager", "")
        if not manager:
            raise ApiError(422, "Invalid", 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                                           "is required for apply patch")
        try:
            applied = yaml.safe_load(body.decode("utf-8"))
        except (UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ApiError(400, "BadRequest", f"error decoding YAML: {exc}") from None
        if not isinstance(applied, dict):
            raise ApiError(400, "BadRequest", "the body of the request is not a YAML object")
        if (applied.get("apiVersion"), applied.get("kind")) != (resource.api_version, resource.kind):
            raise ApiError(400, "BadRequest", f"the apply configuration is a {applied.get('apiVersion')} "
                                              f"{applied.get('kind')}, not a {resource.api_version} {resource.kind}")
        if (applied.get("metadata") or {}).get("name") != target.name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        try:
            self.store.get(self._stored(resource), target.namespace, target.name)
        except ApiError as exc:
            if exc.code != 404:
                raise
            return self._create(target, server_side_apply(None, applied, manager, resource.api_version, now()), user,
                                dry_run)
        return self._update(target, lambda current: server_side_apply(current, applied, manager,
                                                                      resource.api_version, now()),
                            user, dry_run, put=False)

    def _review(self, review: Any) -> Response:
        """SubjectAccessReview (``pkg/registry/authorization/subjectaccessreview``): validated, evaluated by the
        authorizers against the RBAC objects stored now, and returned with the spec and a status; never stored."""
        if not isinstance(review, dict):
            raise ApiError(400, "BadRequest", "the body of the request is not a JSON object")
        errors = review_errors(review)
        if errors:
            raise ApiError(422, "Invalid", invalid_message("SubjectAccessReview.authorization.k8s.io", "",
                                                           errors),
                           {"group": "authorization.k8s.io", "kind": "SubjectAccessReview",
                            "causes": causes(errors)})
        spec = review["spec"]
        return Response(201, {"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                              "metadata": {"creationTimestamp": None}, "spec": spec,
                              "status": review_status(stored_policy(self.store, self.registry), spec)})

    def _serve(self, crd: Obj) -> None:
        """Serve what the CRD says now: its served versions, each with its subresources and printer columns."""
        spec = crd.get("spec") or {}
        self.registry.replace_group_plural(spec.get("group", ""), (spec.get("names") or {}).get("plural", ""),
                                           from_crd(crd))

    def _establish(self, crd: Obj) -> None:
        self._serve(crd)
        crd["status"] = {"conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "lastTransitionTime": now()},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "lastTransitionTime": now()}], "acceptedNames": crd["spec"]["names"]}
        crds = self.registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        assert crds is not None
        self.store.update(crds, crd, None, subresource="status")

    def _update(self, target: Target, change: Callable[[Obj], Obj], user: User, dry_run: bool,
                put: bool) -> Response:
        resource = target.resource
        stored = self._stored(resource)
        for _ in range(10):  # PATCH retries on a concurrent write, as the apiserver's GuaranteedUpdate does
            current = self._out(resource, self.store.get(stored, target.namespace, target.name))
            new = change(current)
            if not isinstance(new, dict):
                raise ApiError(400, "BadRequest", "the body of the request is not a JSON object")
            meta = new.setdefault("metadata", {})
            if meta.get("name", target.name) != target.name:
                raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
            meta["name"] = target.name
            if resource.kind == "Namespace" and not resource.group:
                label_namespace_name(new)
            if (resource.group, resource.kind) == (priority.GROUP, "PriorityClass"):
                default_priority_class(new)
            # A resourceVersion the patch itself sets is a precondition (409 on mismatch, no retry).
            pinned = not put and meta.get("resourceVersion") not in (None, "", current["metadata"]["resourceVersion"])
            if not put and not pinned:
                meta["resourceVersion"] = current["metadata"]["resourceVersion"]
            admitted, warnings = self._admit(Request("UPDATE", resource, target.subresource, target.namespace,
                                                     target.name, new, current, user, dry_run))
            assert admitted is not None
            new = admitted
            if dry_run:
                return Response(200, new, warnings=warnings)
            try:
                updated = self.store.update(stored, self._in(resource, new), target.namespace, target.subresource)
            except ApiError as exc:
                if put or pinned or exc.code != 409:
                    raise
                continue
            if resource.kind == "CustomResourceDefinition" and resource.group == "apiextensions.k8s.io" \
                    and not target.subresource and not updated["metadata"].get("deletionTimestamp"):
                self._serve(updated)  # versions, subresources and printer columns as the CRD says now
            return Response(200, self._out(resource, updated), warnings=warnings)
        raise ApiError(409, "Conflict", "too many concurrent updates")

    def _delete(self, target: Target, options: Obj, user: User, dry_run: bool) -> Response:
        """DELETE (``cluster/deletion.py``): the object is returned while it still exists (marked), else a Status
        (the object itself for the kinds whose storage returns it)."""
        resource = target.resource
        current = self._out(resource, self.store.get(self._stored(resource), target.namespace, target.name))
        deleted, warnings, remains = self._delete_item(target, current, target.name, options, user, dry_run)
        if not remains and (resource.group or resource.kind not in ("Pod", "Namespace", "Service")):
            details = {"name": target.name, "group": resource.group, "kind": resource.plural,
                       "uid": deleted["metadata"].get("uid")}
            deleted = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                       "details": {k: v for k, v in details.items() if v}}  # omitempty
        return Response(200, deleted, warnings=warnings)

    def _delete_collection(self, target: Target, options: Obj, query: dict[str, str], user: User,
                           dry_run: bool) -> Response:
        """DELETE of a collection (``handlers/delete.go`` ``DeleteCollection``, the generic registry's
        ``DeleteCollection``): every object the label and field selectors select, each deleted as its DELETE would
        be but admitted as a DELETE that names no object (``AdmissionToValidateObjectDeleteFunc``: the webhooks see
        each as the oldObject); one gone meanwhile is skipped, any other failure is the answer. Returns the list as
        it was before."""
        resource = target.resource
        stored = self._stored(resource)
        listed, rv = self.store.list(stored, target.namespace, self._selectors(resource, query))
        warnings: list[str] = []
        for obj in listed:
            item = Target(resource, target.namespace, obj["metadata"]["name"])
            try:
                current = self._out(resource, self.store.get(stored, item.namespace, item.name))
                _, more, _ = self._delete_item(item, current, "", options, user, dry_run)
            except ApiError as exc:
                if exc.code != 404:
                    raise
                continue
            warnings += [w for w in more if w not in warnings]
        return Response(200, {"kind": f"{resource.kind}List", "apiVersion": resource.api_version,
                              "metadata": {"resourceVersion": str(rv)},
                              "items": [self._out(resource, obj) for obj in listed]}, warnings=warnings)

    def _delete_item(self, target: Target, current: Obj, admitted_name: str, options: Obj, user: User,
                     dry_run: bool) -> tuple[Obj, list[str], bool]:
        """One object's deletion once read: admission (of ``admitted_name``), preconditions, graceful deletion of
        pods, the garbage collector's finalizers. The object as deleted or marked, the warnings, and whether it
        remains (marked: a grace period or finalizers pending; or a dry run)."""
        resource = target.resource
        stored = self._stored(resource)
        if (resource.group, resource.plural) == (priority.GROUP, priority.PLURAL):
            priority.refuse_system_deletion(target.name)
        _, warnings = self._admit(Request("DELETE", resource, "", target.namespace, admitted_name, None, current,
                                          user, dry_run))
        warnings = warnings + deletion.warnings_for(resource, options)
        if dry_run:
            return current, warnings, True
        deleted = self._remove(target, current, options)
        is_crd = (resource.group, resource.kind) == ("apiextensions.k8s.io", "CustomResourceDefinition")
        if self.store.exists(stored, target.namespace, target.name, deleted["metadata"]["uid"]):
            if is_crd and not current["metadata"].get("deletionTimestamp"):
                deleted = self._terminating(deleted)
            return deleted, warnings, True
        if is_crd:
            self.registry.remove_group_plural(deleted["spec"]["group"], deleted["spec"]["names"]["plural"])
        return deleted, warnings, False

    def _remove(self, target: Target, current: Obj, options: Obj) -> Obj:
        """The storage's Delete after admission: preconditions, a pod's grace period (a pending graceful deletion is
        only ever shortened), the garbage collector's finalizers; the object as deleted or marked. A namespace's is
        the namespace registry's own."""
        resource = target.resource
        if lifecycle.is_namespace(resource):
            return self._remove_namespace(target, current, options)
        preconditions = options.get("preconditions") or {}
        grace = None
        if resource.kind == "Pod" and not resource.group:
            grace = options.get("gracePeriodSeconds") if current["metadata"].get("deletionTimestamp") \
                else deletion.pod_grace_seconds(current, options)
        finalizers = deletion.gc_finalizers(resource, options)
        if (resource.group, resource.kind) == ("apiextensions.k8s.io", "CustomResourceDefinition"):
            gc_finalizers = finalizers

            def finalizers(obj: Obj) -> list[str]:  # REST.Delete: the cleanup finalizer first of all
                wanted = gc_finalizers(obj)
                return wanted if CRD_CLEANUP_FINALIZER in wanted else [CRD_CLEANUP_FINALIZER, *wanted]

        return self._out(resource, self.store.delete(
            self._stored(resource), target.namespace, target.name, grace=grace, uid=preconditions.get("uid"),
            resource_version=preconditions.get("resourceVersion"), finalizers=finalizers))

    def _remove_namespace(self, target: Target, current: Obj, options: Obj) -> Obj:
        """The namespace registry's Delete (``cluster/lifecycle.py``), with the namespace's own uid as precondition
        unless the request has one: the first marks it Terminating; a later one deletes it once
        ``spec.finalizers`` is empty, and before that returns it unchanged."""
        preconditions = options.get("preconditions") or {}
        uid, resource_version = preconditions.get("uid") or current["metadata"]["uid"], preconditions.get(
            "resourceVersion")
        failure = precondition_failure(target.resource, target.name, current["metadata"], uid, resource_version)
        if failure:
            raise failure
        if not current["metadata"].get("deletionTimestamp"):
            return self.store.mark_deleted(target.resource, target.name, lifecycle.mark_terminating(options), uid=uid,
                                           resource_version=resource_version)
        if (current.get("spec") or {}).get("finalizers"):
            return current
        return self.store.delete(target.resource, None, target.name, uid=uid, resource_version=resource_version,
                                 finalizers=deletion.gc_finalizers(target.resource, options))

    def _terminating(self, crd: Obj) -> Obj:
        """The Terminating condition of a CRD whose deletion began (``InstanceDeletionPending``)."""
        status = dict(crd.get("status") or {})
        status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "Terminating"] + [
            {"type": "Terminating", "status": "True", "reason": "InstanceDeletionPending",
             "message": "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
             "lastTransitionTime": now()}]
        crds = self.registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        assert crds is not None
        return self.store.update(crds, {**crd, "status": status, "metadata": {**crd["metadata"],
                                                                             "resourceVersion": ""}},
                                 None, subresource="status")

    def _defining_crd(self, resource: Resource) -> Obj | None:
        crds = self.registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        assert crds is not None
        return next((c for c in self.store.items(crds) if (c.get("spec") or {}).get("group") == resource.group
                     and ((c.get("spec") or {}).get("names") or {}).get("plural") == resource.plural), None)

    def _evict(self, target: Target, body: Any, user: User, dry_run: bool) -> Response:
        """POST pods/{name}/eviction (``cluster/eviction.py``): admission of the Eviction, then a deletion the pod's
        disruption budget allows."""
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of the request is not a JSON object")
        meta = body.get("metadata") or {}
        if meta.get("namespace") and meta["namespace"] != target.namespace:
            raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the namespace sent "
                                              "on the request")
        if meta.get("name") != target.name:
            raise ApiError(400, "BadRequest", "name in URL does not match name in Eviction object")
        dry_run = dry_run or (body.get("deleteOptions") or {}).get("dryRun") == ["All"]
        admitted, warnings = self._admit(Request("CREATE", target.resource, "eviction", target.namespace,
                                                 target.name, body, None, user, dry_run))
        options = deletion.delete_options((admitted or body).get("deleteOptions") or {}, {})
        pinned = bool((options.get("preconditions") or {}).get("resourceVersion"))
        for attempt in range(eviction.RETRIES):  # only a conflict (and no resourceVersion of the caller's) retries
            pod = self.store.get(target.resource, target.namespace, target.name)
            if not eviction.can_ignore_pdb(pod):
                break
            try:
                self._disrupt(target, _with_preconditions(options, resourceVersion=pod["metadata"]["resourceVersion"])
                              if eviction.should_enforce_resource_version(pod) and not pinned else options, dry_run)
                return Response(201, dict(eviction.SUCCESS), warnings=warnings)
            except ApiError as exc:
                if exc.code != 409 or pinned or attempt == eviction.RETRIES - 1:
                    raise
        pdbs_resource = self.registry.get("policy", "v1", "poddisruptionbudgets")
        assert pdbs_resource is not None
        covering = eviction.budgets(pod, self.store.list(pdbs_resource, target.namespace)[0])
        if len(covering) > 1:
            return Response(500, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "message": eviction.MULTIPLE_BUDGETS, "code": 500}, warnings=warnings)
        unhealthy = bool(covering) and eviction.unhealthy_may_go(pod, covering[0])
        if covering and not unhealthy:
            self._use_budget(Target(pdbs_resource, target.namespace, covering[0]["metadata"]["name"], "status"),
                             target.name, dry_run)
        try:  # an unhealthy pod goes only if it is still what was judged
            self._disrupt(target, _with_preconditions(options, resourceVersion=pod["metadata"]["resourceVersion"])
                          if unhealthy else options, dry_run)
        except ApiError as exc:
            if exc.code == 409 and unhealthy and not pinned:
                raise eviction.still_processing(covering[0]["metadata"]["name"]) from None
            raise
        return Response(201, dict(eviction.SUCCESS), warnings=warnings)

    def _use_budget(self, target: Target, pod_name: str, dry_run: bool) -> None:
        """``checkAndDecrement`` against the budget as stored, again from the fresh one after a conflict; the status
        written as the eviction's loopback client (``UpdateStatus``)."""
        for attempt in range(eviction.RETRIES):
            pdb = self.store.get(target.resource, target.namespace, target.name)
            status = eviction.decremented(pdb, pod_name, dry_run)
            if dry_run:
                return
            try:
                self._update(target, _replaced_by({**pdb, "status": status}), LOOPBACK, dry_run=False, put=True)
                return
            except ApiError as exc:
                if exc.code != 409 or attempt == eviction.RETRIES - 1:
                    raise

    def _disrupt(self, target: Target, options: Obj, dry_run: bool) -> None:
        """``addConditionAndDeletePod``: the DisruptionTarget condition through the status storage (the deletion's
        preconditions checked first, a resourceVersion one moved to the updated pod), then the storage's Delete;
        neither is admitted."""
        if dry_run:
            return
        pod = self.store.get(target.resource, target.namespace, target.name)
        preconditions = options.get("preconditions") or {}
        for key, title in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            wanted = preconditions.get(key)
            if wanted and wanted != pod["metadata"].get(key):
                hint = "deleted and then recreated" if key == "uid" else "modified"
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on Pod "{target.name}": the {title} in '
                                                f"the precondition ({wanted}) does not match the {title} in record "
                                                f"({pod['metadata'].get(key)}). The object might have been {hint}",
                               {"name": target.name, "kind": "Pod"})
        updated = self.store.update(target.resource, eviction.with_disruption_target(pod), target.namespace,
                                    subresource="status")
        if preconditions.get("resourceVersion"):
            options = _with_preconditions(options, resourceVersion=updated["metadata"]["resourceVersion"])
        self._remove(target, updated, options)

    def _bind(self, target: Target, binding: Obj, user: User) -> Response:
        resource = target.resource
        node = ((binding or {}).get("target") or {}).get("name")
        if not node:
            raise ApiError(400, "BadRequest", "binding target node name is required")
        current = self.store.get(resource, target.namespace, target.name)
        refused = validate_binding(current)
        if refused is not None:
            status, message = refused
            raise ApiError(status, "Conflict" if status == 409 else "Invalid", message)
        _, warnings = self._admit(Request("CREATE", resource, "binding", target.namespace, target.name, binding,
                                          None, user, False))
        current["spec"]["nodeName"] = node
        conditions = [c for c in (current.get("status") or {}).get("conditions") or [] if c.get("type") !=
                      "PodScheduled"]
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": now()})
        current.setdefault("status", {})["conditions"] = conditions
        self.store.update(resource, current, target.namespace)
        self.store.update(resource, current | {"metadata": {**current["metadata"], "resourceVersion": ""}},
                          target.namespace, subresource="status")
        return Response(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                              "code": 201}, warnings=warnings)


def _replaced_by(obj: Obj) -> Callable[[Obj], Obj]:
    """An update's change that writes ``obj`` whatever is stored (a PUT; its resourceVersion is the precondition)."""
    return lambda _: obj


def _with_preconditions(options: Obj, **preconditions: str) -> Obj:
    return {**options, "preconditions": {**(options.get("preconditions") or {}), **preconditions}}


def _prepare_for_create(resource: Resource, obj: Obj) -> None:
    """The strategies' PrepareForCreate, after the mutating webhooks: a gated pod's PodScheduled=False condition
    (``applySchedulingGatedCondition``); a namespace Active with the ``kubernetes`` finalizer
    (``cluster/lifecycle.py``); a custom resource with a status subresource loses the status it was created with
    (``customResourceStrategy``: create cannot set status)."""
    if resource.kind == "Pod" and not resource.group:
        scheduling_gated_condition(obj)
    elif lifecycle.is_namespace(resource):
        lifecycle.prepare_for_create(obj)
    elif not resource.builtin and "status" in resource.subresources:
        obj.pop("status", None)


def _json(body: bytes) -> Any:
    try:
        return json.loads(body or b"null")
    except ValueError as exc:
        raise ApiError(400, "BadRequest", f"the body of the request is not valid JSON: {exc}") from None


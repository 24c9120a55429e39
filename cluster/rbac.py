"""RBAC as the apiserver's RBAC authorizer evaluates it (plugin/pkg/auth/authorizer/rbac).

A request (``cluster.audit.RequestInfo``) is allowed when some PolicyRule of some role bound to the user
allows it:

- resource requests: the verb, the API group, the resource — ``pods``, ``pods/status`` for a subresource,
  ``*`` for every resource and subresource, ``*/status`` for one subresource of every resource — and, when
  the rule lists ``resourceNames``, the request's name (so ``create`` and ``list`` without a name are
  never allowed by a rule with resourceNames);
- non-resource requests (``/version``, ``/apis``): the verb and ``nonResourceURLs``, exact or with a
  trailing ``*`` as a prefix;
- ``*`` is the wildcard for verbs, apiGroups, resources and nonResourceURLs.

Roles reach a user through bindings (``VisitRulesFor``): ClusterRoleBindings grant their ClusterRole
everywhere; a RoleBinding grants its Role, or the ClusterRole it names, only for requests in the binding's
namespace. Subjects are users, groups and service accounts (a ServiceAccount subject without a namespace
means the RoleBinding's own). ClusterRoles with an ``aggregationRule`` get the rules of the ClusterRoles
their selectors match, as the clusterrole-aggregation controller writes them.

SubjectAccessReviews (``POST /apis/authorization.k8s.io/v1/subjectaccessreviews``) ask the same evaluator about
any user and groups, whether or not RBAC is enforced for them: allowed for ``system:masters`` (the privileged-group
authorizer), else as RBAC decides, with its reason ("RBAC: allowed by ...", or the roles it could not find).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from cluster.audit import RequestInfo
from cluster.selectors import selector_from_dict
from cluster.store import ApiError

PolicyRule = dict[str, Any]
Obj = dict[str, Any]
ALL = "*"


# --- one rule --------------------------------------------------------------------------------------------------


def verb_matches(rule: PolicyRule, verb: str) -> bool:
    return any(v in (ALL, verb) for v in rule.get("verbs") or [])


def api_group_matches(rule: PolicyRule, group: str) -> bool:
    return any(g in (ALL, group) for g in rule.get("apiGroups") or [])


def resource_matches(rule: PolicyRule, combined: str, subresource: str) -> bool:
    """``combined`` is ``resource`` or ``resource/subresource``; ``*/subresource`` matches that subresource."""
    for resource in rule.get("resources") or []:
        if resource in (ALL, combined):
            return True
        if subresource and resource == f"*/{subresource}":
            return True
    return False


def resource_name_matches(rule: PolicyRule, name: str) -> bool:
    names = rule.get("resourceNames") or []
    return not names or name in names


def non_resource_url_matches(rule: PolicyRule, path: str) -> bool:
    for url in rule.get("nonResourceURLs") or []:
        if url in (ALL, path) or (url.endswith("*") and path.startswith(url.rstrip("*"))):
            return True
    return False


def rule_allows(rule: PolicyRule, request: RequestInfo) -> bool:
    if request.resource_request:
        combined = f"{request.resource}/{request.subresource}" if request.subresource else request.resource
        return (verb_matches(rule, request.verb) and api_group_matches(rule, request.api_group)
                and resource_matches(rule, combined, request.subresource)
                and resource_name_matches(rule, request.name))
    return verb_matches(rule, request.verb) and non_resource_url_matches(rule, request.path)


def allowed(rules: Iterable[PolicyRule], request: RequestInfo) -> bool:
    """Whether any of ``rules`` allows ``request``."""
    return any(rule_allows(rule, request) for rule in rules)


# --- roles and bindings ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grant:
    """Rules one binding gives: everywhere (``namespace`` None) or in one namespace only."""

    binding: str  # "ClusterRoleBinding/name" or "RoleBinding/ns/name"
    role: str  # "ClusterRole/name" or "Role/ns/name"
    namespace: str | None
    rules: tuple[PolicyRule, ...]
    source: str = ""  # as the RBAC authorizer describes it: 'ClusterRoleBinding "b" of ClusterRole "r" to User "u"'
    error: str = ""  # the role it refers to does not exist


def load_manifests(text: str) -> list[Obj]:
    """Objects from multi-document YAML (``kubectl kustomize`` output, or a file); ``List`` kinds expanded."""
    objects: list[Obj] = []
    for doc in yaml.safe_load_all(text):
        if not isinstance(doc, dict):
            continue
        if doc.get("kind", "").endswith("List") and isinstance(doc.get("items"), list):
            objects.extend(item for item in doc["items"] if isinstance(item, dict))
        else:
            objects.append(doc)
    return objects


def _rbac(obj: Obj, kind: str) -> bool:
    return obj.get("kind") == kind and str(obj.get("apiVersion", "")).startswith("rbac.authorization.k8s.io/")


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def applies_to(subject: Obj, user: str, groups: Iterable[str], namespace: str) -> bool:
    """``appliesToUser``: ``namespace`` is the RoleBinding's, "" for a ClusterRoleBinding."""
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return user == name
    if kind == "Group":
        return name in set(groups)
    if kind == "ServiceAccount":
        sa_namespace = subject.get("namespace") or namespace
        return bool(sa_namespace) and user == f"system:serviceaccount:{sa_namespace}:{name}"
    return False


def describe_subject(subject: Obj, namespace: str) -> str:
    """``describeSubject``: a ServiceAccount as "name/namespace", anything else by its name."""
    if subject.get("kind") == "ServiceAccount":
        return f'ServiceAccount "{subject.get("name")}/{subject.get("namespace") or namespace}"'
    return f'{subject.get("kind")} "{subject.get("name")}"'


class Policy:
    """The RBAC objects of a cluster (or of rendered manifests), evaluated like the RBAC authorizer."""

    def __init__(self, objects: Iterable[Obj]) -> None:
        objects = list(objects)
        self.cluster_roles = {_meta(o).get("name"): o for o in objects if _rbac(o, "ClusterRole")}
        self.roles = {(_meta(o).get("namespace") or "default", _meta(o).get("name")): o
                      for o in objects if _rbac(o, "Role")}
        self.cluster_role_bindings = [o for o in objects if _rbac(o, "ClusterRoleBinding")]
        self.role_bindings = [o for o in objects if _rbac(o, "RoleBinding")]

    def cluster_role_rules(self, name: str) -> tuple[PolicyRule, ...]:
        role = self.cluster_roles.get(name)
        if role is None:
            return ()
        aggregation = role.get("aggregationRule")
        if not aggregation:
            return tuple(role.get("rules") or [])
        rules: list[PolicyRule] = []
        selectors = [selector_from_dict(s) for s in aggregation.get("clusterRoleSelectors") or []]
        for other_name, other in sorted(self.cluster_roles.items()):
            labels = _meta(other).get("labels") or {}
            if other_name != name and any(s.matches(labels) for s in selectors):
                rules += [r for r in other.get("rules") or [] if r not in rules]
        return tuple(rules)

    def _role_rules(self, ref: Obj, namespace: str | None) -> tuple[str, tuple[PolicyRule, ...], str]:
        """The role a binding refers to, its rules, and ``GetRoleReferenceRules``' error when it is missing."""
        kind, name = ref.get("kind"), str(ref.get("name", ""))
        if kind == "ClusterRole":
            missing = name not in self.cluster_roles
            return (f"ClusterRole/{name}", self.cluster_role_rules(name),
                    f'clusterrole.rbac.authorization.k8s.io "{name}" not found' if missing else "")
        if kind == "Role" and namespace is not None:
            role = self.roles.get((namespace, name))
            return (f"Role/{namespace}/{name}", tuple((role or {}).get("rules") or []),
                    f'role.rbac.authorization.k8s.io "{name}" not found' if role is None else "")
        return f"{kind}/{name}", (), f'unsupported role reference kind: "{kind}"'

    def grants(self, user: str, groups: Iterable[str]) -> Iterator[Grant]:
        """Every binding that applies to the user, with the rules it grants and where."""
        groups = tuple(groups)
        for binding in self.cluster_role_bindings:
            name = _meta(binding).get("name")
            subject = next((s for s in binding.get("subjects") or [] if applies_to(s, user, groups, "")), None)
            if subject is not None:
                ref = binding.get("roleRef") or {}
                if ref.get("kind") != "ClusterRole":  # a ClusterRoleBinding can only reference a ClusterRole
                    continue
                role, rules, error = self._role_rules(ref, None)
                source = f'ClusterRoleBinding "{name}" of ClusterRole "{ref.get("name")}" to ' \
                         f'{describe_subject(subject, "")}'
                yield Grant(f"ClusterRoleBinding/{name}", role, None, rules, source, error)
        for binding in self.role_bindings:
            namespace, name = _meta(binding).get("namespace") or "default", _meta(binding).get("name")
            subject = next((s for s in binding.get("subjects") or [] if applies_to(s, user, groups, namespace)),
                           None)
            if subject is not None:
                ref = binding.get("roleRef") or {}
                role, rules, error = self._role_rules(ref, namespace)
                source = f'RoleBinding "{name}/{namespace}" of {ref.get("kind")} "{ref.get("name")}" to ' \
                         f"{describe_subject(subject, namespace)}"
                yield Grant(f"RoleBinding/{namespace}/{name}", role, namespace, rules, source, error)

    def rules_for(self, user: str, groups: Iterable[str], namespace: str = "") -> list[PolicyRule]:
        """``VisitRulesFor``: the rules that apply to a request by the user in ``namespace`` ("" cluster-wide)."""
        return [rule for grant in self.grants(user, groups) if grant.namespace in (None, namespace or None)
                for rule in grant.rules]

    def authorize(self, user: str, groups: Iterable[str], request: RequestInfo) -> bool:
        return allowed(self.rules_for(user, groups, request.namespace), request)

    def decide(self, user: str, groups: Iterable[str], request: RequestInfo) -> tuple[bool, str]:
        """``RBACAuthorizer.Authorize``: allowed and "RBAC: allowed by <binding>", or not allowed ("no opinion")
        with the reasons bindings could not be evaluated (a missing role), "" when there are none."""
        errors: list[str] = []
        for grant in self.grants(user, groups):
            if grant.namespace not in (None, request.namespace or None):
                continue
            if grant.error and grant.error not in errors:
                errors.append(grant.error)
            if allowed(grant.rules, request):
                return True, f"RBAC: allowed by {grant.source}"
        if not errors:
            return False, ""
        return False, "RBAC: " + (errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")


def service_account(namespace: str, name: str) -> tuple[str, tuple[str, ...]]:
    """The username and groups the apiserver authenticates a service account's token as."""
    return (f"system:serviceaccount:{namespace}:{name}",
            ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"))


# The default roles every authenticated user has (plugin/pkg/auth/authorizer/rbac/bootstrappolicy):
# discovery, version and health endpoints, and reviewing one's own access.
_DISCOVERY = ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz",
              "/version", "/version/"]
_PUBLIC_INFO = ["/healthz", "/livez", "/readyz", "/version", "/version/"]


def _cluster_role(name: str, rules: list[PolicyRule]) -> Obj:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
            "rules": rules}


def _cluster_role_binding(name: str, *groups: str) -> Obj:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g} for g in groups]}


BOOTSTRAP: tuple[Obj, ...] = (
    _cluster_role("system:discovery", [{"nonResourceURLs": _DISCOVERY, "verbs": ["get"]}]),
    _cluster_role("system:public-info-viewer", [{"nonResourceURLs": _PUBLIC_INFO, "verbs": ["get"]}]),
    _cluster_role("system:basic-user", [
        {"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
         "verbs": ["create"]},
        {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]}]),
    _cluster_role_binding("system:discovery", "system:authenticated"),
    _cluster_role_binding("system:public-info-viewer", "system:authenticated", "system:unauthenticated"),
    _cluster_role_binding("system:basic-user", "system:authenticated"),
)


# --- enforcement in the local cluster ---------------------------------------------------------------------------

_RBAC_PLURALS = ("clusterroles", "clusterrolebindings", "roles", "rolebindings")


def forbidden(user: str, request: RequestInfo) -> ApiError:
    """The authorization filter's 403 (``responsewriters.Forbidden`` with ``forbiddenMessage``)."""
    if not request.resource_request:
        return ApiError(403, "Forbidden", f'forbidden: User "{user}" cannot {request.verb} path "{request.path}"')
    resource = f"{request.resource}/{request.subresource}" if request.subresource else request.resource
    scope = (f'in the namespace "{request.namespace}"' if request.namespace else "at the cluster scope")
    detail = f'User "{user}" cannot {request.verb} resource "{resource}" in API group "{request.api_group}" {scope}'
    qualified = f"{request.resource}.{request.api_group}" if request.api_group else request.resource
    what = f'{qualified} "{request.name}"' if request.name else qualified
    return ApiError(403, "Forbidden", f"{what} is forbidden: {detail}",
                    {"name": request.name, "group": request.api_group, "kind": request.resource})


class StoreAuthorizer:
    """RBAC from the RBAC objects stored in the local cluster (plus the default discovery roles), for the
    given users only: the emulator's own components and the admin keep acting unchecked."""

    def __init__(self, store: Any, registry: Any, usernames: Iterable[str]) -> None:
        self.store, self.registry, self.usernames = store, registry, frozenset(usernames)

    def check(self, user: str, groups: Iterable[str], request: RequestInfo) -> ApiError | None:
        """None when allowed (or not checked); otherwise the 403 to answer."""
        if user not in self.usernames or stored_policy(self.store, self.registry).authorize(user, groups, request):
            return None
        return forbidden(user, request)


def stored_policy(store: Any, registry: Any) -> Policy:
    """The RBAC objects stored in the local cluster, plus the default discovery roles."""
    objects: list[Obj] = list(BOOTSTRAP)
    for plural in _RBAC_PLURALS:
        resource = registry.get("rbac.authorization.k8s.io", "v1", plural)
        if resource is not None:
            objects += store.list(resource, None)[0]
    return Policy(objects)


# --- SubjectAccessReview ------------------------------------------------------------------------------------------

PRIVILEGED_GROUP = "system:masters"  # the apiserver's privileged-group authorizer allows it everything


def _invalid(path: str, value: Any, message: str) -> str:
    return f"{path}: Invalid value: {json.dumps(value, separators=(',', ':'))}: {message}"


def review_errors(review: Obj) -> list[str]:
    """``ValidateSubjectAccessReview``: metadata empty, exactly one kind of attributes, a user or a group."""
    errors = []
    meta = {k: v for k, v in (review.get("metadata") or {}).items() if k != "managedFields" and v is not None}
    if meta:
        errors.append(_invalid("metadata", meta, "must be empty"))
    spec = review.get("spec")
    if not isinstance(spec, dict):
        spec = {}
    resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if resource is not None and non_resource is not None:
        errors.append(_invalid("spec.nonResourceAttributes", non_resource,
                               "cannot be specified in combination with resourceAttributes"))
    if resource is None and non_resource is None:
        errors.append(_invalid("spec.resourceAttributes", None,
                               "exactly one of nonResourceAttributes or resourceAttributes must be specified"))
    if not spec.get("user") and not spec.get("groups"):
        errors.append(_invalid("spec.user", spec.get("user") or "", "at least one of user or group must be specified"))
    return errors


def review_request(spec: Obj) -> RequestInfo:
    """``AuthorizationAttributesFrom``: the request a SubjectAccessReview asks about."""
    resource = spec.get("resourceAttributes")
    if resource is not None:
        return RequestInfo(str(resource.get("verb") or ""), True, str(resource.get("group") or ""),
                           str(resource.get("version") or "*"), str(resource.get("resource") or ""),
                           str(resource.get("subresource") or ""), str(resource.get("namespace") or ""),
                           str(resource.get("name") or ""))
    non_resource = spec.get("nonResourceAttributes") or {}
    return RequestInfo(str(non_resource.get("verb") or ""), False, path=str(non_resource.get("path") or ""))


def review_status(policy: Policy, spec: Obj) -> Obj:
    """The status the apiserver fills in: ``allowed`` always, ``reason`` when there is one. ``denied`` is only
    set by authorizers that deny explicitly; RBAC never does (no opinion), so it is always left out here."""
    user, groups = str(spec.get("user") or ""), tuple(spec.get("groups") or ())
    if PRIVILEGED_GROUP in groups:
        return {"allowed": True}
    is_allowed, reason = policy.decide(user, groups, review_request(spec))
    return {"allowed": is_allowed, **({"reason": reason} if reason else {})}

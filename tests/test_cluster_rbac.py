"""The emulator's request attributes and RBAC evaluation, against the documented Kubernetes semantics.

Sources: "Using RBAC Authorization" (kubernetes.io/docs/reference/access-authn-authz/rbac/) — referring to
resources and subresources, resourceNames, wildcards, non-resource URLs, RoleBindings to ClusterRoles,
service account subjects, aggregated ClusterRoles — and "Authorization" (.../authorization/) for how a
request's verb is derived from its HTTP method (GET on a collection is list, with ?watch=true watch, DELETE
on a collection deletecollection). Expectations are written from the docs, not from the implementation.
"""

from __future__ import annotations

import pytest

from cluster.audit import AuditLog, RequestInfo, request_info
from cluster.local import LocalCluster
from cluster.rbac import BOOTSTRAP, Policy, allowed, load_manifests, service_account

# --- request attributes ----------------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(("method", "path", "expected"), [
    ("GET", "/api/v1/namespaces/ns/pods/p", ("get", "", "pods", "", "ns", "p")),
    ("GET", "/api/v1/namespaces/ns/pods", ("list", "", "pods", "", "ns", "")),
    ("GET", "/api/v1/pods", ("list", "", "pods", "", "", "")),
    ("GET", "/api/v1/pods?watch=true&resourceVersion=10", ("watch", "", "pods", "", "", "")),
    ("GET", "/api/v1/pods?watch=1", ("watch", "", "pods", "", "", "")),
    ("GET", "/api/v1/pods?watch=false", ("list", "", "pods", "", "", "")),
    ("GET", "/api/v1/watch/namespaces/ns/pods", ("watch", "", "pods", "", "ns", "")),
    ("GET", "/api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name%3Dcm", ("list", "", "configmaps", "",
                                                                                  "ns", "cm")),
    ("POST", "/api/v1/namespaces/ns/pods", ("create", "", "pods", "", "ns", "")),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", ("update", "coordination.k8s.io", "leases", "",
                                                                     "ns", "l")),
    ("PATCH", "/api/v1/namespaces/ns/pods/p/status", ("patch", "", "pods", "status", "ns", "p")),
    ("POST", "/api/v1/namespaces/ns/pods/p/binding", ("create", "", "pods", "binding", "ns", "p")),
    ("DELETE", "/api/v1/namespaces/ns/pods/p", ("delete", "", "pods", "", "ns", "p")),
    ("DELETE", "/api/v1/namespaces/ns/pods", ("deletecollection", "", "pods", "", "ns", "")),
    ("GET", "/apis/batch/v1/namespaces/ns/jobs/j", ("get", "batch", "jobs", "", "ns", "j")),
    ("GET", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/m",
     ("get", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "", "m")),
    # a namespace is both the object and its own namespace; status and finalize are its subresources
    ("GET", "/api/v1/namespaces/ns", ("get", "", "namespaces", "", "ns", "ns")),
    ("PUT", "/api/v1/namespaces/ns/finalize", ("update", "", "namespaces", "finalize", "ns", "ns")),
    ("GET", "/api/v1/namespaces", ("list", "", "namespaces", "", "", "")),
])
def test_resource_request_attributes(method, path, expected):
    info = request_info(method, path)
    assert info.resource_request
    assert (info.verb, info.api_group, info.resource, info.subresource, info.namespace, info.name) == expected


@pytest.mark.unit
@pytest.mark.parametrize(("method", "path", "verb"), [
    ("GET", "/version", "get"), ("GET", "/apis", "get"), ("GET", "/api/v1", "get"),
    ("GET", "/apis/batch/v1", "get"), ("GET", "/openapi/v3/api/v1?hash=x", "get"), ("POST", "/healthz", "post"),
])
def test_non_resource_request_attributes(method, path, verb):
    info = request_info(method, path)
    assert not info.resource_request and info.verb == verb and info.path == path.split("?")[0]


@pytest.mark.unit
def test_the_audit_log_records_and_clears():
    log = AuditLog(limit=2)
    for name in ("a", "b", "c"):
        log.record("u", ("system:authenticated",), "GET", f"/api/v1/namespaces/ns/pods/{name}", 200)
    assert [r.request.name for r in log.snapshot()] == ["b", "c"] and log.dropped == 1
    assert log.counts("u")[("u", "get", "", "pods", "", "ns", "c")] == 1
    assert [r.request.name for r in log.clear()] == ["b", "c"] and len(log) == 0 and log.dropped == 0


@pytest.mark.e2e
def test_the_local_cluster_records_every_request_with_its_user(tmp_path):
    from kubernetes import client, config

    with LocalCluster(workdir=str(tmp_path)) as cluster:
        cluster.audit.clear()
        user, groups = service_account("team", "reader")
        api = config.new_client_from_config(cluster.add_user(user))
        client.CoreV1Api(api).list_namespaced_pod("default")
        with pytest.raises(client.ApiException):
            client.CoreV1Api(api).read_namespaced_pod("missing", "default")
        client.VersionApi(api).get_code()  # the client asks for /version/, with the slash
        records = cluster.audit.snapshot(user)
        assert [(r.request.verb, r.request.resource or r.request.path, r.request.name, r.status) for r in records] == [
            ("list", "pods", "", 200), ("get", "pods", "missing", 404), ("get", "/version/", "", 200)]
        assert set(records[0].groups) == set(groups)  # a service account's token authenticates with its groups


# --- one rule --------------------------------------------------------------------------------------------------


def resource(verb: str, group: str, res: str, name: str = "", namespace: str = "ns", sub: str = "") -> RequestInfo:
    return RequestInfo(verb, True, group, "v1", res, sub, namespace, name)


def url(path: str, verb: str = "get") -> RequestInfo:
    return RequestInfo(verb, False, path=path)


POD_READER = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch", "list"]}


@pytest.mark.unit
def test_verbs_groups_and_resources_must_all_match():
    assert allowed([POD_READER], resource("get", "", "pods", "p"))
    assert allowed([POD_READER], resource("list", "", "pods"))
    assert not allowed([POD_READER], resource("delete", "", "pods", "p"))
    assert not allowed([POD_READER], resource("get", "apps", "pods", "p")), "the core group is \"\""
    assert not allowed([POD_READER], resource("get", "", "secrets", "s"))
    assert not allowed([], resource("get", "", "pods", "p")), "RBAC denies by default"


@pytest.mark.unit
def test_a_subresource_needs_its_own_resource_entry():
    """'pods' does not grant 'pods/log' or 'pods/status'; "pods/log" does, and only that."""
    rule = {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get"]}
    assert allowed([rule], resource("get", "", "pods", "p", sub="log"))
    assert not allowed([rule], resource("get", "", "pods", "p", sub="status"))
    assert not allowed([{"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]}],
                       resource("patch", "", "pods", "p"))
    scale = {"apiGroups": ["*"], "resources": ["*/scale"], "verbs": ["update"]}
    assert allowed([scale], resource("update", "apps", "deployments", "d", sub="scale"))
    assert not allowed([scale], resource("update", "apps", "deployments", "d"))


@pytest.mark.unit
def test_resource_names_restrict_requests_that_name_an_object():
    rule = {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["my-configmap"],
            "verbs": ["update", "get", "list", "create"]}
    assert allowed([rule], resource("get", "", "configmaps", "my-configmap"))
    assert allowed([rule], resource("update", "", "configmaps", "my-configmap"))
    assert not allowed([rule], resource("get", "", "configmaps", "other"))
    # create has no name to check and a plain list names nothing: resourceNames cannot allow them
    assert not allowed([rule], resource("create", "", "configmaps"))
    assert not allowed([rule], resource("list", "", "configmaps"))
    # a list narrowed to one name by fieldSelector metadata.name is authorized by that name
    assert allowed([rule], request_info("GET", "/api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name"
                                               "%3Dmy-configmap"))


@pytest.mark.unit
def test_wildcards():
    everything = {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}
    assert allowed([everything], resource("deletecollection", "batch", "jobs"))
    assert allowed([everything], resource("patch", "", "pods", "p", sub="status")), "* covers subresources too"
    assert not allowed([everything], url("/healthz")), "resource rules never allow non-resource URLs"
    assert allowed([{"apiGroups": ["batch"], "resources": ["*"], "verbs": ["get"]}], resource("get", "batch", "jobs",
                                                                                                 "j"))


@pytest.mark.unit
def test_non_resource_urls():
    rule = {"nonResourceURLs": ["/healthz", "/healthz/*"], "verbs": ["get", "post"]}
    assert allowed([rule], url("/healthz")) and allowed([rule], url("/healthz/etcd"))
    assert allowed([rule], url("/healthz", "post"))
    assert not allowed([rule], url("/healthzz")), "only a trailing * is a prefix"
    assert not allowed([rule], url("/healthz", "put"))
    assert not allowed([rule], resource("get", "", "healthz", "x"))


# --- bindings ----------------------------------------------------------------------------------------------------

RBAC = "rbac.authorization.k8s.io/v1"


def role(kind: str, name: str, rules: list, namespace: str | None = None, labels: dict | None = None) -> dict:
    meta: dict = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = labels
    return {"apiVersion": RBAC, "kind": kind, "metadata": meta, "rules": rules}


def binding(kind: str, name: str, role_kind: str, role_name: str, subjects: list, namespace: str | None = None):
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": RBAC, "kind": kind, "metadata": meta, "subjects": subjects,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name}}


SECRET_READER = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
DAVE = ("dave", ("system:authenticated",))


@pytest.mark.unit
def test_a_role_binding_to_a_cluster_role_grants_it_in_its_namespace_only():
    policy = Policy([role("ClusterRole", "secret-reader", [SECRET_READER]),
                     binding("RoleBinding", "read-secrets", "ClusterRole", "secret-reader",
                             [{"kind": "User", "name": "dave", "apiGroup": "rbac.authorization.k8s.io"}],
                             namespace="development")])
    assert policy.authorize(*DAVE, resource("get", "", "secrets", "s", namespace="development"))
    assert not policy.authorize(*DAVE, resource("get", "", "secrets", "s", namespace="production"))
    assert not policy.authorize(*DAVE, resource("list", "", "secrets", namespace=""))
    assert not policy.authorize("eve", ("system:authenticated",),
                                resource("get", "", "secrets", "s", namespace="development"))


@pytest.mark.unit
def test_a_cluster_role_binding_grants_everywhere_and_roles_stay_in_their_namespace():
    policy = Policy([role("ClusterRole", "secret-reader", [SECRET_READER]),
                     binding("ClusterRoleBinding", "read-secrets-global", "ClusterRole", "secret-reader",
                             [{"kind": "Group", "name": "manager", "apiGroup": "rbac.authorization.k8s.io"}]),
                     role("Role", "pod-reader", [POD_READER], namespace="default"),
                     binding("RoleBinding", "read-pods", "Role", "pod-reader",
                             [{"kind": "User", "name": "jane"}], namespace="default")])
    manager = ("mia", ("manager", "system:authenticated"))
    assert policy.authorize(*manager, resource("get", "", "secrets", "s", namespace="any"))
    assert policy.authorize(*manager, resource("get", "", "secrets", "s", namespace=""))
    jane = ("jane", ("system:authenticated",))
    assert policy.authorize(*jane, resource("list", "", "pods", namespace="default"))
    assert not policy.authorize(*jane, resource("list", "", "pods", namespace="kube-system"))


@pytest.mark.unit
def test_service_account_subjects():
    """A ServiceAccount subject without a namespace is the RoleBinding's own namespace's; service accounts are
    also in the groups system:serviceaccounts and system:serviceaccounts:<namespace>."""
    policy = Policy([role("Role", "pod-reader", [POD_READER], namespace="apps"),
                     binding("RoleBinding", "sa", "Role", "pod-reader", [{"kind": "ServiceAccount", "name": "web"}],
                             namespace="apps"),
                     role("ClusterRole", "secret-reader", [SECRET_READER]),
                     binding("ClusterRoleBinding", "all-sas-in-ops", "ClusterRole", "secret-reader",
                             [{"kind": "Group", "name": "system:serviceaccounts:ops"}])])
    assert policy.authorize(*service_account("apps", "web"), resource("get", "", "pods", "p", namespace="apps"))
    assert not policy.authorize(*service_account("other", "web"), resource("get", "", "pods", "p", namespace="apps"))
    assert policy.authorize(*service_account("ops", "bot"), resource("get", "", "secrets", "s", namespace="x"))
    assert not policy.authorize(*service_account("apps", "web"), resource("get", "", "secrets", "s", namespace="x"))


@pytest.mark.unit
def test_aggregated_cluster_roles_collect_the_rules_of_the_roles_they_select():
    policy = Policy([{"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": "monitoring"},
                      "aggregationRule": {"clusterRoleSelectors": [
                          {"matchLabels": {"rbac.example.com/aggregate-to-monitoring": "true"}}]}, "rules": []},
                     role("ClusterRole", "monitoring-endpoints",
                          [{"apiGroups": [""], "resources": ["services", "endpoints", "pods"], "verbs": ["get"]}],
                          labels={"rbac.example.com/aggregate-to-monitoring": "true"}),
                     role("ClusterRole", "unrelated", [SECRET_READER]),
                     binding("ClusterRoleBinding", "mon", "ClusterRole", "monitoring", [{"kind": "User",
                                                                                         "name": "dave"}])])
    assert policy.authorize(*DAVE, resource("get", "", "endpoints", "e"))
    assert not policy.authorize(*DAVE, resource("get", "", "secrets", "s"))


@pytest.mark.unit
def test_every_authenticated_user_may_read_discovery_and_version():
    policy = Policy(BOOTSTRAP)
    user, groups = service_account("kubenexus-system", "kubenexus-webhook")
    for path in ("/version", "/api", "/apis", "/apis/batch/v1", "/openapi/v3/api/v1", "/healthz"):
        assert policy.authorize(user, groups, url(path)), path
    assert not policy.authorize(user, groups, url("/metrics"))
    assert not policy.authorize("anonymous", ("system:unauthenticated",), url("/apis"))
    assert policy.authorize("anonymous", ("system:unauthenticated",), url("/version"))


@pytest.mark.unit
def test_manifests_load_from_multi_document_yaml_and_lists():
    text = f"""
apiVersion: {RBAC}
kind: ClusterRole
metadata: {{name: a}}
rules: []
---
apiVersion: v1
kind: List
items:
- {{apiVersion: {RBAC}, kind: Role, metadata: {{name: b, namespace: x}}, rules: []}}
---
"""
    assert [o["metadata"]["name"] for o in load_manifests(text)] == ["a", "b"]


# --- enforcement in the local cluster ----------------------------------------------------------------------------


@pytest.mark.e2e
def test_the_local_cluster_can_enforce_rbac_for_chosen_users(tmp_path):
    """Denied with the apiserver's 403 until a Role and RoleBinding stored in the cluster allow the request;
    discovery stays open (system:discovery); users not chosen are not checked."""
    import json

    from kubernetes import client, config

    with LocalCluster(workdir=str(tmp_path)) as cluster:
        user, _ = service_account("team", "reader")
        reader = client.CoreV1Api(config.new_client_from_config(cluster.add_user(user)))
        other = client.CoreV1Api(config.new_client_from_config(cluster.add_user("someone-else")))
        cluster.enforce_rbac(user)
        with pytest.raises(client.ApiException) as denied:
            reader.read_namespaced_config_map("settings", "default")
        assert denied.value.status == 403
        assert json.loads(denied.value.body)["message"] == (
            f'configmaps "settings" is forbidden: User "{user}" cannot get resource "configmaps" in API group "" in '
            'the namespace "default"')
        with pytest.raises(client.ApiException) as denied:
            reader.list_node()
        assert json.loads(denied.value.body)["message"].endswith('cannot list resource "nodes" in API group "" at '
                                                                 "the cluster scope")
        client.VersionApi(reader.api_client).get_code()  # /version/: every authenticated user
        assert other.list_namespaced_config_map("default").items == []  # not enforced for this user

        admin = client.RbacAuthorizationV1Api(config.new_client_from_config(cluster.kubeconfig))
        admin.create_namespaced_role("default", role("Role", "cm-reader", [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}], namespace="default"))
        admin.create_namespaced_role_binding("default", binding(
            "RoleBinding", "cm-reader", "Role", "cm-reader", [{"kind": "ServiceAccount", "name": "reader",
                                                               "namespace": "team"}], namespace="default"))
        assert reader.list_namespaced_config_map("default").items == []
        with pytest.raises(client.ApiException) as denied:
            reader.list_namespaced_config_map("kube-system")
        assert denied.value.status == 403
        statuses = [r.status for r in cluster.audit.snapshot(user)]
        assert statuses.count(403) == 3 and 200 in statuses  # denials are recorded too

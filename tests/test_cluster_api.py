"""The local cluster's REST contract, driven through the official ``kubernetes`` Python client.

Every expectation is documented Kubernetes API behaviour (API concepts, API conventions, the pod
scheduling-readiness docs and the API reference), never what the emulator or our product happens to do:
a test here must pass unchanged against a real cluster of the same version.
"""

from __future__ import annotations

import base64
import datetime
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client import ApiException

from cluster.kubelet import Kubelet
from cluster.local import LocalCluster, NodeSpec
from cluster.scheduler import Scheduler
from tests.support.polling import wait_for

pytestmark = pytest.mark.e2e

NODES = [NodeSpec("node-a", cpu="4", memory="8Gi", labels=(("zone", "a"),)),
         NodeSpec("node-b", cpu="2", memory="4Gi", labels=(("zone", "b"),))]
GATE_A, GATE_B = "example.com/gate-a", "example.com/gate-b"
MERGE, STRATEGIC, JSON_PATCH = ("application/merge-patch+json", "application/strategic-merge-patch+json",
                                "application/json-patch+json")


# --- fixtures and helpers ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """No scheduler or kubelet: nothing but the test writes to the objects it creates."""
    with LocalCluster(nodes=NODES) as local:
        yield local


@pytest.fixture
def ns(core: client.CoreV1Api) -> str:
    """A fresh namespace per test, so tests sharing the cluster never see each other's objects."""
    name = unique("t")
    core.create_namespace({"metadata": {"name": name}})
    return name


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def pod_body(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}], **spec}}


def gated_pod(name: str, *gates: str, **spec: Any) -> dict[str, Any]:
    return pod_body(name, schedulingGates=[{"name": g} for g in gates], **spec)


def api_error(call: Callable[..., Any], *args: Any, **kwargs: Any) -> ApiException:
    with pytest.raises(ApiException) as info:
        call(*args, **kwargs)
    return info.value


def status_of(exc: ApiException) -> dict[str, Any]:
    """The metav1.Status body of a failed request."""
    body = json.loads(exc.body)
    assert body["kind"] == "Status" and body["status"] == "Failure", body
    return body


def expect_failure(code: int, reason: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    exc = api_error(call, *args, **kwargs)
    body = status_of(exc)
    assert (exc.status, body["code"], body["reason"]) == (code, code, reason), body
    return body


def rv(obj: Any) -> int:
    return int(obj.metadata.resource_version)


def gone(read: Callable[..., Any], *args: Any) -> bool:
    try:
        read(*args)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def pod_names(pods: Any) -> set[str]:
    return {p.metadata.name for p in pods.items}


# --- create / get / list / delete of the built-in kinds ---------------------------------------------------


def test_namespace_lifecycle(core: client.CoreV1Api) -> None:
    name = unique("lifecycle")
    created = core.create_namespace({"metadata": {"name": name, "labels": {"purpose": "test"}}})
    assert created.kind == "Namespace" and created.metadata.name == name
    assert core.read_namespace(name).metadata.uid == created.metadata.uid
    listed = core.list_namespace()
    assert {name, "default", "kube-system"} <= {n.metadata.name for n in listed.items}
    assert [n.metadata.name for n in core.list_namespace(label_selector="purpose=test").items] == [name]

    core.delete_namespace(name)
    wait_for(lambda: gone(core.read_namespace, name), what="namespace removal")  # Terminating first, then gone
    expect_failure(404, "NotFound", core.read_namespace, name)


def test_nodes_are_cluster_scoped(core: client.CoreV1Api) -> None:
    seeded = core.read_node("node-a")
    assert seeded.metadata.namespace is None
    assert seeded.status.capacity["cpu"] == "4" and seeded.metadata.labels["zone"] == "a"
    assert [n.metadata.name for n in core.list_node(label_selector="zone=b").items] == ["node-b"]

    name = unique("node")
    node = core.create_node({"metadata": {"name": name, "labels": {"zone": "c"}},
                             "status": {"capacity": {"cpu": "1", "memory": "1Gi", "pods": "10"}}})
    assert node.metadata.uid and node.metadata.namespace is None
    assert name in {n.metadata.name for n in core.list_node().items}
    core.delete_node(name)
    expect_failure(404, "NotFound", core.read_node, name)


def test_pod_configmap_and_secret_crud(core: client.CoreV1Api, ns: str) -> None:
    pod = core.create_namespaced_pod(ns, pod_body("web", {"app": "web"}))
    assert (pod.kind, pod.api_version, pod.metadata.namespace) == ("Pod", "v1", ns)
    assert core.read_namespaced_pod("web", ns).spec.containers[0].image == "registry.k8s.io/pause:3.9"

    cm = core.create_namespaced_config_map(ns, {"metadata": {"name": "settings"}, "data": {"mode": "fast"}})
    assert cm.data == {"mode": "fast"}
    secret_value = base64.b64encode(b"s3cr3t").decode()
    core.create_namespaced_secret(ns, {"metadata": {"name": "creds"}, "type": "Opaque",
                                       "data": {"password": secret_value}})
    assert core.read_namespaced_secret("creds", ns).data == {"password": secret_value}

    assert pod_names(core.list_namespaced_pod(ns)) == {"web"}
    assert [c.metadata.name for c in core.list_namespaced_config_map(ns).items] == ["settings"]
    assert [s.metadata.name for s in core.list_namespaced_secret(ns).items] == ["creds"]
    assert ns in {p.metadata.namespace for p in core.list_pod_for_all_namespaces().items}

    core.delete_namespaced_pod("web", ns)  # unbound: nothing has to stop it, so it goes at once
    core.delete_namespaced_config_map("settings", ns)
    core.delete_namespaced_secret("creds", ns)
    expect_failure(404, "NotFound", core.read_namespaced_pod, "web", ns)
    expect_failure(404, "NotFound", core.read_namespaced_config_map, "settings", ns)
    expect_failure(404, "NotFound", core.read_namespaced_secret, "creds", ns)


def test_delete_answers_with_a_status_or_the_deleted_pod(core: client.CoreV1Api, ns: str) -> None:
    """A ConfigMap delete answers with a Success Status naming the object; a Pod delete with the Pod itself
    (the pod registry's ReturnDeletedObject). This client decodes the former as a plain dict."""
    cm = core.create_namespaced_config_map(ns, {"metadata": {"name": "short-lived"}})
    result = core.delete_namespaced_config_map("short-lived", ns)
    assert (result["kind"], result["status"]) == ("Status", "Success"), result
    assert result["details"] == {"name": "short-lived", "kind": "configmaps", "uid": cm.metadata.uid}  # omitempty

    pod = core.create_namespaced_pod(ns, pod_body("short-lived"))
    deleted = core.delete_namespaced_pod("short-lived", ns)
    assert isinstance(deleted, client.V1Pod) and deleted.metadata.uid == pod.metadata.uid


def test_leases_jobs_and_statefulsets(api: client.ApiClient, ns: str) -> None:
    leases, batch, apps = client.CoordinationV1Api(api), client.BatchV1Api(api), client.AppsV1Api(api)
    lease = leases.create_namespaced_lease(ns, {"metadata": {"name": "leader"},
                                                "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}})
    assert (lease.api_version, lease.kind, lease.spec.holder_identity) == ("coordination.k8s.io/v1", "Lease", "a")

    template = {"metadata": {"labels": {"app": "x"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}
    job = batch.create_namespaced_job(ns, {"metadata": {"name": "once"}, "spec": {"template": template}})
    assert (job.api_version, job.kind) == ("batch/v1", "Job")

    sts_template = {**template, "spec": {**template["spec"], "restartPolicy": "Always"}}
    sts = apps.create_namespaced_stateful_set(ns, {"metadata": {"name": "db"}, "spec": {
        "serviceName": "db", "replicas": 1, "selector": {"matchLabels": {"app": "x"}}, "template": sts_template}})
    assert (sts.api_version, sts.kind, sts.spec.replicas) == ("apps/v1", "StatefulSet", 1)

    assert [x.metadata.name for x in leases.list_namespaced_lease(ns).items] == ["leader"]
    assert [x.metadata.name for x in batch.list_namespaced_job(ns).items] == ["once"]
    assert [x.metadata.name for x in apps.list_namespaced_stateful_set(ns).items] == ["db"]
    assert ns in {x.metadata.namespace for x in apps.list_stateful_set_for_all_namespaces().items}

    leases.delete_namespaced_lease("leader", ns)
    batch.delete_namespaced_job("once", ns, propagation_policy="Background")  # kubectl's default
    apps.delete_namespaced_stateful_set("db", ns)
    expect_failure(404, "NotFound", leases.read_namespaced_lease, "leader", ns)
    expect_failure(404, "NotFound", batch.read_namespaced_job, "once", ns)
    expect_failure(404, "NotFound", apps.read_namespaced_stateful_set, "db", ns)


def test_core_events(core: client.CoreV1Api, ns: str) -> None:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for name, obj in (("a.1", "a"), ("b.1", "b")):
        core.create_namespaced_event(ns, {
            "metadata": {"name": name}, "reason": "Tested", "message": f"about {obj}", "type": "Normal",
            "involvedObject": {"kind": "Pod", "namespace": ns, "name": obj, "apiVersion": "v1"},
            "source": {"component": "pytest"}, "firstTimestamp": now, "lastTimestamp": now, "count": 1})
    events = core.list_namespaced_event(ns, field_selector="involvedObject.name=b")
    assert [(e.metadata.name, e.message, e.reason) for e in events.items] == [("b.1", "about b", "Tested")]
    core.delete_namespaced_event("a.1", ns)
    assert [e.metadata.name for e in core.list_namespaced_event(ns).items] == ["b.1"]


def test_events_k8s_io_events(api: client.ApiClient, ns: str) -> None:
    events = client.EventsV1Api(api)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    created = events.create_namespaced_event(ns, {
        "metadata": {"name": "e1"}, "eventTime": now, "reportingController": "example.com/pytest",
        "reportingInstance": "pytest-1", "action": "Testing", "reason": "Tested", "type": "Normal",
        "regarding": {"kind": "Pod", "namespace": ns, "name": "p", "apiVersion": "v1"}, "note": "hello"})
    assert (created.api_version, created.kind, created.note) == ("events.k8s.io/v1", "Event", "hello")
    assert [e.metadata.name for e in events.list_namespaced_event(ns).items] == ["e1"]
    assert events.read_namespaced_event("e1", ns).regarding.name == "p"
    events.delete_namespaced_event("e1", ns)
    expect_failure(404, "NotFound", events.read_namespaced_event, "e1", ns)


# --- server-set metadata ----------------------------------------------------------------------------------


def test_server_sets_uid_resource_version_and_creation_timestamp(core: client.CoreV1Api, ns: str) -> None:
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    first = core.create_namespaced_config_map(ns, {"metadata": {"name": "one", "uid": "client-chosen"}})
    second = core.create_namespaced_config_map(ns, {"metadata": {"name": "two"}})
    after = datetime.datetime.now(datetime.UTC)

    assert first.metadata.uid != "client-chosen"
    uuid.UUID(first.metadata.uid)
    assert first.metadata.uid != second.metadata.uid
    assert before <= first.metadata.creation_timestamp <= after
    assert rv(second) > rv(first)

    updated = core.patch_namespaced_config_map("one", ns, {"data": {"k": "v"}}, _content_type=MERGE)
    assert rv(updated) > rv(second)
    assert updated.metadata.uid == first.metadata.uid
    assert updated.metadata.creation_timestamp == first.metadata.creation_timestamp
    core.delete_namespaced_config_map("two", ns)
    third = core.create_namespaced_config_map(ns, {"metadata": {"name": "two"}})
    assert rv(third) > rv(updated) and third.metadata.uid != second.metadata.uid


def test_generate_name(core: client.CoreV1Api, ns: str) -> None:
    names = {core.create_namespaced_config_map(ns, {"metadata": {"generateName": "job-worker-"}}).metadata.name
             for _ in range(5)}
    assert len(names) == 5
    for name in names:
        assert name.startswith("job-worker-") and len(name) == len("job-worker-") + 5, name
    expect_failure(422, "Invalid", core.create_namespaced_config_map, ns, {"metadata": {}})


def test_generation_bumps_on_spec_change_only(api: client.ApiClient, ns: str) -> None:
    apps = client.AppsV1Api(api)
    template = {"metadata": {"labels": {"app": "g"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    sts = apps.create_namespaced_stateful_set(ns, {"metadata": {"name": "gen"}, "spec": {
        "serviceName": "gen", "replicas": 1, "selector": {"matchLabels": {"app": "g"}}, "template": template}})
    assert sts.metadata.generation == 1

    scaled = apps.patch_namespaced_stateful_set("gen", ns, {"spec": {"replicas": 3}}, _content_type=MERGE)
    assert scaled.metadata.generation == 2

    labelled = apps.patch_namespaced_stateful_set("gen", ns, {"metadata": {"labels": {"tier": "db"},
                                                                          "annotations": {"note": "x"}}},
                                                  _content_type=MERGE)
    assert labelled.metadata.generation == 2
    assert rv(labelled) > rv(scaled)

    status = apps.patch_namespaced_stateful_set_status("gen", ns, {"status": {"replicas": 3, "observedGeneration": 2}},
                                                       _content_type=MERGE)
    assert status.metadata.generation == 2 and status.status.replicas == 3

    current = apps.read_namespaced_stateful_set("gen", ns)
    current.spec.template.spec.containers[0].image = "busybox:2"
    assert apps.replace_namespaced_stateful_set("gen", ns, current).metadata.generation == 3


# --- finalizers and graceful removal ----------------------------------------------------------------------


def test_finalizers_hold_deletion_until_removed(core: client.CoreV1Api, ns: str) -> None:
    created = core.create_namespaced_config_map(ns, {"metadata": {"name": "held", "finalizers": ["example.com/hold"]},
                                                     "data": {"k": "v"}})
    core.delete_namespaced_config_map("held", ns)

    pending = core.read_namespaced_config_map("held", ns)
    assert pending.metadata.deletion_timestamp is not None
    assert pending.metadata.finalizers == ["example.com/hold"]
    assert rv(pending) > rv(created)
    assert pending.metadata.uid == created.metadata.uid

    # A second delete changes nothing; an update that keeps the finalizer keeps the object.
    core.delete_namespaced_config_map("held", ns)
    kept = core.patch_namespaced_config_map("held", ns, {"data": {"k": "w"}}, _content_type=MERGE)
    assert kept.metadata.deletion_timestamp == pending.metadata.deletion_timestamp

    core.patch_namespaced_config_map("held", ns, {"metadata": {"finalizers": None}}, _content_type=MERGE)
    expect_failure(404, "NotFound", core.read_namespaced_config_map, "held", ns)
    assert core.list_namespaced_config_map(ns, field_selector="metadata.name=held").items == []


def test_deleting_with_a_finalizer_is_seen_by_watchers(core: client.CoreV1Api, ns: str) -> None:
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespaced_config_map(ns, {"metadata": {"name": "w", "finalizers": ["example.com/hold"]}})
    core.delete_namespaced_config_map("w", ns)
    core.patch_namespaced_config_map("w", ns, {"metadata": {"finalizers": []}}, _content_type=MERGE)

    seen = []
    stream = watch.Watch()
    for event in stream.stream(core.list_namespaced_config_map, ns, resource_version=start, timeout_seconds=5):
        meta = event["object"].metadata
        seen.append((event["type"], meta.deletion_timestamp is not None))
        if event["type"] == "DELETED":
            stream.stop()
    assert seen == [("ADDED", False), ("MODIFIED", True), ("DELETED", True)]


# --- selectors and list metadata --------------------------------------------------------------------------


@pytest.fixture
def labelled_pods(core: client.CoreV1Api, ns: str) -> str:
    for name, labels in (("prod-web", {"env": "prod", "tier": "web"}),
                         ("staging-web", {"env": "staging", "tier": "web"}),
                         ("dev-db", {"env": "dev", "tier": "db"}), ("bare", {})):
        core.create_namespaced_pod(ns, pod_body(name, labels))
    return ns


@pytest.mark.parametrize(("selector", "expected"), [
    ("env=prod", {"prod-web"}),
    ("env==prod", {"prod-web"}),
    ("env!=prod", {"staging-web", "dev-db", "bare"}),
    ("env in (prod,staging)", {"prod-web", "staging-web"}),
    ("env notin (prod,staging)", {"dev-db", "bare"}),
    ("tier", {"prod-web", "staging-web", "dev-db"}),
    ("!tier", {"bare"}),
    ("tier=web,env!=staging", {"prod-web"}),
    ("env in (dev),tier", {"dev-db"}),
    ("", {"prod-web", "staging-web", "dev-db", "bare"}),
])
def test_label_selectors(core: client.CoreV1Api, labelled_pods: str, selector: str, expected: set[str]) -> None:
    assert pod_names(core.list_namespaced_pod(labelled_pods, label_selector=selector)) == expected


def test_malformed_label_selector_is_a_bad_request(core: client.CoreV1Api, ns: str) -> None:
    expect_failure(400, "BadRequest", core.list_namespaced_pod, ns, label_selector="env in prod")


def test_field_selectors(core: client.CoreV1Api, ns: str) -> None:
    other = unique("other")
    core.create_namespace({"metadata": {"name": other}})
    core.create_namespaced_pod(ns, pod_body("on-a", nodeName="node-a"))
    core.create_namespaced_pod(ns, pod_body("on-b", nodeName="node-b"))
    core.create_namespaced_pod(ns, pod_body("unbound"))
    core.create_namespaced_pod(other, pod_body("on-a"))
    core.patch_namespaced_pod_status("on-a", ns, {"status": {"phase": "Running"}}, _content_type=MERGE)

    everywhere = core.list_pod_for_all_namespaces
    assert pod_names(core.list_namespaced_pod(ns, field_selector="metadata.name=on-b")) == {"on-b"}
    assert {(p.metadata.namespace, p.metadata.name) for p in everywhere(field_selector="metadata.name=on-a").items} \
        == {(ns, "on-a"), (other, "on-a")}
    assert pod_names(everywhere(field_selector=f"metadata.namespace={other}")) == {"on-a"}
    assert pod_names(core.list_namespaced_pod(ns, field_selector="spec.nodeName=node-b")) == {"on-b"}
    assert pod_names(core.list_namespaced_pod(ns, field_selector="spec.nodeName=")) == {"unbound"}
    assert pod_names(core.list_namespaced_pod(ns, field_selector="status.phase=Running")) == {"on-a"}
    assert pod_names(core.list_namespaced_pod(ns, field_selector="status.phase!=Running")) == {"on-b", "unbound"}
    assert pod_names(core.list_namespaced_pod(ns, field_selector="spec.nodeName=node-a,status.phase=Running")) \
        == {"on-a"}
    body = expect_failure(400, "BadRequest", core.list_namespaced_pod, ns, field_selector="spec.restartPolicy=Never")
    assert "field label not supported" in body["message"]


def test_list_resource_version(core: client.CoreV1Api, ns: str) -> None:
    for i in range(3):
        core.create_namespaced_config_map(ns, {"metadata": {"name": f"cm-{i}"}})
    listed = core.list_namespaced_config_map(ns)
    newest = max(rv(item) for item in listed.items)
    assert rv(listed) >= newest
    core.patch_namespaced_config_map("cm-0", ns, {"data": {"x": "y"}}, _content_type=MERGE)
    assert rv(core.list_namespaced_config_map(ns)) > rv(listed)


# --- writes: conflicts, patches, errors -------------------------------------------------------------------


def test_update_with_a_stale_resource_version_conflicts(core: client.CoreV1Api, ns: str) -> None:
    original = core.create_namespaced_config_map(ns, {"metadata": {"name": "occ"}, "data": {"v": "1"}})
    fresh = core.read_namespaced_config_map("occ", ns)
    fresh.data = {"v": "2"}
    updated = core.replace_namespaced_config_map("occ", ns, fresh)
    assert updated.data == {"v": "2"} and rv(updated) > rv(original)

    original.data = {"v": "3"}  # still carries the first resourceVersion
    body = expect_failure(409, "Conflict", core.replace_namespaced_config_map, "occ", ns, original)
    assert "the object has been modified" in body["message"]
    assert core.read_namespaced_config_map("occ", ns).data == {"v": "2"}


def test_patch_with_a_stale_resource_version_conflicts(core: client.CoreV1Api, ns: str) -> None:
    """A resourceVersion inside a patch body is a precondition (API concepts: patch operations)."""
    original = core.create_namespaced_config_map(ns, {"metadata": {"name": "occ"}, "data": {"v": "1"}})
    core.patch_namespaced_config_map("occ", ns, {"data": {"v": "2"}}, _content_type=MERGE)
    stale = {"metadata": {"resourceVersion": original.metadata.resource_version}, "data": {"v": "3"}}
    expect_failure(409, "Conflict", core.patch_namespaced_config_map, "occ", ns, stale, _content_type=MERGE)
    assert core.read_namespaced_config_map("occ", ns).data == {"v": "2"}


def test_delete_preconditions(core: client.CoreV1Api, ns: str) -> None:
    original = core.create_namespaced_config_map(ns, {"metadata": {"name": "pre"}})
    current = core.patch_namespaced_config_map("pre", ns, {"data": {"k": "v"}}, _content_type=MERGE)
    stale_rv = {"preconditions": {"resourceVersion": original.metadata.resource_version}}
    body = expect_failure(409, "Conflict", core.delete_namespaced_config_map, "pre", ns, body=stale_rv)
    assert "Precondition failed" in body["message"]
    wrong_uid = {"preconditions": {"uid": str(uuid.uuid4())}}
    expect_failure(409, "Conflict", core.delete_namespaced_config_map, "pre", ns, body=wrong_uid)
    assert core.read_namespaced_config_map("pre", ns).metadata.uid == original.metadata.uid

    core.delete_namespaced_config_map("pre", ns, body={"preconditions": {
        "uid": original.metadata.uid, "resourceVersion": current.metadata.resource_version}})
    expect_failure(404, "NotFound", core.read_namespaced_config_map, "pre", ns)


def test_delete_precondition_failures_are_the_apiserver_conflicts(core: client.CoreV1Api, ns: str) -> None:
    """storage.Preconditions.Check, turned into NewConflict on the resource: the message names both values."""
    pod = core.create_namespaced_pod(ns, pod_body("guarded"))
    wrong = str(uuid.uuid4())
    body = expect_failure(409, "Conflict", core.delete_namespaced_pod, "guarded", ns,
                          body={"preconditions": {"uid": wrong}})
    assert body["message"] == (f'Operation cannot be fulfilled on pods "guarded": Precondition failed: '
                               f"UID in precondition: {wrong}, UID in object meta: {pod.metadata.uid}")
    assert body["details"] == {"name": "guarded", "kind": "pods"}
    body = expect_failure(409, "Conflict", core.delete_namespaced_pod, "guarded", ns,
                          body={"preconditions": {"uid": pod.metadata.uid, "resourceVersion": "1"}})
    assert body["message"] == (f'Operation cannot be fulfilled on pods "guarded": Precondition failed: '
                               f"ResourceVersion in precondition: 1, ResourceVersion in object meta: "
                               f"{pod.metadata.resource_version}")
    core.delete_namespaced_pod("guarded", ns, body={"preconditions": {
        "uid": pod.metadata.uid, "resourceVersion": pod.metadata.resource_version}})
    assert gone(core.read_namespaced_pod, "guarded", ns)
    # a pod of the same name created since: the old uid no longer matches
    again = core.create_namespaced_pod(ns, pod_body("guarded"))
    expect_failure(409, "Conflict", core.delete_namespaced_pod, "guarded", ns,
                   body={"preconditions": {"uid": pod.metadata.uid}})
    assert core.read_namespaced_pod("guarded", ns).metadata.uid == again.metadata.uid


def test_delete_options_are_validated(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "kept"}})
    body = expect_failure(422, "Invalid", core.delete_namespaced_config_map, "kept", ns,
                          body={"propagationPolicy": "Sideways"})
    assert body["message"] == ('DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: '
                               '"Sideways": supported values: "Foreground", "Background", "Orphan", "nil"')
    body = expect_failure(422, "Invalid", core.delete_namespaced_config_map, "kept", ns,
                          body={"propagationPolicy": "Orphan", "orphanDependents": True})
    assert "orphanDependents and deletionPropagation cannot be both set" in body["message"]
    assert core.read_namespaced_config_map("kept", ns).metadata.deletion_timestamp is None


def bound_pod(core: client.CoreV1Api, ns: str, name: str, **spec: Any) -> Any:
    """A pod bound to node-a through a Binding; no kubelet runs in this cluster to start or stop it."""
    core.create_namespaced_pod(ns, pod_body(name, **spec))
    bind(core, ns, name, "node-a")
    return core.read_namespaced_pod(name, ns)


def stamp(text: Any) -> datetime.datetime:
    return text if isinstance(text, datetime.datetime) else datetime.datetime.fromisoformat(text)


def test_graceful_deletion_of_a_bound_pod(core: client.CoreV1Api, ns: str) -> None:
    """podStrategy.CheckGracefulDelete: a bound pod is marked, deletionTimestamp = now + its grace period (the
    request's, else terminationGracePeriodSeconds), and stays until its kubelet confirms; a later DELETE may only
    shorten the period, 0 removes it."""
    bound_pod(core, ns, "slow", terminationGracePeriodSeconds=45)
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    marked = core.delete_namespaced_pod("slow", ns)
    assert marked.metadata.deletion_grace_period_seconds == 45
    deadline = stamp(marked.metadata.deletion_timestamp)
    assert before + datetime.timedelta(seconds=44) <= deadline <= before + datetime.timedelta(seconds=47)
    again = core.delete_namespaced_pod("slow", ns, grace_period_seconds=60)  # longer: nothing changes
    assert again.metadata.resource_version == marked.metadata.resource_version
    shorter = core.delete_namespaced_pod("slow", ns, grace_period_seconds=5)
    assert shorter.metadata.deletion_grace_period_seconds == 5
    assert stamp(shorter.metadata.deletion_timestamp) == deadline - datetime.timedelta(seconds=40)
    core.delete_namespaced_pod("slow", ns, grace_period_seconds=0)
    assert gone(core.read_namespaced_pod, "slow", ns)


def test_unbound_or_finished_pods_are_deleted_at_once(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, pod_body("pending"))
    core.delete_namespaced_pod("pending", ns)
    assert gone(core.read_namespaced_pod, "pending", ns)
    bound_pod(core, ns, "done")
    core.patch_namespaced_pod_status("done", ns, {"status": {"phase": "Succeeded"}})
    core.delete_namespaced_pod("done", ns)
    assert gone(core.read_namespaced_pod, "done", ns)


def test_finalizers_hold_a_pod_deleted_with_grace_zero(core: client.CoreV1Api, ns: str) -> None:
    """The kubelet's confirming DELETE (grace 0, uid precondition) removes a pod only once its finalizers are
    gone (the Job controller's tracking finalizer, for instance)."""
    pod = bound_pod(core, ns, "held")
    core.patch_namespaced_pod("held", ns, {"metadata": {"finalizers": ["example.com/hold"]}})
    core.delete_namespaced_pod("held", ns)
    # with a body, the apiserver reads the options from it alone (query parameters are ignored)
    confirmed = core.delete_namespaced_pod("held", ns, body={"gracePeriodSeconds": 0,
                                                             "preconditions": {"uid": pod.metadata.uid}})
    assert confirmed.metadata.deletion_grace_period_seconds == 0
    assert confirmed.metadata.finalizers == ["example.com/hold"]
    core.patch_namespaced_pod("held", ns, {"metadata": {"finalizers": None}})
    assert gone(core.read_namespaced_pod, "held", ns)


def test_a_batch_v1_job_deleted_without_a_policy_orphans_its_pods(api: client.ApiClient, ns: str) -> None:
    """The Job strategy's DefaultGarbageCollectionPolicy for batch/v1 is OrphanDependents: the Job is marked with
    the ``orphan`` finalizer (which the garbage collector then removes, and the Job goes), and the response
    carries the Job storage's warning. Background (kubectl's default) marks nothing and warns of nothing."""
    batch = client.BatchV1Api(api)
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}
    created = batch.create_namespaced_job(ns, {"metadata": {"name": "kept"}, "spec": {"template": template}})
    _, status, headers = batch.delete_namespaced_job_with_http_info("kept", ns)
    assert status == 200 and "child pods are preserved by default when jobs are deleted" in headers["Warning"]
    marked = [e["object"] for e in watch.Watch().stream(
        batch.list_namespaced_job, ns, resource_version=created.metadata.resource_version, timeout_seconds=2,
        _request_timeout=10) if e["type"] == "MODIFIED"]
    assert marked and marked[0].metadata.finalizers == ["orphan"] and marked[0].metadata.deletion_timestamp
    batch.create_namespaced_job(ns, {"metadata": {"name": "cascaded"}, "spec": {"template": template}})
    _, _, headers = batch.delete_namespaced_job_with_http_info("cascaded", ns, propagation_policy="Background")
    assert "Warning" not in headers
    assert gone(batch.read_namespaced_job, "cascaded", ns)


def test_json_patch(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "jp"}, "data": {"a": "1", "b": "2"}})
    patched = core.patch_namespaced_config_map("jp", ns, [
        {"op": "test", "path": "/data/a", "value": "1"},
        {"op": "replace", "path": "/data/a", "value": "10"},
        {"op": "remove", "path": "/data/b"},
        {"op": "add", "path": "/metadata/labels", "value": {"patched": "yes"}}], _content_type=JSON_PATCH)
    assert patched.data == {"a": "10"} and patched.metadata.labels == {"patched": "yes"}

    before = rv(patched)
    expect_failure(422, "Invalid", core.patch_namespaced_config_map, "jp", ns, [
        {"op": "test", "path": "/data/a", "value": "1"},
        {"op": "replace", "path": "/data/a", "value": "99"}], _content_type=JSON_PATCH)
    after = core.read_namespaced_config_map("jp", ns)
    assert after.data == {"a": "10"} and rv(after) == before


def test_merge_patch(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, gated_pod("mp", GATE_A, GATE_B))
    core.create_namespaced_config_map(ns, {"metadata": {"name": "mp", "labels": {"a": "1", "b": "2"}},
                                           "data": {"keep": "k", "drop": "d"}})
    patched = core.patch_namespaced_config_map("mp", ns, {"metadata": {"labels": {"b": None, "c": "3"}},
                                                          "data": {"drop": None, "new": "n"}}, _content_type=MERGE)
    assert patched.metadata.labels == {"a": "1", "c": "3"}
    assert patched.data == {"keep": "k", "new": "n"}

    # RFC 7386: a list in a merge patch replaces the whole list.
    pod = core.patch_namespaced_pod("mp", ns, {"spec": {"schedulingGates": [{"name": GATE_B}]}}, _content_type=MERGE)
    assert [g.name for g in pod.spec.scheduling_gates] == [GATE_B]


def test_strategic_merge_patch_deletes_one_scheduling_gate(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, gated_pod("smp", GATE_A, GATE_B))
    pod = core.patch_namespaced_pod("smp", ns, {"spec": {"schedulingGates": [{"name": GATE_A, "$patch": "delete"}]}},
                                    _content_type=STRATEGIC)
    assert [g.name for g in pod.spec.scheduling_gates] == [GATE_B]
    assert [g.name for g in core.read_namespaced_pod("smp", ns).spec.scheduling_gates] == [GATE_B]

    # Labels merge key by key under strategic merge too.
    labelled = core.patch_namespaced_pod("smp", ns, {"metadata": {"labels": {"x": "1"}}}, _content_type=STRATEGIC)
    assert labelled.metadata.labels["x"] == "1"
    assert [g.name for g in labelled.spec.scheduling_gates] == [GATE_B]


def test_unsupported_patch_content_type(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "ct"}})
    expect_failure(415, "UnsupportedMediaType", core.patch_namespaced_config_map, "ct", ns,
                   {"data": {"a": "b"}}, _content_type="application/yaml")
    assert core.read_namespaced_config_map("ct", ns).data is None


def test_creating_in_a_missing_namespace_is_not_found(core: client.CoreV1Api) -> None:
    missing = unique("missing")
    body = expect_failure(404, "NotFound", core.create_namespaced_config_map, missing, {"metadata": {"name": "x"}})
    assert missing in body["message"]
    expect_failure(404, "NotFound", core.create_namespaced_pod, missing, pod_body("x"))


def test_creating_twice_is_already_exists(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "dup"}, "data": {"v": "first"}})
    body = expect_failure(409, "AlreadyExists", core.create_namespaced_config_map, ns,
                          {"metadata": {"name": "dup"}, "data": {"v": "second"}})
    assert body["details"]["name"] == "dup"
    assert core.read_namespaced_config_map("dup", ns).data == {"v": "first"}
    expect_failure(409, "AlreadyExists", core.create_namespace, {"metadata": {"name": ns}})


def test_namespace_in_body_must_match_the_url(core: client.CoreV1Api, ns: str) -> None:
    expect_failure(400, "BadRequest", core.create_namespaced_config_map, ns,
                   {"metadata": {"name": "x", "namespace": "default"}})


# --- watch ------------------------------------------------------------------------------------------------


def test_watch_from_a_resource_version_replays_changes(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "before"}})
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespaced_config_map(ns, {"metadata": {"name": "watched", "labels": {"w": "1"}}})
    core.patch_namespaced_config_map("watched", ns, {"data": {"k": "v"}}, _content_type=MERGE)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "unlabelled"}})
    core.delete_namespaced_config_map("watched", ns)

    events = []
    stream = watch.Watch()
    for event in stream.stream(core.list_namespaced_config_map, ns, resource_version=start, label_selector="w=1",
                               timeout_seconds=5):
        events.append((event["type"], event["object"].metadata.name, event["object"].data))
        if event["type"] == "DELETED":
            stream.stop()
    assert events == [("ADDED", "watched", None), ("MODIFIED", "watched", {"k": "v"}),
                      ("DELETED", "watched", {"k": "v"})]


def test_watch_sees_changes_made_while_it_runs(core: client.CoreV1Api, ns: str) -> None:
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    seen: list[tuple[str, str]] = []
    stream = watch.Watch()

    def consume() -> None:
        for event in stream.stream(core.list_namespaced_config_map, ns, resource_version=start, timeout_seconds=5):
            seen.append((event["type"], event["object"].metadata.name))
            if event["type"] == "DELETED":
                stream.stop()

    reader = threading.Thread(target=consume)
    reader.start()
    time.sleep(0.2)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "live"}})
    core.delete_namespaced_config_map("live", ns)
    reader.join(10)
    assert seen == [("ADDED", "live"), ("DELETED", "live")]


def test_watch_without_resource_version_starts_with_the_current_objects(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "existing"}})
    events = [(e["type"], e["object"].metadata.name)
              for e in watch.Watch().stream(core.list_namespaced_config_map, ns, timeout_seconds=1)]
    assert events == [("ADDED", "existing")]


def test_watch_with_send_initial_events_marks_the_end_of_the_initial_state(core: client.CoreV1Api, ns: str) -> None:
    """Streaming lists (API concepts): sendInitialEvents=true sends the current objects as ADDED, then a BOOKMARK
    annotated k8s.io/initial-events-end=true; client-go's reflector (kubectl wait) waits for that bookmark."""
    core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "b"}})
    events = []
    stream = watch.Watch()
    for event in stream.stream(core.list_namespaced_config_map, ns, send_initial_events=True,
                               resource_version_match="NotOlderThan", allow_watch_bookmarks=True, timeout_seconds=3):
        raw = event["raw_object"]
        events.append((event["type"], raw["metadata"].get("name"),
                       (raw["metadata"].get("annotations") or {}).get("k8s.io/initial-events-end")))
        if event["type"] == "BOOKMARK":
            stream.stop()
    assert events == [("ADDED", "a", None), ("ADDED", "b", None), ("BOOKMARK", None, "true")]

    body = expect_failure(422, "Invalid", core.list_namespaced_config_map, ns, watch=True, send_initial_events=True,
                          allow_watch_bookmarks=True, timeout_seconds=1)
    assert "resourceVersionMatch" in body["message"]


def test_watch_bookmarks(core: client.CoreV1Api, ns: str) -> None:
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    types = []
    for event in watch.Watch().stream(core.list_namespaced_config_map, ns, resource_version=start,
                                      allow_watch_bookmarks=True, timeout_seconds=3):
        types.append(event["type"])
        if event["type"] == "BOOKMARK":
            bookmark = event["raw_object"]
            assert int(bookmark["metadata"]["resourceVersion"]) >= int(start)
            assert bookmark["kind"] == "ConfigMap"
            break
    assert types == ["BOOKMARK"]


def test_watch_timeout_seconds_ends_the_watch(core: client.CoreV1Api, ns: str) -> None:
    began = time.monotonic()
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    events = list(watch.Watch().stream(core.list_namespaced_config_map, ns, resource_version=start,
                                       timeout_seconds=1))
    elapsed = time.monotonic() - began
    assert events == []
    assert 0.8 <= elapsed < 5, elapsed


def test_watch_response_starts_before_the_first_event(core: client.CoreV1Api, ns: str) -> None:
    """The apiserver sends the watch response's status and headers at once and streams events after them, so a
    client's response-header timeout (kubectl --request-timeout, urllib3 read timeouts) never fires on a quiet
    collection."""
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    began = time.monotonic()
    response = core.list_namespaced_config_map(ns, watch=True, resource_version=start, timeout_seconds=4,
                                               _preload_content=False)
    try:
        assert response.status == 200
        assert time.monotonic() - began < 2
    finally:
        response.close()


def test_watch_from_a_compacted_resource_version_is_gone() -> None:
    with LocalCluster(nodes=[NodeSpec("solo")], history=5) as small:
        api_client = config.new_client_from_config(small.kubeconfig)
        core = client.CoreV1Api(api_client)
        first = core.create_namespaced_config_map("default", {"metadata": {"name": "cm-0"}})
        for i in range(1, 12):
            core.create_namespaced_config_map("default", {"metadata": {"name": f"cm-{i}"}})
        with pytest.raises(ApiException) as info:
            list(watch.Watch().stream(core.list_namespaced_config_map, "default",
                                      resource_version=first.metadata.resource_version, timeout_seconds=2))
        assert info.value.status == 410
        # A fresh list gives a resourceVersion that can be watched from again.
        current = core.list_namespaced_config_map("default").metadata.resource_version
        assert list(watch.Watch().stream(core.list_namespaced_config_map, "default", resource_version=current,
                                         timeout_seconds=1)) == []
        api_client.close()


# --- pod rules: scheduling readiness, validation ----------------------------------------------------------


def test_scheduling_gates_can_be_removed_but_not_added(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, gated_pod("gates", GATE_A))
    body = expect_failure(422, "Invalid", core.patch_namespaced_pod, "gates", ns,
                          {"spec": {"schedulingGates": [{"name": GATE_A}, {"name": GATE_B}]}}, _content_type=MERGE)
    assert "schedulingGates" in body["message"]
    assert [g.name for g in core.read_namespaced_pod("gates", ns).spec.scheduling_gates] == [GATE_A]

    cleared = core.patch_namespaced_pod("gates", ns, {"spec": {"schedulingGates": None}}, _content_type=MERGE)
    assert not cleared.spec.scheduling_gates
    # Once the pod is ungated, no gate can come back.
    expect_failure(422, "Invalid", core.patch_namespaced_pod, "gates", ns,
                   {"spec": {"schedulingGates": [{"name": GATE_A}]}}, _content_type=MERGE)


def test_gated_pod_node_selector_may_only_gain_keys(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, gated_pod("sel", GATE_A, nodeSelector={"zone": "a"}))
    widened = core.patch_namespaced_pod("sel", ns, {"spec": {"nodeSelector": {"disk": "ssd"}}}, _content_type=MERGE)
    assert widened.spec.node_selector == {"zone": "a", "disk": "ssd"}
    expect_failure(422, "Invalid", core.patch_namespaced_pod, "sel", ns, {"spec": {"nodeSelector": {"zone": "b"}}},
                   _content_type=MERGE)
    expect_failure(422, "Invalid", core.patch_namespaced_pod, "sel", ns, {"spec": {"nodeSelector": {"disk": None}}},
                   _content_type=MERGE)
    assert core.read_namespaced_pod("sel", ns).spec.node_selector == {"zone": "a", "disk": "ssd"}


def test_ungated_pod_node_selector_is_immutable(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, pod_body("plain", nodeSelector={"zone": "a"}))
    expect_failure(422, "Invalid", core.patch_namespaced_pod, "plain", ns, {"spec": {"nodeSelector": {"disk": "ssd"}}},
                   _content_type=MERGE)


def bind(core: client.CoreV1Api, ns: str, name: str, node: str) -> int:
    """POST pods/binding; the answer is a Status, which this client cannot decode as V1Binding, so read it raw."""
    response = core.create_namespaced_pod_binding(
        name, ns, {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": node}}, _preload_content=False)
    return response.status


def test_binding(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, pod_body("free"))
    assert bind(core, ns, "free", "node-b") == 201
    bound = core.read_namespaced_pod("free", ns)
    assert bound.spec.node_name == "node-b"
    assert any(c.type == "PodScheduled" and c.status == "True" for c in bound.status.conditions or [])
    expect_failure(409, "Conflict", bind, core, ns, "free", "node-a")


def test_gated_pod_cannot_be_bound(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, gated_pod("gated", GATE_A))
    body = expect_failure(409, "Conflict", bind, core, ns, "gated", "node-a")
    assert "schedulingGates" in body["message"]
    assert core.read_namespaced_pod("gated", ns).spec.node_name is None

    core.patch_namespaced_pod("gated", ns, {"spec": {"schedulingGates": None}}, _content_type=MERGE)
    assert bind(core, ns, "gated", "node-a") == 201
    assert core.read_namespaced_pod("gated", ns).spec.node_name == "node-a"


def test_node_name_with_scheduling_gates_is_invalid(core: client.CoreV1Api, ns: str) -> None:
    body = expect_failure(422, "Invalid", core.create_namespaced_pod, ns,
                          gated_pod("direct", GATE_A, nodeName="node-a"))
    assert "spec.nodeName" in body["message"]
    expect_failure(404, "NotFound", core.read_namespaced_pod, "direct", ns)


def test_invalid_label_value_is_invalid(core: client.CoreV1Api, ns: str) -> None:
    body = expect_failure(422, "Invalid", core.create_namespaced_pod, ns, pod_body("bad", {"app": "not valid!"}))
    assert "metadata.labels" in body["message"]
    expect_failure(422, "Invalid", core.create_namespaced_config_map, ns,
                   {"metadata": {"name": "bad", "labels": {"app": "-leading-dash"}}})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "good", "labels": {"app": "ok"}}})
    expect_failure(422, "Invalid", core.patch_namespaced_config_map, "good", ns,
                   {"metadata": {"labels": {"app": "x" * 64}}}, _content_type=MERGE)


# --- custom resources -------------------------------------------------------------------------------------


def crd_manifest(group: str, scope: str = "Namespaced") -> dict[str, Any]:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"widgets.{group}"},
            "spec": {"group": group, "scope": scope,
                     "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}


def established(extensions: client.ApiextensionsV1Api, name: str) -> bool:
    conditions = extensions.read_custom_resource_definition(name).status.conditions or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def test_custom_resources_after_applying_a_crd(api: client.ApiClient, ns: str) -> None:
    extensions, custom = client.ApiextensionsV1Api(api), client.CustomObjectsApi(api)
    group = f"{uuid.uuid4().hex[:8]}.example.com"
    extensions.create_custom_resource_definition(crd_manifest(group))
    wait_for(lambda: established(extensions, f"widgets.{group}"), what="CRD Established")

    groups = client.ApisApi(api).get_api_versions()
    served = {g.name: [v.group_version for v in g.versions] for g in groups.groups}
    assert served[group] == [f"{group}/v1"]
    resources = {r.name: r for r in custom.get_api_resources(group, "v1").resources}
    assert resources["widgets"].kind == "Widget" and resources["widgets"].namespaced is True

    for name, size in (("small", "s"), ("large", "l")):
        created = custom.create_namespaced_custom_object(group, "v1", ns, "widgets", {
            "apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": name, "labels": {"size": size}},
            "spec": {"replicas": 1}})
        assert created["metadata"]["uid"] and created["metadata"]["namespace"] == ns
    listed = custom.list_namespaced_custom_object(group, "v1", ns, "widgets")
    assert listed["kind"] == "WidgetList"
    assert sorted(i["metadata"]["name"] for i in listed["items"]) == ["large", "small"]
    selected = custom.list_namespaced_custom_object(group, "v1", ns, "widgets", label_selector="size=l")
    assert [i["metadata"]["name"] for i in selected["items"]] == ["large"]
    assert custom.get_namespaced_custom_object(group, "v1", ns, "widgets", "small")["spec"] == {"replicas": 1}

    patched = custom.patch_namespaced_custom_object(group, "v1", ns, "widgets", "small", {"spec": {"replicas": 2}},
                                                    _content_type=MERGE)
    assert patched["spec"] == {"replicas": 2}
    # Custom resources have no strategic-merge schema: the apiserver refuses that patch type for them.
    expect_failure(415, "UnsupportedMediaType", custom.patch_namespaced_custom_object, group, "v1", ns, "widgets",
                   "small", {"spec": {"replicas": 3}}, _content_type=STRATEGIC)

    custom.delete_namespaced_custom_object(group, "v1", ns, "widgets", "small")
    expect_failure(404, "NotFound", custom.get_namespaced_custom_object, group, "v1", ns, "widgets", "small")


def test_cluster_scoped_custom_resources(api: client.ApiClient) -> None:
    extensions, custom = client.ApiextensionsV1Api(api), client.CustomObjectsApi(api)
    group = f"{uuid.uuid4().hex[:8]}.example.com"
    extensions.create_custom_resource_definition(crd_manifest(group, scope="Cluster"))
    wait_for(lambda: established(extensions, f"widgets.{group}"), what="CRD Established")
    created = custom.create_cluster_custom_object(group, "v1", "widgets", {
        "apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "global"}})
    assert "namespace" not in created["metadata"]
    assert [i["metadata"]["name"] for i in custom.list_cluster_custom_object(group, "v1", "widgets")["items"]] \
        == ["global"]


def test_deleting_a_crd_stops_serving_its_kind(api: client.ApiClient) -> None:
    extensions, custom = client.ApiextensionsV1Api(api), client.CustomObjectsApi(api)
    group = f"{uuid.uuid4().hex[:8]}.example.com"
    extensions.create_custom_resource_definition(crd_manifest(group))
    wait_for(lambda: established(extensions, f"widgets.{group}"), what="CRD Established")
    custom.create_namespaced_custom_object(group, "v1", "default", "widgets",
                                           {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w"}})
    extensions.delete_custom_resource_definition(f"widgets.{group}")
    wait_for(lambda: gone(extensions.read_custom_resource_definition, f"widgets.{group}"), what="CRD removal")
    wait_for(lambda: gone(custom.list_namespaced_custom_object, group, "v1", "default", "widgets"),
             what="the kind to stop being served")
    assert group not in {g.name for g in client.ApisApi(api).get_api_versions().groups}


# --- scheduler and kubelet --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def running_cluster() -> Iterator[client.CoreV1Api]:
    """A separate cluster with the scheduler and kubelet loops, so they never touch the other tests' pods."""
    with LocalCluster(nodes=NODES) as local:
        loops = [Scheduler(local.api), Kubelet(local.api)]
        for loop in loops:
            loop.start()
        api_client = config.new_client_from_config(local.kubeconfig)
        yield client.CoreV1Api(api_client)
        for loop in loops:
            loop.stop()
        api_client.close()


def phase(core: client.CoreV1Api, ns: str, name: str) -> str | None:
    return core.read_namespaced_pod(name, ns).status.phase


def test_scheduler_binds_and_kubelet_runs_a_pod(running_cluster: client.CoreV1Api) -> None:
    core = running_cluster
    ns = unique("run")
    core.create_namespace({"metadata": {"name": ns}})
    core.create_namespaced_pod(ns, pod_body("app", containers=[{
        "name": "main", "image": "registry.k8s.io/pause:3.9", "resources": {"requests": {"cpu": "3"}}}]))
    wait_for(lambda: phase(core, ns, "app") == "Running", what="pod Running")
    pod = core.read_namespaced_pod("app", ns)
    assert pod.spec.node_name == "node-a"  # the only node with 3 free cpus
    assert [s.name for s in pod.status.container_statuses] == ["main"]
    assert pod_names(core.list_namespaced_pod(ns, field_selector="spec.nodeName=node-a,status.phase=Running")) \
        == {"app"}


def test_pod_too_big_for_every_node_is_unschedulable(running_cluster: client.CoreV1Api) -> None:
    core = running_cluster
    ns = unique("big")
    core.create_namespace({"metadata": {"name": ns}})
    core.create_namespaced_pod(ns, pod_body("huge", containers=[{
        "name": "main", "image": "registry.k8s.io/pause:3.9", "resources": {"requests": {"cpu": "64"}}}]))

    def unschedulable() -> Any:
        conditions = core.read_namespaced_pod("huge", ns).status.conditions or []
        return next((c for c in conditions if c.type == "PodScheduled" and c.status == "False"), None)

    condition = wait_for(unschedulable, what="PodScheduled=False")
    assert condition.reason == "Unschedulable"
    assert "Insufficient cpu" in condition.message
    assert core.read_namespaced_pod("huge", ns).spec.node_name is None


def test_pod_too_big_for_every_node_gets_a_failed_scheduling_event(running_cluster: client.CoreV1Api) -> None:
    core = running_cluster
    ns = unique("big")
    core.create_namespace({"metadata": {"name": ns}})
    core.create_namespaced_pod(ns, pod_body("huge", containers=[{
        "name": "main", "image": "registry.k8s.io/pause:3.9", "resources": {"requests": {"cpu": "64"}}}]))

    def failed_scheduling() -> list[Any]:
        events = core.list_namespaced_event(ns, field_selector="involvedObject.name=huge,reason=FailedScheduling")
        return events.items

    event = wait_for(failed_scheduling, timeout=3, what="FailedScheduling event")[0]
    assert event.type == "Warning" and event.involved_object.kind == "Pod"
    assert "Insufficient cpu" in event.message


def test_gated_pod_waits_for_its_gates(running_cluster: client.CoreV1Api) -> None:
    core = running_cluster
    ns = unique("gated")
    core.create_namespace({"metadata": {"name": ns}})
    core.create_namespaced_pod(ns, gated_pod("waiting", GATE_A, GATE_B))
    core.create_namespaced_pod(ns, pod_body("marker"))  # the scheduler has had its chance once this one runs
    wait_for(lambda: phase(core, ns, "marker") == "Running", what="marker pod Running")
    time.sleep(0.6)  # beyond one scheduler resync period
    waiting = core.read_namespaced_pod("waiting", ns)
    assert waiting.spec.node_name is None and waiting.status.phase == "Pending"

    core.patch_namespaced_pod("waiting", ns, {"spec": {"schedulingGates": [{"name": GATE_A, "$patch": "delete"}]}},
                              _content_type=STRATEGIC)
    time.sleep(0.6)
    assert core.read_namespaced_pod("waiting", ns).spec.node_name is None  # one gate left

    core.patch_namespaced_pod("waiting", ns, {"spec": {"schedulingGates": None}}, _content_type=MERGE)
    wait_for(lambda: phase(core, ns, "waiting") == "Running", what="ungated pod Running")
    assert core.read_namespaced_pod("waiting", ns).spec.node_name in {"node-a", "node-b"}


def test_deleting_a_running_pod_is_graceful(running_cluster: client.CoreV1Api) -> None:
    core = running_cluster
    ns = unique("graceful")
    core.create_namespace({"metadata": {"name": ns}})
    core.create_namespaced_pod(ns, pod_body("doomed"))
    wait_for(lambda: phase(core, ns, "doomed") == "Running", what="pod Running")
    deleted = core.delete_namespaced_pod("doomed", ns)
    assert deleted.metadata.deletion_timestamp is not None  # the pod is returned, marked, until the kubelet stops it
    wait_for(lambda: gone(core.read_namespaced_pod, "doomed", ns), what="kubelet to finish the deletion")

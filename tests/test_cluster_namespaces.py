"""A namespace's life on the local cluster, driven through the official client: the NamespaceLifecycle admission
plugin (no content in a namespace that does not exist or is being terminated, no deletion of the immortal ones),
the namespace registry (a DELETE marks, ``/finalize`` releases) and the namespace controller, which empties a
namespace being deleted, writes the conditions upstream's deleter writes, and removes the ``kubernetes`` finalizer.

Expectations come from the upstream sources named in ``cluster/lifecycle.py`` and ``cluster/namespaces.py``. A
kubelet runs (for node-0 and node-1), so bound pods are deleted gracefully and confirmed by it, or not while it is
stopped.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from cluster.kubelet import Kubelet
from cluster.local import LocalCluster, NodeSpec
from cluster.namespaces import OK_CONDITIONS, updated_conditions
from tests.support.polling import stays, wait_for

HOLD = "example.com/hold"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(nodes=[NodeSpec("node-0"), NodeSpec("node-1")]) as local:
        yield local


@pytest.fixture(scope="module")
def kubelet(cluster: LocalCluster) -> Iterator[Kubelet]:
    running = Kubelet(cluster.api, start_seconds=0.05, stop_seconds=0.2)
    running.start()
    yield running
    running.stop()


@pytest.fixture
def ns(core: client.CoreV1Api) -> str:
    name = f"ns-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    return name


def body(call: Any, *args: Any, **kwargs: Any) -> Any:
    """The JSON a client call answered, as sent (not deserialised into the method's return type)."""
    return json.loads(call(*args, _preload_content=False, **kwargs).data)


def raw(api: client.ApiClient, method: str, path: str) -> tuple[int, Any]:
    """A request by path: its status and JSON body."""
    response = api.call_api(*api.param_serialize(method, path, header_params={"Accept": "application/json"},
                                                 auth_settings=["BearerToken"]))
    response.read()
    return response.status, json.loads(response.data)


def refusal(call: Any, *args: Any, **kwargs: Any) -> tuple[int, Any]:
    with pytest.raises(ApiException) as caught:
        call(*args, **kwargs)
    return caught.value.status, json.loads(caught.value.body)


def namespace(core: client.CoreV1Api, name: str) -> Any:
    try:
        return body(core.read_namespace, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def conditions(core: client.CoreV1Api, name: str) -> dict[str, tuple[str, str, str]]:
    """The namespace's conditions by type: (status, reason, message)."""
    found = namespace(core, name) or {}
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in (found.get("status") or {}).get(
        "conditions") or []}


def held_config_map(core: client.CoreV1Api, ns: str, name: str = "held") -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": name, "finalizers": [HOLD]}})


def release(core: client.CoreV1Api, ns: str, name: str = "held") -> None:
    core.patch_namespaced_config_map(name, ns, {"metadata": {"finalizers": None}})


# --- NamespaceLifecycle ------------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_nothing_is_created_in_a_namespace_that_does_not_exist(api: client.ApiClient,
                                                                core: client.CoreV1Api) -> None:
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    code, status = refusal(core.create_namespaced_config_map, missing, {"metadata": {"name": "cm"}})
    assert code == 404
    assert status["reason"] == "NotFound" and status["message"] == f'namespaces "{missing}" not found'
    assert status["details"] == {"name": missing, "kind": "namespaces"}
    code, status = refusal(client.EventsV1Api(api).create_namespaced_event, missing, {
        "metadata": {"name": "e"}, "eventTime": "2026-01-01T00:00:00.000000Z", "action": "Test", "reason": "Test",
        "reportingController": "example.com/test", "reportingInstance": "test", "type": "Normal",
        "regarding": {"kind": "Pod", "name": "p", "namespace": missing}})
    assert (code, status["message"]) == (404, f'namespaces "{missing}" not found')
    assert core.list_namespaced_config_map(missing).items == []  # reads are not admitted: an empty list
    with pytest.raises(ApiException) as caught:
        core.delete_namespaced_config_map("cm", missing)  # a DELETE is allowed through: the object is not there
    assert json.loads(caught.value.body)["message"] == 'configmaps "cm" not found'


@pytest.mark.e2e
def test_nothing_is_created_in_a_terminating_namespace(core: client.CoreV1Api, ns: str) -> None:
    held_config_map(core, ns)
    core.delete_namespace(ns)
    code, status = refusal(core.create_namespaced_config_map, ns, {"metadata": {"generateName": "late-"}})
    assert code == 403 and status["reason"] == "Forbidden"
    assert status["message"] == (f'configmaps "late-" is forbidden: unable to create new content in namespace {ns} '
                                 "because it is being terminated")
    assert status["details"] == {"name": "late-", "kind": "configmaps", "causes": [
        {"reason": "NamespaceTerminating", "message": f"namespace {ns} is being terminated",
         "field": "metadata.namespace"}]}
    # what exists may still change and go
    core.patch_namespaced_config_map("held", ns, {"metadata": {"labels": {"still": "writable"}}})
    release(core, ns)
    wait_for(lambda: namespace(core, ns) is None, what="the namespace to go once released")
    code, status = refusal(core.create_namespaced_config_map, ns, {"metadata": {"name": "later"}})
    assert (code, status["message"]) == (404, f'namespaces "{ns}" not found')


@pytest.mark.e2e
def test_the_immortal_namespaces_cannot_be_deleted(core: client.CoreV1Api) -> None:
    for name in ("default", "kube-system", "kube-public"):
        code, status = refusal(core.delete_namespace, name)
        assert code == 403
        assert status["message"] == f'namespaces "{name}" is forbidden: this namespace may not be deleted'
        assert namespace(core, name)["status"]["phase"] == "Active"
    # kube-node-lease is not immortal: a dry run passes admission
    assert body(core.delete_namespace, "kube-node-lease", dry_run="All")["metadata"]["name"] == "kube-node-lease"
    assert "deletionTimestamp" not in namespace(core, "kube-node-lease")["metadata"]


# --- the namespace registry --------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_a_new_namespace_is_active_with_the_kubernetes_finalizer(core: client.CoreV1Api) -> None:
    name = f"ns-{uuid.uuid4().hex[:8]}"
    made = body(core.create_namespace, {"metadata": {"name": name}, "spec": {"finalizers": [HOLD]},
                                        "status": {"phase": "Terminating"}})
    assert made["spec"]["finalizers"] == [HOLD, "kubernetes"] and made["status"] == {"phase": "Active"}
    # only /finalize changes them: an update of the namespace keeps the stored ones
    patched = body(core.patch_namespace, name, {"spec": {"finalizers": []}, "metadata": {"labels": {"a": "b"}}})
    assert patched["spec"]["finalizers"] == [HOLD, "kubernetes"] and patched["metadata"]["labels"]["a"] == "b"
    code, status = refusal(core.create_namespace, {"metadata": {"name": f"{name}-bad"},
                                                   "spec": {"finalizers": ["bogus"]}})
    assert code == 422
    assert 'spec.finalizers: Invalid value: "bogus": name is neither a standard finalizer name nor is it fully ' \
           "qualified" in status["message"]


@pytest.mark.e2e
def test_a_delete_marks_the_namespace_and_a_second_one_changes_nothing(core: client.CoreV1Api, ns: str) -> None:
    held_config_map(core, ns)
    marked = body(core.delete_namespace, ns)
    assert marked["kind"] == "Namespace" and marked["status"]["phase"] == "Terminating"
    assert marked["metadata"]["deletionTimestamp"] and marked["spec"]["finalizers"] == ["kubernetes"]
    assert "finalizers" not in marked["metadata"]  # background: no garbage collector finalizer
    wait_for(lambda: conditions(core, ns).get("NamespaceFinalizersRemaining", ("",))[0] == "True",
             what="the controller to see the held content")
    before = namespace(core, ns)
    again = body(core.delete_namespace, ns)
    assert again == before  # spec.finalizers not empty: returned as it is
    code, status = refusal(core.delete_namespace, ns, body={"preconditions": {"uid": "not-its-uid"}})
    assert code == 409 and "Precondition failed: UID in precondition: not-its-uid" in status["message"]
    release(core, ns)
    wait_for(lambda: namespace(core, ns) is None, what="the namespace to go")


@pytest.mark.e2e
def test_the_delete_options_set_the_namespaces_garbage_collector_finalizer(core: client.CoreV1Api, ns: str) -> None:
    held_config_map(core, ns)
    marked = body(core.delete_namespace, ns, propagation_policy="Foreground")
    assert marked["metadata"]["finalizers"] == ["foregroundDeletion"]
    other = f"{ns}-o"
    core.create_namespace({"metadata": {"name": other}})
    assert body(core.delete_namespace, other, body={"orphanDependents": False})["metadata"]["finalizers"] == [
        "foregroundDeletion"]  # shouldHaveDeleteDependentsFinalizer: orphanDependents false means foreground
    release(core, ns)
    wait_for(lambda: namespace(core, ns) is None and namespace(core, other) is None,
             what="both namespaces to go (the garbage collector drops its finalizer: no dependents)")


@pytest.mark.e2e
def test_the_finalize_subresource(core: client.CoreV1Api) -> None:
    name = f"ns-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}, "spec": {"finalizers": [HOLD]}})
    code, status = refusal(core.replace_namespace_finalize, name, {"metadata": {"name": name},
                                                                   "spec": {"finalizers": ["bogus"]}})
    assert code == 422
    assert 'spec.finalizers[0]: Invalid value: "bogus": name is neither a standard finalizer name nor is it fully ' \
           "qualified" in status["message"]
    assert raw(core.api_client, "GET", f"/api/v1/namespaces/{name}/finalize")[0] == 405
    core.delete_namespace(name)
    # the controller empties it and removes its own finalizer only
    held = wait_for(lambda: (n := namespace(core, name)) and n["spec"].get("finalizers") == [HOLD] and n,
                    what="the controller to remove the kubernetes finalizer")
    assert held["status"]["phase"] == "Terminating"
    assert {t: c[0] for t, c in conditions(core, name).items()} == {t: "False" for t in OK_CONDITIONS}
    finalized = body(core.replace_namespace_finalize, name, {"metadata": {"name": name}, "spec": {"finalizers": []},
                                                            "status": {"phase": "Active"}})
    assert finalized["status"]["phase"] == "Terminating"  # /finalize keeps the status
    assert namespace(core, name) is None  # the last finalizer gone: deleted by that update


@pytest.mark.e2e
def test_namespaces_have_no_collection_delete(api: client.ApiClient) -> None:
    verbs = {r["name"]: r["verbs"] for r in raw(api, "GET", "/api/v1")[1]["resources"]}
    assert "deletecollection" not in verbs["namespaces"] and "deletecollection" in verbs["configmaps"]
    assert verbs["namespaces/finalize"] == ["update"]
    assert raw(api, "DELETE", "/api/v1/namespaces")[0] == 405


@pytest.mark.e2e
def test_a_collection_delete_deletes_what_its_selectors_select(core: client.CoreV1Api, ns: str) -> None:
    for name, team in (("a", "x"), ("b", "x"), ("c", "y")):
        core.create_namespaced_config_map(ns, {"metadata": {"name": name, "labels": {"team": team}}})
    answer = body(core.delete_collection_namespaced_config_map, ns, label_selector="team=x")
    assert answer["kind"] == "ConfigMapList" and [i["metadata"]["name"] for i in answer["items"]] == ["a", "b"]
    assert [c.metadata.name for c in core.list_namespaced_config_map(ns).items] == ["c"]


# --- the namespace controller ------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_deleting_a_namespace_deletes_all_it_holds(api: client.ApiClient, core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}})
    core.create_namespaced_secret(ns, {"metadata": {"name": "s"}, "stringData": {"k": "v"}})
    core.create_namespaced_service_account(ns, {"metadata": {"name": "sa"}})
    core.create_namespaced_event(ns, {"metadata": {"name": "ev"}, "reason": "Test", "message": "m",
                                      "involvedObject": {"kind": "ConfigMap", "name": "cm", "namespace": ns}})
    client.BatchV1Api(api).create_namespaced_job(ns, {"metadata": {"name": "j"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1"}]}}}})
    core.create_namespaced_pod(ns, {"metadata": {"name": "unbound"}, "spec": {"containers": [
        {"name": "c", "image": "busybox:1"}]}})
    other = f"{ns}-other"
    core.create_namespace({"metadata": {"name": other}})
    core.create_namespaced_config_map(other, {"metadata": {"name": "cm"}})
    core.delete_namespace(ns)
    wait_for(lambda: namespace(core, ns) is None, what="the emptied namespace to go")
    assert [o for r in ("configmaps", "secrets", "serviceaccounts", "events", "pods")
            for o in raw(api, "GET", f"/api/v1/namespaces/{ns}/{r}")[1]["items"]] == []
    assert client.BatchV1Api(api).list_namespaced_job(ns).items == []
    assert [c.metadata.name for c in core.list_namespaced_config_map(other).items] == ["cm"]


@pytest.mark.e2e
def test_content_with_finalizers_keeps_the_namespace_terminating(core: client.CoreV1Api, ns: str) -> None:
    held_config_map(core, ns, "one")
    held_config_map(core, ns, "two")
    core.create_namespaced_config_map(ns, {"metadata": {"name": "free"}})
    core.delete_namespace(ns)
    wait_for(lambda: conditions(core, ns).get("NamespaceContentRemaining", ("",))[0] == "True",
             what="the remaining content to be reported")
    found = conditions(core, ns)
    assert found["NamespaceContentRemaining"] == (
        "True", "SomeResourcesRemain", "Some resources are remaining: configmaps. has 2 resource instances")
    assert found["NamespaceFinalizersRemaining"] == (
        "True", "SomeFinalizerRemain", f"Some finalizers are remaining: {HOLD} in 2 resource instances")
    assert found["NamespaceDeletionContentFailure"] == (
        "False", "ContentDeleted", "All content successfully deleted, may be waiting on finalization")
    assert found["NamespaceDeletionDiscoveryFailure"] == (
        "False", "ResourcesDiscovered", "All resources successfully discovered")
    remaining = core.list_namespaced_config_map(ns).items
    assert sorted(c.metadata.name for c in remaining) == ["one", "two"]
    assert all(c.metadata.deletion_timestamp for c in remaining)
    stays(lambda: (namespace(core, ns) or {}).get("spec", {}).get("finalizers") == ["kubernetes"],
          "the kubernetes finalizer stays while content remains")
    release(core, ns, "one")
    wait_for(lambda: "configmaps. has 1 resource" in conditions(core, ns)["NamespaceContentRemaining"][2],
             what="the count to follow")
    release(core, ns, "two")
    wait_for(lambda: namespace(core, ns) is None, what="the namespace to go once its content is gone")


@pytest.mark.e2e
def test_the_namespace_waits_for_its_pods_graceful_deletion(core: client.CoreV1Api, kubelet: Kubelet,
                                                            ns: str) -> None:
    """A bound pod is deleted with its grace period and the namespace waits for its kubelet, while that grace period
    could still run; past it, a pod still there is an error the conditions name."""
    kubelet.stop_node("node-1")
    try:
        core.create_namespaced_pod(ns, {"metadata": {"name": "p"}, "spec": {
            "nodeName": "node-1", "terminationGracePeriodSeconds": 6,
            "containers": [{"name": "c", "image": "busybox:1"}]}})
        core.delete_namespace(ns)
        pod = wait_for(lambda: (p := core.read_namespaced_pod("p", ns)).metadata.deletion_timestamp and p,
                       what="the pod to be deleted")
        assert pod.metadata.deletion_grace_period_seconds == 6
        wait_for(lambda: conditions(core, ns).get("NamespaceContentRemaining", ("",))[0] == "True",
                 what="the pod to be reported as remaining")
        assert conditions(core, ns)["NamespaceContentRemaining"][2] == (
            "Some resources are remaining: pods. has 1 resource instances")
        assert conditions(core, ns)["NamespaceDeletionContentFailure"][0] == "False"
        wait_for(lambda: conditions(core, ns)["NamespaceDeletionContentFailure"][0] == "True", 15.0,
                 "the pod still there past its grace period to be an error")
        assert conditions(core, ns)["NamespaceDeletionContentFailure"][1:] == (
            "ContentDeletionFailed", f"Failed to delete all resource types, 1 remaining: unexpected items still "
                                     f"remain in namespace: {ns} for gvr: /v1, Resource=pods")
        assert namespace(core, ns)["spec"]["finalizers"] == ["kubernetes"]
    finally:
        kubelet.start_node("node-1")
    wait_for(lambda: namespace(core, ns) is None, what="the namespace to go once the kubelet confirmed")


@pytest.mark.unit
def test_a_condition_keeps_its_transition_time_unless_its_status_changes() -> None:
    old = [{"type": "NamespaceContentRemaining", "status": "True", "reason": "SomeResourcesRemain",
            "message": "Some resources are remaining: pods. has 2 resource instances",
            "lastTransitionTime": "2020-01-01T00:00:00Z"},
           {"type": "NamespaceFinalizersRemaining", "status": "False", "reason": "ContentRemoved",
            "message": "All content successfully removed", "lastTransitionTime": "2020-01-01T00:00:00Z"}]
    failing = [{"type": "NamespaceContentRemaining", "status": "True", "reason": "SomeResourcesRemain",
                "message": "Some resources are remaining: pods. has 1 resource instances",
                "lastTransitionTime": "2030-01-01T00:00:00Z"}]
    updated, changed = updated_conditions(old, failing)
    assert changed and [c["type"] for c in updated] == ["NamespaceContentRemaining", "NamespaceFinalizersRemaining",
                                                       "NamespaceDeletionDiscoveryFailure",
                                                       "NamespaceDeletionGroupVersionParsingFailure",
                                                       "NamespaceDeletionContentFailure"]
    assert updated[0]["lastTransitionTime"] == "2020-01-01T00:00:00Z" and "1 resource" in updated[0]["message"]
    assert updated[1] == old[1]
    again, changed = updated_conditions(updated, failing)
    assert again == updated and not changed
    cleared, _ = updated_conditions(updated, [])
    assert cleared[0]["status"] == "False" and cleared[0]["lastTransitionTime"] != "2020-01-01T00:00:00Z"

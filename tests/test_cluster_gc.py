"""The garbage collector of the local cluster (it runs with every LocalCluster), driven through the official
client: cascading deletion in the background (the default), the foreground and orphaning, as the Kubernetes
garbage collection docs describe them.

Owners and dependents are ConfigMaps and pods (any kind with ownerReferences is collected alike); a scheduler and
kubelets run, so bound pods are deleted gracefully and confirmed by their kubelet.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from cluster.controllers import Loop
from cluster.kubelet import Kubelet
from cluster.local import LocalCluster
from cluster.scheduler import Scheduler
from tests.support.polling import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster() as local:
        loops: list[Loop] = [Scheduler(local.api), Kubelet(local.api, start_seconds=0.05)]  # the GC runs already
        for loop in loops:
            loop.start()
        yield local
        for loop in loops:
            loop.stop()


@pytest.fixture
def ns(core: client.CoreV1Api) -> str:
    name = f"gc-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    return name


def ref(owner: Any, block: bool = False, controller: bool = False) -> dict[str, Any]:
    return {"apiVersion": owner.api_version or "v1", "kind": owner.kind or "ConfigMap", "name": owner.metadata.name,
            "uid": owner.metadata.uid, "blockOwnerDeletion": block, "controller": controller}


def config_map(core: client.CoreV1Api, ns: str, name: str, *owners: dict[str, Any],
               finalizers: list[str] | None = None) -> Any:
    meta: dict[str, Any] = {"name": name, "ownerReferences": list(owners)}
    if finalizers:
        meta["finalizers"] = finalizers
    made = core.create_namespaced_config_map(ns, {"metadata": meta})
    made.kind, made.api_version = "ConfigMap", "v1"
    return made


def exists(core: client.CoreV1Api, ns: str, name: str) -> Any:
    try:
        return core.read_namespaced_config_map(name, ns)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_background_deletion_takes_dependents_whose_owners_are_all_gone(core: client.CoreV1Api, ns: str) -> None:
    owner = config_map(core, ns, "owner")
    other = config_map(core, ns, "other")
    child = config_map(core, ns, "child", ref(owner, controller=True))
    grandchild = config_map(core, ns, "grandchild", ref(child))
    shared = config_map(core, ns, "shared", ref(owner), ref(other))
    core.delete_namespaced_config_map("owner", ns)  # Background: the owner goes at once
    assert exists(core, ns, "owner") is None
    wait_for(lambda: exists(core, ns, "child") is None and exists(core, ns, "grandchild") is None,
             what="the dependents and theirs to be collected")
    # A dependent with another owner that still exists survives; only the dangling reference goes.
    survivor = wait_for(lambda: (s := exists(core, ns, "shared")) and len(s.metadata.owner_references) == 1 and s,
                        what="the dangling reference to be removed")
    assert survivor.metadata.uid == shared.metadata.uid
    assert [r.uid for r in survivor.metadata.owner_references] == [other.metadata.uid]
    assert grandchild.metadata.uid != child.metadata.uid


def test_an_owner_reference_is_by_uid(core: client.CoreV1Api, ns: str) -> None:
    """An owner of the same name but another uid (deleted and recreated) does not own the dependent; an owner
    the collector cannot resolve (a kind not served) keeps it."""
    owner = config_map(core, ns, "reborn")
    core.delete_namespaced_config_map("reborn", ns)
    config_map(core, ns, "reborn")
    config_map(core, ns, "stale", ref(owner))
    config_map(core, ns, "unknown-kind", {"apiVersion": "example.com/v1", "kind": "Widget", "name": "w",
                                          "uid": str(uuid.uuid4())})
    wait_for(lambda: exists(core, ns, "stale") is None, what="the dependent of a gone uid to be collected")
    assert exists(core, ns, "reborn") is not None and exists(core, ns, "unknown-kind") is not None


def test_a_namespaced_owner_is_looked_up_in_the_dependents_namespace(core: client.CoreV1Api, ns: str) -> None:
    elsewhere = f"{ns}-x"
    core.create_namespace({"metadata": {"name": elsewhere}})
    owner = config_map(core, elsewhere, "owner")
    config_map(core, ns, "cross", ref(owner))
    wait_for(lambda: exists(core, ns, "cross") is None, what="a cross-namespace reference to count as absent")
    assert exists(core, elsewhere, "owner") is not None


def test_orphan_deletion_removes_the_references_then_the_owner(core: client.CoreV1Api, ns: str) -> None:
    owner = config_map(core, ns, "parent")
    config_map(core, ns, "kid", ref(owner, block=True, controller=True))
    core.delete_namespaced_config_map("parent", ns, propagation_policy="Orphan")
    wait_for(lambda: exists(core, ns, "parent") is None, what="the orphaned owner to go")
    kid = exists(core, ns, "kid")
    assert kid is not None and not kid.metadata.owner_references


def test_foreground_deletion_waits_for_blocking_dependents(core: client.CoreV1Api, ns: str) -> None:
    """The owner stays, with the foregroundDeletion finalizer, until every dependent that blocks it is gone; the
    collector deletes all its dependents."""
    owner = config_map(core, ns, "fg")
    config_map(core, ns, "blocker", ref(owner, block=True), finalizers=["example.com/hold"])
    config_map(core, ns, "free", ref(owner))
    core.delete_namespaced_config_map("fg", ns, propagation_policy="Foreground")
    blocker = wait_for(lambda: (b := exists(core, ns, "blocker")) and b.metadata.deletion_timestamp and b,
                       what="the blocking dependent to be deleted")
    wait_for(lambda: exists(core, ns, "free") is None, what="the other dependent to be deleted")
    held = exists(core, ns, "fg")
    assert held is not None and held.metadata.finalizers == ["foregroundDeletion"]
    assert held.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map("blocker", ns, {"metadata": {"finalizers": None}})
    wait_for(lambda: exists(core, ns, "fg") is None, what="the owner to go once nothing blocks it")
    assert blocker.metadata.uid


def test_a_batch_v1_job_deleted_without_a_policy_leaves_its_pods(api: client.ApiClient, core: client.CoreV1Api,
                                                                ns: str) -> None:
    """Deleting a batch/v1 Job through the API orphans its pods unless the request says otherwise (kubectl sends
    Background): the pods stay and lose their reference to the Job."""
    batch = client.BatchV1Api(api)
    job = batch.create_namespaced_job(ns, {"metadata": {"name": "j"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}})
    job.kind, job.api_version = "Job", "batch/v1"
    core.create_namespaced_pod(ns, {"metadata": {"name": "j-pod", "ownerReferences": [ref(job, True, True)]},
                                    "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    batch.delete_namespaced_job("j", ns)
    wait_for(lambda: not batch.list_namespaced_job(ns).items, what="the Job to go")
    assert not core.read_namespaced_pod("j-pod", ns).metadata.owner_references


def test_dependents_of_a_deleted_pod_are_deleted_gracefully(core: client.CoreV1Api, ns: str) -> None:
    """Pods owned by a pod (Spark executors by their driver): once the running owner is gone, the collector
    deletes them; being bound, they are marked and their kubelet confirms."""
    spec = {"containers": [{"name": "c", "image": "busybox"}]}
    driver = core.create_namespaced_pod(ns, {"metadata": {"name": "driver"}, "spec": spec})
    driver.kind, driver.api_version = "Pod", "v1"
    for i in range(2):
        core.create_namespaced_pod(ns, {"metadata": {"name": f"exec-{i}", "ownerReferences": [
            ref(driver, controller=True)]}, "spec": spec})
    wait_for(lambda: all(p.status.phase == "Running" for p in core.list_namespaced_pod(ns).items)
             and len(core.list_namespaced_pod(ns).items) == 3, what="all pods running")
    core.delete_namespaced_pod("driver", ns)
    wait_for(lambda: not core.list_namespaced_pod(ns).items, what="the executors to be collected")

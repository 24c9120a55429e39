"""Node failures on the local cluster, as the node lifecycle and taint eviction controllers and the kubelet
handle them (Kubernetes docs: Nodes > node status and heartbeats, Taints and Tolerations > taint based
evictions, the DefaultTolerationSeconds admission controller). ``--node-monitor-grace-period`` is 1 s here
(40 s by default), so a silent kubelet is noticed within seconds."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from cluster.local import LocalCluster, NodeSpec
from cluster.store import ApiError
from tests.support.polling import wait_for

pytestmark = pytest.mark.e2e

GRACE = 1.0
NODES = [NodeSpec("node-a", cpu="4"), NodeSpec("node-b", cpu="4"), NodeSpec("node-c", cpu="4"),
         NodeSpec("node-d", cpu="4")]
UNREACHABLE, NOT_READY = "node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"
TIMEOUT = 15.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(nodes=NODES) as local:
        local.run_components(start_seconds=0.05, operators=False, node_monitor_grace_seconds=GRACE)
        yield local


@pytest.fixture
def ns(core: client.CoreV1Api) -> str:
    name = f"nd-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    return name


def ready(core: client.CoreV1Api, node: str) -> Any:
    return next(c for c in core.read_node(node).status.conditions if c.type == "Ready")


def taints(core: client.CoreV1Api, node: str) -> set[tuple[str, str]]:
    return {(t.key, t.effect) for t in core.read_node(node).spec.taints or []}


def pinned(name: str, node: str, **spec: Any) -> dict[str, Any]:
    """A pod for the default scheduler, pinned to ``node`` by node affinity."""
    return {"metadata": {"name": name}, "spec": {
        "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}, **spec}}


def running(core: client.CoreV1Api, ns: str, name: str) -> Any:
    return wait_for(lambda: (p := core.read_namespaced_pod(name, ns)).status.phase == "Running" and p, TIMEOUT,
                    f"pod {name} Running")


def pod_ready(pod: Any) -> str:
    return next((c.status for c in pod.status.conditions or [] if c.type == "Ready"), "")


def test_pods_get_the_default_not_ready_and_unreachable_tolerations(core: client.CoreV1Api, ns: str) -> None:
    """DefaultTolerationSeconds: 300 s for each of the two taints, unless the pod tolerates them already."""
    pod = core.create_namespaced_pod(ns, pinned("plain", "node-a"))
    assert {(t.key, t.effect, t.operator, t.toleration_seconds) for t in pod.spec.tolerations} == {
        (NOT_READY, "NoExecute", "Exists", 300), (UNREACHABLE, "NoExecute", "Exists", 300)}
    own = {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}
    pod = core.create_namespaced_pod(ns, pinned("own", "node-a", tolerations=[own]))
    assert {(t.key, t.toleration_seconds) for t in pod.spec.tolerations} == {(UNREACHABLE, 5), (NOT_READY, 300)}


def test_a_silent_kubelet_makes_its_node_unknown_and_tainted_until_it_is_back(core: client.CoreV1Api,
                                                                              cluster: LocalCluster, ns: str) -> None:
    core.create_namespaced_pod(ns, pinned("resident", "node-b"))
    running(core, ns, "resident")
    cluster.stop_kubelet("node-b")
    condition = wait_for(lambda: (c := ready(core, "node-b")).status == "Unknown" and c, TIMEOUT, "Ready=Unknown")
    assert (condition.reason, condition.message) == ("NodeStatusUnknown", "Kubelet stopped posting node status.")
    wait_for(lambda: taints(core, "node-b") == {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}, TIMEOUT,
             "the unreachable taints")
    no_execute = next(t for t in core.read_node("node-b").spec.taints if t.effect == "NoExecute")
    assert no_execute.time_added is not None
    wait_for(lambda: pod_ready(core.read_namespaced_pod("resident", ns)) == "False", TIMEOUT, "pod marked not Ready")
    assert core.read_namespaced_pod("resident", ns).status.phase == "Running"  # nobody knows otherwise

    # The scheduler keeps new pods off the node; a pod bound there anyway does not start; a deleted one stays.
    core.create_namespaced_pod(ns, pinned("newcomer", "node-b"))

    def refused() -> Any:
        conditions = core.read_namespaced_pod("newcomer", ns).status.conditions or []
        return next((c for c in conditions if c.type == "PodScheduled" and c.status == "False"), None)

    assert "untolerated taint {node.kubernetes.io/unreachable: }" in wait_for(refused, TIMEOUT, "unschedulable").message
    core.create_namespaced_pod(ns, {"metadata": {"name": "bound"}, "spec": {
        "nodeName": "node-b", "containers": [{"name": "c", "image": "busybox"}]}})
    core.delete_namespaced_pod("resident", ns)
    time.sleep(4 * 0.05 + 0.5)  # several kubelet periods: nothing may happen on a node whose kubelet is down
    assert core.read_namespaced_pod("bound", ns).status.phase == "Pending"
    assert core.read_namespaced_pod("resident", ns).metadata.deletion_timestamp is not None

    cluster.start_kubelet("node-b")
    wait_for(lambda: ready(core, "node-b").status == "True" and not taints(core, "node-b"), TIMEOUT,
             "Ready again and untainted")
    running(core, ns, "bound")
    running(core, ns, "newcomer")
    wait_for(lambda: not [p for p in core.list_namespaced_pod(ns).items if p.metadata.name == "resident"], TIMEOUT,
             "the deleted pod confirmed by its kubelet")


def test_no_execute_taints_evict_after_the_toleration_seconds(core: client.CoreV1Api, cluster: LocalCluster,
                                                              ns: str) -> None:
    """Taint based eviction: a 1 s toleration evicts after about 1 s (DisruptionTarget condition, then a graceful
    delete that stays pending while the kubelet is down); the default 300 s keeps the pod; a toleration without
    seconds keeps it for ever."""
    forever = {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}
    brief = {**forever, "tolerationSeconds": 1}
    for name, spec in (("brief", {"tolerations": [brief]}), ("default", {}), ("forever", {"tolerations": [forever]})):
        core.create_namespaced_pod(ns, pinned(name, "node-c", **spec))
        running(core, ns, name)
    cluster.stop_kubelet("node-c")
    wait_for(lambda: (UNREACHABLE, "NoExecute") in taints(core, "node-c"), TIMEOUT, "the NoExecute taint")
    tainted_at = datetime.datetime.now(datetime.UTC)
    evicted = wait_for(lambda: (p := core.read_namespaced_pod("brief", ns)).metadata.deletion_timestamp and p,
                       TIMEOUT, "the 1 s pod to be evicted")
    assert datetime.datetime.now(datetime.UTC) - tainted_at >= datetime.timedelta(seconds=0.5)
    target = next(c for c in evicted.status.conditions if c.type == "DisruptionTarget")
    assert (target.status, target.reason) == ("True", "DeletionByTaintManager")
    time.sleep(1.5)
    assert all(core.read_namespaced_pod(n, ns).metadata.deletion_timestamp is None for n in ("default", "forever"))
    cluster.start_kubelet("node-c")
    wait_for(lambda: {p.metadata.name for p in core.list_namespaced_pod(ns).items} == {"default", "forever"},
             TIMEOUT, "the evicted pod gone once its kubelet is back")


def test_an_untolerated_no_execute_taint_evicts_at_once(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, pinned("victim", "node-a"))
    running(core, ns, "victim")
    core.patch_node("node-a", {"spec": {"taints": [{"key": "example.com/maintenance", "effect": "NoExecute"}]}})
    try:
        wait_for(lambda: not core.list_namespaced_pod(ns).items, TIMEOUT, "the pod evicted and gone")
    finally:
        core.patch_node("node-a", {"spec": {"taints": None}})


def test_a_kubelet_reporting_not_ready_taints_its_node_not_ready(core: client.CoreV1Api, cluster: LocalCluster,
                                                                 ns: str) -> None:
    cluster.set_runtime_ready("node-d", False)
    condition = wait_for(lambda: (c := ready(core, "node-d")).status == "False" and c, TIMEOUT, "Ready=False")
    assert condition.reason == "KubeletNotReady"
    wait_for(lambda: taints(core, "node-d") == {(NOT_READY, "NoSchedule"), (NOT_READY, "NoExecute")}, TIMEOUT,
             "the not-ready taints")
    cluster.set_runtime_ready("node-d", True)
    wait_for(lambda: ready(core, "node-d").status == "True" and not taints(core, "node-d"), TIMEOUT, "recovered")


def test_a_cordoned_node_is_tainted_unschedulable(core: client.CoreV1Api) -> None:
    core.patch_node("node-a", {"spec": {"unschedulable": True}})
    try:
        wait_for(lambda: taints(core, "node-a") == {("node.kubernetes.io/unschedulable", "NoSchedule")}, TIMEOUT,
                 "the unschedulable taint")
    finally:
        core.patch_node("node-a", {"spec": {"unschedulable": False}})
    wait_for(lambda: not taints(core, "node-a"), TIMEOUT, "the taint removed when uncordoned")


def test_faults_name_existing_nodes(cluster: LocalCluster) -> None:
    with pytest.raises(ApiError, match="not found"):
        cluster.stop_kubelet("no-such-node")

"""The emulated kubelet's pod admission (kubelet/lifecycle/predicate.go): a pod bound beyond what its node can
hold is rejected with the kubelet's reason and message. Pods are bound by a direct Binding (as a second scheduler
would), with a schedulerName no scheduler serves; expected numbers are worked out by hand."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from cluster.kubelet import admission_failure
from cluster.local import LocalCluster, NodeSpec
from tests.support.polling import wait_for

pytestmark = pytest.mark.e2e

NODES = [NodeSpec("small", cpu="4", memory="8Gi"), NodeSpec("crowded", cpu="4", memory="8Gi", pods="3"),
         NodeSpec("plain", cpu="4", memory="8Gi")]


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(nodes=NODES) as local:
        local.run_components(start_seconds=0.05, operators=False)
        yield local


@pytest.fixture
def ns(core: client.CoreV1Api) -> str:
    name = f"kl-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    return name


def bound(core: client.CoreV1Api, ns: str, name: str, node: str, cpu: str = "100m", memory: str = "64Mi",
          **container: Any) -> None:
    """Create the pod and bind it to ``node`` through the binding subresource."""
    core.create_namespaced_pod(ns, {"metadata": {"name": name}, "spec": {
        "schedulerName": "second-scheduler",
        "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": memory}},
                        **container}]}})
    core.create_namespaced_pod_binding(name, ns, {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                                                  "target": {"apiVersion": "v1", "kind": "Node", "name": node}},
                                       _preload_content=False)


def settled(core: client.CoreV1Api, ns: str, name: str) -> Any:
    """The pod once its kubelet has started or rejected it."""
    return wait_for(lambda: (p := core.read_namespaced_pod(name, ns)).status.phase in ("Running", "Failed") and p,
                    what=f"pod {name} to be started or rejected")


def test_a_pod_bound_beyond_the_nodes_cpu_is_rejected(core: client.CoreV1Api, ns: str) -> None:
    bound(core, ns, "first", "small", cpu="3")
    assert settled(core, ns, "first").status.phase == "Running"
    bound(core, ns, "second", "small", cpu="1500m")
    rejected = settled(core, ns, "second")
    assert (rejected.status.phase, rejected.status.reason) == ("Failed", "OutOfcpu")
    assert rejected.status.message == ("Pod was rejected: Node didn't have enough resource: cpu, requested: 1500, "
                                       "used: 3000, capacity: 4000")
    events = wait_for(lambda: core.list_namespaced_event(ns, field_selector="involvedObject.name=second").items,
                      what="the kubelet's event")
    assert (events[0].type, events[0].reason, events[0].source.component) == ("Warning", "OutOfcpu", "kubelet")
    assert events[0].message.startswith("Node didn't have enough resource: cpu")
    # A finished pod no longer counts: the same request now fits.
    core.patch_namespaced_pod_status("first", ns, {"status": {"phase": "Succeeded"}})
    bound(core, ns, "third", "small", cpu="1500m")
    assert settled(core, ns, "third").status.phase == "Running"


def test_memory_pod_count_and_ports(core: client.CoreV1Api, ns: str) -> None:
    bound(core, ns, "big", "crowded", memory="6Gi")
    settled(core, ns, "big")
    bound(core, ns, "more", "crowded", memory="3Gi")
    rejected = settled(core, ns, "more")
    assert rejected.status.reason == "OutOfmemory"
    assert rejected.status.message == ("Pod was rejected: Node didn't have enough resource: memory, requested: "
                                       f"{3 * 2**30}, used: {6 * 2**30}, capacity: {8 * 2**30}")
    port = {"ports": [{"containerPort": 80, "hostPort": 8080}]}
    bound(core, ns, "web", "crowded", **port)
    assert settled(core, ns, "web").status.phase == "Running"
    bound(core, ns, "web-2", "crowded", **port)  # 3 pods allowed, 2 admitted: the count fits, the port does not
    rejected = settled(core, ns, "web-2")
    assert (rejected.status.reason, rejected.status.message) == (
        "NodePorts", "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the "
                     "requested pod ports")
    bound(core, ns, "third", "crowded")
    settled(core, ns, "third")
    bound(core, ns, "fourth", "crowded")
    rejected = settled(core, ns, "fourth")
    assert (rejected.status.reason, rejected.status.message) == (
        "OutOfpods", "Pod was rejected: Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3")


def test_extended_resources_the_node_does_not_have_are_ignored(core: client.CoreV1Api, ns: str) -> None:
    """removeMissingExtendedResources: a cluster-level resource no node advertises does not fail admission."""
    core.create_namespaced_pod(ns, {"metadata": {"name": "licensed"}, "spec": {
        "schedulerName": "second-scheduler", "containers": [{"name": "c", "image": "busybox", "resources": {
            "requests": {"example.com/license": "1"}, "limits": {"example.com/license": "1"}}}]}})
    core.create_namespaced_pod_binding("licensed", ns, {"apiVersion": "v1", "kind": "Binding",
                                                        "metadata": {"name": "licensed"},
                                                        "target": {"apiVersion": "v1", "kind": "Node",
                                                                   "name": "plain"}}, _preload_content=False)
    assert settled(core, ns, "licensed").status.phase == "Running"


def test_an_untolerated_no_execute_taint_fails_admission() -> None:
    """Checked last, after resources and the other predicates (on a live node the taint eviction controller
    deletes such a pod too, so the race is not observable end to end)."""
    node = NodeSpec("n", taints=({"key": "example.com/drain", "effect": "NoExecute"},)).node()
    pod = {"metadata": {"name": "p"}, "spec": {"nodeName": "n", "containers": [{"name": "c"}]}}
    assert admission_failure(pod, node, []) == (
        "TaintToleration", "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate")
    pod["spec"]["tolerations"] = [{"key": "example.com/drain", "operator": "Exists", "effect": "NoExecute"}]
    assert admission_failure(pod, node, []) is None

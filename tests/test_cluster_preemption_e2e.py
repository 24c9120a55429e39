"""Preemption on a running local cluster started with ``run_components(preemption=True)`` (Kubernetes docs: Pod
Priority and Preemption): a pod of a higher PriorityClass that fits no node preempts a lower-priority pod, which
terminates; the preemptor, nominated meanwhile, then runs on that node."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from cluster.local import LocalCluster, NodeSpec
from tests.support.polling import wait_for

pytestmark = pytest.mark.e2e

TIMEOUT = 15.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(nodes=[NodeSpec("node-a", cpu="4")]) as local:
        local.run_components(start_seconds=0.05, operators=False, stop_seconds=0.2, preemption=True)
        yield local


@pytest.fixture
def ns(core: client.CoreV1Api) -> str:
    name = f"pre-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    return name


def pod(name: str, cpu: str, priority_class: str = "") -> dict[str, object]:
    spec: dict[str, object] = {"terminationGracePeriodSeconds": 5, "containers": [
        {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"metadata": {"name": name}, "spec": spec}


def test_a_higher_priority_pod_preempts_and_then_runs_on_the_node(api: client.ApiClient, core: client.CoreV1Api,
                                                                  ns: str) -> None:
    client.SchedulingV1Api(api).create_priority_class({"metadata": {"name": f"{ns}-high"}, "value": 1000})
    core.create_namespaced_pod(ns, pod("low", "3"))
    wait_for(lambda: core.read_namespaced_pod("low", ns).status.phase == "Running", TIMEOUT, "low Running")
    core.create_namespaced_pod(ns, pod("urgent", "2", f"{ns}-high"))
    urgent = wait_for(lambda: (p := core.read_namespaced_pod("urgent", ns)).status.phase == "Running" and p,
                      TIMEOUT, "urgent Running")
    assert (urgent.spec.node_name, urgent.spec.priority, urgent.status.nominated_node_name) == ("node-a", 1000,
                                                                                               "node-a")
    assert "low" not in {p.metadata.name for p in core.list_namespaced_pod(ns).items}
    events = core.list_namespaced_event(ns).items  # events.k8s.io/v1 written, read here in its core/v1 form
    assert [(e.involved_object.name, e.related.name, e.reporting_component) for e in events
            if e.reason == "Preempted"] == [("low", "urgent", "default-scheduler")]

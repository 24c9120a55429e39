"""Preemption on a running local cluster started with ``run_components(preemption=True)`` (Kubernetes docs: Pod
Priority and Preemption; Jobs > Pod failure policy): a pod of a higher PriorityClass that fits no node preempts a
lower-priority pod, which terminates; the preemptor, nominated meanwhile, then runs on that node. A Job whose pod
failure policy ignores disruptions does not count its preempted pod as a failure; one without does."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from cluster.local import LocalCluster, NodeSpec
from cluster.operators.table import start_operators
from tests.support.polling import stays, wait_for

pytestmark = pytest.mark.e2e

TIMEOUT = 15.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(nodes=[NodeSpec("node-a", cpu="4")]) as local:
        local.run_components(start_seconds=0.05, operators=False, stop_seconds=0.2, preemption=True)
        local.components.extend(start_operators(local.api, ["job-controller"]))  # stopped with the cluster
        yield local


@pytest.fixture
def ns(api: client.ApiClient, core: client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace; afterwards its Jobs and pods are deleted (an empty node again)."""
    name = f"pre-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    batch = client.BatchV1Api(api)
    for job in batch.list_namespaced_job(name).items:
        batch.delete_namespaced_job(job.metadata.name, name, propagation_policy="Background")
    for pod_ in core.list_namespaced_pod(name).items:
        core.delete_namespaced_pod(pod_.metadata.name, name, grace_period_seconds=0)
    wait_for(lambda: not core.list_namespaced_pod(name).items, TIMEOUT, "the test's pods gone")


def pod(name: str, cpu: str, priority_class: str = "", **fields: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": 5, "containers": [
        {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}], **fields}
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


def test_a_job_that_ignores_disruptions_survives_the_preemption_of_its_pod(api: client.ApiClient,
                                                                          core: client.CoreV1Api, ns: str) -> None:
    client.SchedulingV1Api(api).create_priority_class({"metadata": {"name": f"{ns}-high"}, "value": 1000})
    batch = client.BatchV1Api(api)
    ignore = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    for name, policy in (("tolerant", ignore), ("strict", None)):
        spec: dict[str, Any] = {"backoffLimit": 0, "template": pod(name, "2", restartPolicy="Never")}
        if policy is not None:
            spec["podFailurePolicy"] = policy
        batch.create_namespaced_job(ns, {"metadata": {"name": name}, "spec": spec})
    wait_for(lambda: len([p for p in core.list_namespaced_pod(ns).items if p.status.phase == "Running"]) == 2,
             TIMEOUT, "both Jobs' pods Running")
    (victim,) = [p.metadata.name for p in core.list_namespaced_pod(ns).items
                 if p.metadata.labels["job-name"] == "tolerant"]
    core.create_namespaced_pod(ns, pod("urgent", "4", f"{ns}-high"))

    def conditions(name: str) -> list[tuple[str, str]]:
        return [(c.type, c.reason) for c in batch.read_namespaced_job(name, ns).status.conditions or []]

    wait_for(lambda: ("Failed", "BackoffLimitExceeded") in conditions("strict"), TIMEOUT, "the strict Job failed")
    wait_for(lambda: victim not in {p.metadata.name for p in core.list_namespaced_pod(ns).items}, TIMEOUT,
             "the tolerant Job's preempted pod gone")
    stays(lambda: not conditions("tolerant") and not batch.read_namespaced_job("tolerant", ns).status.failed,
          lambda: f"the tolerant Job not failing: {conditions('tolerant')}", seconds=1.0)

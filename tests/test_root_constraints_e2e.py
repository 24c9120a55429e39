"""What a root asks reaches the gate controller's decision on a live cluster, or its gang waits (issue 21).

The local cluster has four 4-cpu nodes in two racks (``example.com/rack``: a = rack-a0, rack-a1; b = rack-b0,
rack-b1), the webhook admitting pods and the PodGroup CRD installed. The controller reads the constraints of each
gang from its watch of root objects (controller/root_watch.py): JobSet's exclusive topology (the annotation the
webhook's slim owner decode used to drop), every ``kubenexus.io/*`` constraint, and, when the root cannot be read
(its list forbidden, the apiserver too slow), nothing at all: the gang waits and says why, and never starts outside
its domain.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from cluster.local import LocalCluster, NodeSpec
from controller.run import Controller
from gang.config import Config
from kube.client import new_api_client
from tests.support.contract import CONTROLLER
from tests.support.deploy import render
from tests.support.gang_pods import (
    JOB_NAME,
    TIMEOUT,
    delete_pods,
    describe,
    gated,
    running,
    torch_job,
    wait_event,
    wait_pods,
)
from tests.support.kube import Kube, admitted
from tests.support.kubectl import Kubectl
from tests.support.podgroups import install_crd, podgroup
from tests.support.polling import stays, wait_for
from tests.support.roots import OPTED_IN, Obj, meta, pod_spec

pytestmark = pytest.mark.e2e

RACK = "example.com/rack"
RACKS = {"rack-a0": "a", "rack-a1": "a", "rack-b0": "b", "rack-b1": "b"}
NODES = [NodeSpec(name, cpu="4", memory="16Gi", labels=(("pool", "cpu"), (RACK, rack))) for name, rack in RACKS.items()]
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
CHILD = "jobset.sigs.k8s.io/job-index"
KINDS = [("kubeflow.org", "v1", "pytorchjobs"), ("jobset.x-k8s.io", "v1alpha2", "jobsets")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(nodes=list(NODES), workdir=str(tmp_path_factory.mktemp("root-constraints"))) as local:
        local.run_components()
        yield local


@pytest.fixture(scope="module")
def kube(cluster: LocalCluster, workdir: Any, tls: Any) -> Iterator[Kube]:
    with admitted(cluster, workdir, tls) as api:
        install_crd(api.api_client)
        api.ensure_namespace("kubenexus-system")
        yield api


@pytest.fixture
def ns(kube: Kube, cluster: LocalCluster) -> Iterator[str]:
    name = kube.namespace()
    yield name
    cluster.slow_down(None)
    cluster.api.authorizer = None  # RBAC enforced by a test: everybody unchecked again
    for group, version, plural in KINDS:
        for obj in kube.custom.list_namespaced_custom_object(group, version, name, plural)["items"]:
            kube.custom.delete_namespaced_custom_object(group, version, name, plural, obj["metadata"]["name"])
    delete_pods(kube, name)


@pytest.fixture
def controller(controller_kubeconfig: str) -> Iterator[Callable[..., Controller]]:
    """A gate controller as its service account (``api_timeout_seconds`` short, so its watch of roots gives up on
    a slow apiserver within a test); stopped after the test."""
    started: list[Controller] = []

    def start() -> Controller:
        started.append(Controller(new_api_client(controller_kubeconfig, 32, 3), Config(api_timeout_seconds=0.2),
                                  port=0).start())
        return started[-1]

    yield start
    for one in started:
        one.stop()


def jobset(name: str, replicas: int, annotations: Obj) -> Obj:
    """A JobSet of one replicated job: ``replicas`` child Jobs of 2 pods of 1 cpu each."""
    job = {"parallelism": 2, "completions": 2,
           "template": {"spec": {"restartPolicy": "Never", **pod_spec("w", "1", "64Mi", nodeSelector={"pool": "cpu"})}}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta(name, annotations),
            "spec": {"replicatedJobs": [{"name": "w", "replicas": replicas, "template": {"spec": job}}]}}


def status(kube: Kube, ns: str, name: str) -> Obj:
    return (podgroup(kube.api_client, ns, name) or {}).get("status") or {}


def wait_status(kube: Kube, ns: str, name: str, check: Callable[[Obj], bool], what: str) -> Obj:
    return wait_for(lambda: (lambda found: found if found and check(found) else None)(status(kube, ns, name)),
                    TIMEOUT, lambda: f"PodGroup {name}: {what}; status: {status(kube, ns, name)}")


def racks_of(pods: list[Obj]) -> set[str]:
    return {RACKS[p["spec"]["nodeName"]] for p in pods}


def busy(kube: Kube, ns: str, node: str, cpu: str) -> None:
    """A pod that is no gang's, holding ``cpu`` on ``node``."""
    kube.core.create_namespaced_pod(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"busy-{node}"},
                                         "spec": {"nodeName": node, **pod_spec("c", cpu, "64Mi")}})


def test_jobset_child_jobs_start_in_racks_of_their_own(kube: Kube, ns: str,
                                                       controller: Callable[..., Controller]) -> None:
    # 2 child Jobs x 2 pods x 1 cpu: all four fit on one node; exclusive topology puts each child Job in a rack of
    # its own, so the two racks are one child Job each.
    controller()
    kube.create(ns, jobset("pair", 2, {**OPTED_IN, "alpha.jobset.sigs.k8s.io/exclusive-topology": RACK}))
    pods = wait_pods(kube, ns, lambda found: len(found) == 4 and all(running(p) for p in found), "4 pods running",
                     f"{JOBSET_NAME}=pair")
    by_child = {index: [p for p in pods if p["metadata"]["labels"][CHILD] == index] for index in ("0", "1")}
    assert [len(racks_of(members)) for members in by_child.values()] == [1, 1], describe(pods)
    assert racks_of(by_child["0"]) != racks_of(by_child["1"]), describe(pods)
    found = wait_status(kube, ns, "pair", lambda s: "domains" in s.get("topology", {}), "the domains it runs in")
    assert found["topology"] == {"requests": [{"key": RACK, "mode": "Required", "exclusive": True}],
                                 "domains": ["a", "b"]}


def test_three_child_jobs_on_two_racks_never_fit_and_the_reason_names_the_racks(
        kube: Kube, ns: str, controller: Callable[..., Controller]) -> None:
    controller()
    kube.create(ns, jobset("trio", 3, {**OPTED_IN, "alpha.jobset.sigs.k8s.io/exclusive-topology": RACK}))
    found = wait_status(kube, ns, "trio", lambda s: s.get("phase") == "NeverFits", "NeverFits")
    assert f"3 child Jobs each need a {RACK} domain of their own" in found["reason"], found["reason"]
    assert "there are 2: a, b" in found["reason"], found["reason"]
    assert found["topology"] == {"requests": [{"key": RACK, "mode": "Required", "exclusive": True}]}
    assert all(gated(p) for p in kube.pods(ns, f"{JOBSET_NAME}=trio"))


def rack_job(kube: Kube, ns: str) -> None:
    """Pods that are no gang's leave 3 + 0.5 cpu free in rack a and 1.5 + 0.5 in rack b; a PyTorchJob of 1 master +
    2 workers of 1.5 cpu fits across the racks (two on rack-a0, one on rack-b0) but in neither rack (a: 2 of 3)."""
    for node, cpu in (("rack-a0", "1"), ("rack-a1", "3500m"), ("rack-b0", "2500m"), ("rack-b1", "3500m")):
        busy(kube, ns, node, cpu)
    wait_pods(kube, ns, lambda pods: len(pods) == 4 and all(running(p) for p in pods), "the busy pods running")
    job = torch_job("train", 2, "1500m")
    job["metadata"]["annotations"]["kubenexus.io/topology-required"] = RACK
    kube.create(ns, job)
    wait_pods(kube, ns, lambda pods: len(pods) == 3 and all(gated(p) for p in pods), "3 gated members",
              f"{JOB_NAME}=train")


def started_in_one_rack(kube: Kube, ns: str) -> None:
    """Once rack b frees up, the job starts there, whole."""
    for node in ("rack-b0", "rack-b1"):
        kube.core.delete_namespaced_pod(f"busy-{node}", ns, grace_period_seconds=0)
    pods = wait_pods(kube, ns, lambda found: len(found) == 3 and all(running(p) for p in found), "all 3 running",
                     f"{JOB_NAME}=train")
    assert racks_of(pods) == {"b"}, describe(pods)


def without_root_listing(cluster: LocalCluster, kube: Kube) -> None:
    """The shipped RBAC, enforced for the controller, except list and watch of the kubeflow.org roots."""
    rbac = client.RbacAuthorizationV1Api(kube.api_client)
    for obj in render():
        if obj.get("kind") == "ClusterRole" and obj["metadata"]["name"] == "kubenexus-controller":
            role = copy.deepcopy(obj)
            for rule in role["rules"]:
                if rule.get("apiGroups") == ["kubeflow.org"]:
                    rule["verbs"] = ["get"]
            role["metadata"]["name"] = "controller-without-root-listing"
            rbac.create_cluster_role(role)
    rbac.create_cluster_role_binding({
        "metadata": {"name": "controller-without-root-listing"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "controller-without-root-listing"},
        "subjects": [{"kind": "ServiceAccount", "name": "kubenexus-controller", "namespace": "kubenexus-system"}]})
    cluster.enforce_rbac(CONTROLLER)


def described_warnings(kubectl: Kubectl, ns: str, kind: str, name: str) -> list[str]:
    """The Warning Events ``kubectl describe`` lists under an object, a line each (type, reason, age, from, note)."""
    listed = kubectl("describe", kind, name, "-n", ns).stdout.partition("\nEvents:")[2]
    return [line.strip() for line in listed.splitlines() if line.strip().startswith("Warning ")]


def wait_warned(kubectl: Kubectl, ns: str, kind: str, name: str, reason: str, *words: str) -> str:
    """The line of a Warning ``reason`` with ``words`` in its note, once ``kubectl describe`` lists it."""
    return wait_for(lambda: next((line for line in described_warnings(kubectl, ns, kind, name)
                                  if reason in line.split() and all(w in line for w in words)), None),
                    TIMEOUT, lambda: f"{reason} ({words}) under {kind} {name}: "
                                     f"{described_warnings(kubectl, ns, kind, name)}")


def test_a_root_the_controller_may_not_list_holds_its_gang_which_never_starts_outside_its_rack(
        kube: Kube, cluster: LocalCluster, ns: str, controller: Callable[..., Controller], tmp_path: Any) -> None:
    without_root_listing(cluster, kube)
    rack_job(kube, ns)
    controller()
    found = wait_status(kube, ns, "train", lambda s: "HTTP 403" in s.get("reason", ""), "the list refused")
    assert "cannot be read" in found["reason"] and found["waitingFor"] == "its root's constraints", found
    assert {c["type"]: c["reason"] for c in found["conditions"]}["Schedulable"] == "ConstraintsUnknown"
    # Told where users look: ``kubectl describe`` of the root and of a gated member lists the warning and why.
    kubectl = Kubectl(cluster.kubeconfig, tmp_path / "kube-cache")
    for kind, name in (("pytorchjob", "train"), ("pod", "train-master-0")):
        wait_warned(kubectl, ns, kind, name, "GangConstraintsUnknown", "cannot be read", "HTTP 403")
    members = lambda: kube.pods(ns, f"{JOB_NAME}=train")  # noqa: E731
    stays(lambda: all(gated(p) for p in members()), "it fits across the racks, but its request cannot be read")
    cluster.api.authorizer = None  # the permission back: the watch lists, the request is known
    found = wait_status(kube, ns, "train", lambda s: "domain has room" in s.get("reason", ""), "waiting for a rack")
    stays(lambda: all(gated(p) for p in members()), "no rack holds it")
    started_in_one_rack(kube, ns)


def test_a_root_list_slower_than_the_timeout_holds_its_gang(
        kube: Kube, cluster: LocalCluster, ns: str, controller: Callable[..., Controller]) -> None:
    rack_job(kube, ns)
    cluster.slow_down(6.0, users=(CONTROLLER,), verbs=("list",), resources=("pytorchjobs",))  # its timeout: 3 s
    controller()
    found = wait_status(kube, ns, "train", lambda s: "cannot be read" in s.get("reason", ""), "constraints unknown")
    assert found["phase"] == "Waiting", found
    stays(lambda: all(gated(p) for p in kube.pods(ns, f"{JOB_NAME}=train")), "its request cannot be read yet")
    cluster.slow_down(None)
    wait_status(kube, ns, "train", lambda s: "domain has room" in s.get("reason", ""), "waiting for a rack")
    started_in_one_rack(kube, ns)


def test_every_constraint_a_root_asks_reaches_the_decision(kube: Kube, ns: str,
                                                           controller: Callable[..., Controller]) -> None:
    """Each ``kubenexus.io/*`` annotation the gate controller reads on roots, on a PyTorchJob of its own, and what
    shows that the decision used it (JobSet's exclusive topology and topology-required: the tests above)."""
    controller()
    asks = {"preferred": {"kubenexus.io/topology-preferred": RACK},
            "by-role": {"kubenexus.io/topology-required.worker": RACK},
            "timeout": {"kubenexus.io/schedule-timeout-seconds": "90"},
            "spread": {"kubenexus.io/best-effort-placement": "true"}}
    for name, asked in asks.items():
        job = torch_job(name, 1, "250m")
        job["metadata"]["annotations"].update(asked)
        if name == "spread":  # a constraint the plan cannot check exactly: released only on a best-effort plan
            for replica in job["spec"]["pytorchReplicaSpecs"].values():
                replica["template"]["spec"]["topologySpreadConstraints"] = [{
                    "maxSkew": 1, "topologyKey": RACK, "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {JOB_NAME: name}}}]
        kube.create(ns, job)
    for name in asks:
        wait_pods(kube, ns, lambda pods: len(pods) == 2 and all(running(p) for p in pods), f"{name} running",
                  f"{JOB_NAME}={name}")
    assert wait_status(kube, ns, "preferred", lambda s: "domains" in s.get("topology", {}), "its domains")[
        "topology"]["requests"] == [{"key": RACK, "mode": "Preferred"}]
    assert wait_status(kube, ns, "by-role", lambda s: "topology" in s, "its request")["topology"]["requests"] == [
        {"key": RACK, "mode": "Required", "role": "worker"}]
    wait_for(lambda: (podgroup(kube.api_client, ns, "timeout") or {}).get("spec", {}).get(
        "scheduleTimeoutSeconds") == 90, TIMEOUT, "PodGroup timeout: spec.scheduleTimeoutSeconds 90")
    assert any("best effort" in note for note in wait_event(kube, ns, "PyTorchJob", "spread", "GangReleased"))

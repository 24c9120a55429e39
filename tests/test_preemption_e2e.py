"""Gang preemption on the local cluster (issue 23): PriorityClasses resolved by the Priority admission plugin, the
webhook gating PyTorchJob members, the gate controller preempting, the kubelet stopping victims with their grace
period, the scheduler (DefaultPreemption on, as kube-scheduler's default profile) binding what is released.

Four nodes of 4 cpu (``pool=cpu``). Every victim is watched from its creation: a victim must carry the
``DisruptionTarget`` condition (reason ``PreemptionByGangAdmission``) before it is deleted, a gang victim goes
whole, and the preemptor stays gated until every victim is gone; the controller's /metrics count each preemption
and the pods it took, by kind.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client import ApiException
from prometheus_client.parser import text_string_to_metric_families

from cluster.local import LocalCluster, NodeSpec
from controller.run import PREEMPTION_REASON, Controller
from gang.config import Config
from kube.client import new_api_client
from tests.support.gang_pods import JOB_NAME, TIMEOUT, gated, running, torch_job, wait_event, wait_pods
from tests.support.kube import Kube, admitted
from tests.support.podgroups import condition, install_crd, podgroup
from tests.support.polling import stays, wait_for

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]
NODES = [f"p-{i}" for i in range(4)]
CLASSES = {"lowest": 50, "low": 100, "high": 1000, "critical": 2000}  # name: value
NEVER = "high-never"  # value 1000, preemptionPolicy Never
GRACE = 2  # seconds: the victims of test_victims_with_a_grace_period_... take this long to stop


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    nodes = [NodeSpec(n, cpu="4", memory="16Gi", labels=(("pool", "cpu"),)) for n in NODES]
    with LocalCluster(nodes=nodes, workdir=str(tmp_path_factory.mktemp("preemption"))) as local:
        local.run_components(preemption=True, stop_seconds=GRACE)  # a pod stops after min(grace, 2 s)
        yield local


@pytest.fixture(scope="module")
def kube(cluster: LocalCluster, workdir: Any, tls: Any) -> Iterator[Kube]:
    with admitted(cluster, workdir, tls) as api:
        install_crd(api.api_client)
        scheduling = client.SchedulingV1Api(api.api_client)
        for name, value in CLASSES.items():
            scheduling.create_priority_class({"metadata": {"name": name}, "value": value})
        scheduling.create_priority_class({"metadata": {"name": NEVER}, "value": CLASSES["high"],
                                          "preemptionPolicy": "Never"})
        yield api


@pytest.fixture(scope="module")
def controller(kube: Kube, controller_kubeconfig: str) -> Iterator[Controller]:
    started = Controller(new_api_client(controller_kubeconfig, 32, 3), Config(), port=0).start()
    yield started
    started.stop()


@pytest.fixture
def ns(kube: Kube, controller: Controller) -> Iterator[str]:
    """A namespace of the test's own; its jobs and pods are deleted afterwards, so the next test finds the nodes
    empty."""
    name = kube.namespace()
    yield name
    for job in kube.custom.list_namespaced_custom_object("kubeflow.org", "v1", name, "pytorchjobs")["items"]:
        kube.custom.delete_namespaced_custom_object("kubeflow.org", "v1", name, "pytorchjobs", job["metadata"]["name"])
    for pod in kube.pods(name):
        with contextlib.suppress(ApiException):
            kube.core.delete_namespaced_pod(pod["metadata"]["name"], name, grace_period_seconds=0)
    wait_for(lambda: not kube.pods(name), TIMEOUT, "the test's pods gone")


def job(name: str, workers: int, cpu: str, priority_class: str, grace: int = 0) -> Obj:
    """An opted-in PyTorchJob (1 master + ``workers``) of ``priority_class``, its pods stopping within ``grace``."""
    obj = torch_job(name, workers, cpu)
    for replica in obj["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"].update(priorityClassName=priority_class, terminationGracePeriodSeconds=grace)
    return obj


def solo(name: str, cpu: str, priority_class: str) -> Obj:
    """A one-pod gang: a PyTorchJob with its master only."""
    obj = job(name, 0, cpu, priority_class)
    del obj["spec"]["pytorchReplicaSpecs"]["Worker"]
    return obj


def plain(kube: Kube, ns: str, name: str, cpu: str, priority_class: str, node: str, **labels: str) -> Obj:
    """A pod that is no gang member (the namespace is not opted in), placed on ``node`` by the scheduler."""
    body = {"metadata": {"name": name, "labels": labels},
            "spec": {"priorityClassName": priority_class, "terminationGracePeriodSeconds": 0,
                     "nodeSelector": {"kubernetes.io/hostname": node},
                     "containers": [{"name": "c", "image": "registry.example.com/app:1.0",
                                     "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}}
    return kube.api_client.sanitize_for_serialization(kube.core.create_namespaced_pod(ns, body))


def disruption(pod: Obj) -> Obj:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "DisruptionTarget"),
                {})


class PodLog:
    """Every version of every pod of a namespace a watch sees, with when it saw it: who was marked, deleted,
    released, in which order."""

    def __init__(self, kube: Kube, ns: str) -> None:
        self._kube, self._ns = kube, ns
        self._lock = threading.Lock()
        self.seen: list[tuple[float, str, Obj]] = []  # (monotonic time, watch event type, pod)
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with contextlib.suppress(Exception):
            for event in self._watch.stream(self._kube.core.list_namespaced_pod, self._ns, timeout_seconds=300,
                                            _preload_content=False):
                change = json.loads(event) if isinstance(event, (str, bytes)) else event
                pod = change["object"]
                if not isinstance(pod, dict):
                    pod = self._kube.api_client.sanitize_for_serialization(pod)
                with self._lock:
                    self.seen.append((time.monotonic(), change["type"], pod))

    def stop(self) -> None:
        self._watch.stop()

    def versions(self, uid: str) -> list[tuple[float, str, Obj]]:
        with self._lock:
            return [entry for entry in self.seen if entry[2]["metadata"]["uid"] == uid]

    def marked_then_deleted(self, uid: str) -> bool:
        """The pod carried our DisruptionTarget condition before (or when) it was marked for deletion."""
        versions = self.versions(uid)
        marked = next((i for i, (_, _, p) in enumerate(versions)
                       if disruption(p).get("reason") == PREEMPTION_REASON and disruption(p).get("status") == "True"),
                      None)
        deleting = next((i for i, (_, kind, p) in enumerate(versions)
                         if p["metadata"].get("deletionTimestamp") or kind == "DELETED"), None)
        return marked is not None and deleting is not None and marked <= deleting

    def gone_at(self, uid: str) -> float | None:
        return next((at for at, kind, _ in self.versions(uid) if kind == "DELETED"), None)

    def released_at(self, uid: str) -> float | None:
        """When the watch first saw the pod without our gate (after it was seen with it)."""
        versions = self.versions(uid)
        if not versions or not gated(versions[0][2]):
            return None
        return next((at for at, _, p in versions if not gated(p)), None)

    def marked(self) -> set[str]:
        """The names of the pods that ever carried a DisruptionTarget condition."""
        with self._lock:
            return {p["metadata"]["name"] for _, _, p in self.seen if disruption(p)}


@contextlib.contextmanager
def pod_log(kube: Kube, ns: str) -> Iterator[PodLog]:
    log = PodLog(kube, ns)
    try:
        yield log
    finally:
        log.stop()


def members(kube: Kube, ns: str, name: str) -> list[Obj]:
    return kube.pods(ns, f"{JOB_NAME}={name}")


def running_gang(kube: Kube, ns: str, name: str, size: int) -> list[Obj]:
    return wait_pods(kube, ns, lambda pods: len(pods) == size and all(map(running, pods)), f"{name} running",
                     f"{JOB_NAME}={name}")


def uids(pods: list[Obj]) -> set[str]:
    return {p["metadata"]["uid"] for p in pods}


def reason_of(kube: Kube, ns: str, name: str) -> str:
    return str(((podgroup(kube.api_client, ns, name) or {}).get("status") or {}).get("reason", ""))


def preemption_counts(controller: Controller) -> tuple[float, float, float]:
    """From the controller's /metrics as Prometheus scrapes it: preemptions started, pods preempted of gangs, other
    pods preempted (the controller is the module's: a test compares before and after)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{controller.health_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples = {(s.name, s.labels.get("kind", "")): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    return (samples[("kubenexus_controller_preemptions_total", "")],
            samples[("kubenexus_controller_preempted_pods_total", "gang")],
            samples[("kubenexus_controller_preempted_pods_total", "pod")])


def counted_since(controller: Controller, before: tuple[float, float, float]) -> tuple[float, ...]:
    return tuple(now - then for now, then in zip(preemption_counts(controller), before, strict=True))


def test_a_gang_of_higher_priority_evicts_a_lower_gang_whole_and_starts(kube: Kube, ns: str,
                                                                        controller: Controller) -> None:
    # batch (priority 100): 4 x 3 cpu, one member per node. urgent (1000): 2 x 3 cpu needs two nodes with 3 cpu
    # free: only with batch gone, and batch goes whole (all four members, not the two urgent's plan uses).
    with pod_log(kube, ns) as log:
        kube.create(ns, job("batch", 3, "3", "low"))
        victims = running_gang(kube, ns, "batch", 4)
        before = preemption_counts(controller)
        kube.create(ns, job("urgent", 1, "3", "high"))
        winners = running_gang(kube, ns, "urgent", 2)
        assert counted_since(controller, before) == (1, 4, 0), "one preemption, of the 4 members of a gang"
        wait_for(lambda: all(log.gone_at(uid) for uid in uids(victims)), TIMEOUT, "every batch member gone")
        assert all(log.marked_then_deleted(uid) for uid in uids(victims)), "DisruptionTarget before the deletion"
        # the preemptor was released only once its victims were gone
        last_gone = max(t for uid in uids(victims) if (t := log.gone_at(uid)) is not None)
        first_release = min(t for uid in uids(winners) if (t := log.released_at(uid)) is not None)
        assert first_release >= last_gone, (first_release, last_gone)
    assert log.marked() == {p["metadata"]["name"] for p in victims}, "nothing but batch was touched"
    preempting = wait_event(kube, ns, "PyTorchJob", "urgent", "GangPreempting")
    assert any(f"gang {ns}/batch" in note and "priority 100" in note for note in preempting), preempting
    preempted = wait_event(kube, ns, "PyTorchJob", "batch", "GangPreempted")
    assert any(f"{ns}/urgent" in note for note in preempted), preempted
    told = condition(podgroup(kube.api_client, ns, "batch"), "Preempted")
    assert told.get("status") == "True" and f"{ns}/urgent (priority 1000)" in told.get("message", ""), told
    # whatever batch's operator does next, batch never runs in part while urgent holds the room
    stays(lambda: not any(running(p) for p in members(kube, ns, "batch")), "no batch member runs")


def test_no_preemption_when_futile_at_equal_priority_or_with_preemption_policy_never(kube: Kube, ns: str) -> None:
    # On every node a 1 cpu pod of priority 2000 (no gang's victim) and a member of batch (100, 3 cpu).
    for node in NODES:
        plain(kube, ns, f"system-{node}", "1", "critical", node)
    kube.create(ns, job("batch", 3, "3", "low"))
    victims = running_gang(kube, ns, "batch", 4)
    # huge (1000): 4 x 4 cpu: each node's allocatable, but 1 cpu of each stays with the priority-2000 pods;
    # peer (100, batch's own priority) and polite (1000, preemptionPolicy Never): 2 x 3 cpu, room only batch has.
    kube.create(ns, job("huge", 3, "4", "high"))
    kube.create(ns, job("peer", 1, "3", "low"))
    kube.create(ns, job("polite", 1, "3", NEVER))
    wait_for(lambda: all(members(kube, ns, n) and all(gated(p) for p in members(kube, ns, n))
                         and reason_of(kube, ns, n) for n in ("huge", "peer", "polite")),
             TIMEOUT, "the three gangs gated, each PodGroup with its reason")

    def untouched() -> bool:
        pods = kube.pods(ns)
        return uids(victims) <= uids(pods) and not any(disruption(p) for p in pods)

    stays(untouched, lambda: f"something preempted: {[(p['metadata']['name'], disruption(p)) for p in kube.pods(ns)]}")
    assert "preempting every pod of lower priority than 1000 would not make room" in reason_of(kube, ns, "huge")
    assert "its preemptionPolicy is Never" in reason_of(kube, ns, "polite")
    assert "preempt" not in reason_of(kube, ns, "peer"), reason_of(kube, ns, "peer")
    for name in ("huge", "peer", "polite"):
        assert (podgroup(kube.api_client, ns, name) or {})["status"]["phase"] == "Waiting", name


def test_single_pod_victims_are_chosen_minimally(kube: Kube, ns: str, controller: Controller) -> None:
    # p-0: four 1 cpu pods (100); p-1: 3 cpu + 1 cpu (100); p-2: 3 cpu (50) + 1 cpu (100); p-3: 4 cpu (2000).
    # A one-pod gang of 3 cpu (1000) could go to p-0 (three victims), p-1 or p-2 (one each): kube-scheduler's
    # order takes the plan whose highest-priority victim is lowest, so p-2's 3 cpu pod of priority 50, alone.
    for i in range(4):
        plain(kube, ns, f"small-{i}", "1", "low", "p-0")
    plain(kube, ns, "big-100", "3", "low", "p-1")
    plain(kube, ns, "side-1", "1", "low", "p-1")
    plain(kube, ns, "big-50", "3", "lowest", "p-2")
    plain(kube, ns, "side-2", "1", "low", "p-2")
    plain(kube, ns, "system", "4", "critical", "p-3")
    wait_pods(kube, ns, lambda pods: len(pods) == 9 and all(map(running, pods)), "the plain pods running")
    before = preemption_counts(controller)
    with pod_log(kube, ns) as log:
        kube.create(ns, solo("urgent", "3", "high"))
        [winner] = running_gang(kube, ns, "urgent", 1)
    assert winner["spec"]["nodeName"] == "p-2"
    assert log.marked() == {"big-50"}
    assert counted_since(controller, before) == (1, 0, 1), "one preemption, of one pod that is no gang's"
    assert {p["metadata"]["name"] for p in kube.pods(ns) if not p["metadata"]["name"].startswith("urgent")} == {
        *(f"small-{i}" for i in range(4)), "big-100", "side-1", "side-2", "system"}


def test_a_pod_no_disruption_budget_protects_is_preferred(kube: Kube, ns: str) -> None:
    # older (p-0) and newer (p-1): 3 cpu each, priority 100; p-2 and p-3 are full of priority 2000. Of two
    # otherwise equal victims the newer goes first, unless a PodDisruptionBudget allows it no disruption: here
    # newer is protected (minAvailable 1), so older goes.
    plain(kube, ns, "older", "3", "low", "p-0", app="older")
    plain(kube, ns, "newer", "3", "low", "p-1", app="newer")
    for node in ("p-2", "p-3"):
        plain(kube, ns, f"system-{node}", "4", "critical", node)
    client.PolicyV1Api(kube.api_client).create_namespaced_pod_disruption_budget(ns, {
        "metadata": {"name": "newer"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "newer"}}}})
    wait_pods(kube, ns, lambda pods: len(pods) == 4 and all(map(running, pods)), "the plain pods running")
    wait_for(lambda: (client.PolicyV1Api(kube.api_client).read_namespaced_pod_disruption_budget(
        "newer", ns).status.current_healthy == 1), TIMEOUT, "the budget's status counts newer")
    with pod_log(kube, ns) as log:
        kube.create(ns, solo("urgent", "3", "high"))
        [winner] = running_gang(kube, ns, "urgent", 1)
    assert winner["spec"]["nodeName"] == "p-0" and log.marked() == {"older"}


def test_victims_with_a_grace_period_hold_their_room_for_the_preemptor(kube: Kube, ns: str) -> None:
    # slow (100): 4 x 3 cpu, stopping within 2 s. urgent (1000): 4 x 3 cpu, every node. While slow's members
    # stop, urgent is Preempting and gated; sneaky (100, 1 x 2 cpu) arrives meanwhile and must not take the room
    # the victims free: urgent runs whole first.
    with pod_log(kube, ns) as log:
        kube.create(ns, job("slow", 3, "3", "low", grace=GRACE))
        victims = running_gang(kube, ns, "slow", 4)
        kube.create(ns, job("urgent", 3, "3", "high"))

        def preempting() -> Obj | None:
            status = (podgroup(kube.api_client, ns, "urgent") or {}).get("status") or {}
            return status if status.get("phase") == "Preempting" else None

        status = wait_for(preempting, TIMEOUT, lambda: f"urgent Preempting: {podgroup(kube.api_client, ns, 'urgent')}")
        assert status["preemption"]["round"] == 1 and status["preemption"]["startedAt"]
        assert status["preemption"]["victims"] == [
            {"kind": "Gang", "namespace": ns, "name": "slow", "priority": CLASSES["low"], "pods": 4}]
        assert status["waitingFor"] == "preempted pods to go"
        kube.create(ns, solo("sneaky", "2", "low"))
        assert all(gated(p) for p in members(kube, ns, "urgent")), "gated while its victims stop"
        winners = running_gang(kube, ns, "urgent", 4)
        last_gone = max(t for uid in uids(victims) if (t := log.gone_at(uid)) is not None)
        first_release = min(t for uid in uids(winners) if (t := log.released_at(uid)) is not None)
        assert first_release >= last_gone
    sneaky = members(kube, ns, "sneaky")
    assert sneaky and all(gated(p) for p in sneaky), "sneaky never took the held room"

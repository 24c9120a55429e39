"""What each operator does with a gang preempted for a higher-priority gang (issue 23, item 7), end to end on the
local cluster: the operator recreates the members, which come back through admission gated and wait whole while
the preemptor holds the room (and start whole once it is gone), or it fails the job and nothing of it runs; Jobs
count the preempted pods toward ``backoffLimit`` unless a ``podFailurePolicy`` rule ignores ``DisruptionTarget``.

One local cluster with the scheduler's preemption on, the real webhook and a gate controller. Every scenario (a
"lane") has a node of its own, 2 cpu, labelled and tainted ``test.kubenexus.io/lane=<lane>``, and a namespace. Its
victim root is created at the default priority (0) with every pod template pinned to that node, and runs whole;
then a PyTorchJob of PriorityClass ``urgent`` (1000) whose two 1-cpu members need the whole node preempts it: every
member of the victim gang is marked ``DisruptionTarget`` (reason PreemptionByGangAdmission) and deleted. The
reaction expected of each kind is its real operator's, which its emulator follows (the upstream code is named in
``workloads/<kind>/emulator.py`` and ``cluster/operators/job.py``); docs/concepts/preemption-by-kind.md tabulates
them. Sizes are worked from the fixtures of tests/support/roots.py.

A deleted pod stays Running for 1 s while its containers stop (a real one takes up to its grace period), so every
operator sees its members terminating, as the training operator's failure counting depends on. The lanes run at
once, one thread each, started by a module fixture; each test waits for its lane and reports what went wrong
there. Pods are read from one watch of all pods (every version: what happened to a pod that is gone), roots and
Jobs from the API, every half second.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines

from cluster.local import LocalCluster, NodeSpec
from controller.run import Controller
from gang.config import Config
from kube.client import new_api_client
from tests.support.contract import GROUP, MIN_AVAILABLE
from tests.support.events import about, list_events
from tests.support.gang_pods import JOB_NAME, describe, gated, running, torch_job
from tests.support.kube import Kube, admitted
from tests.support.podgroups import condition, install_crd, podgroups
from tests.support.polling import stays, wait_for
from tests.support.roots import (
    OPTED_IN,
    Obj,
    batch_job,
    jobset,
    lws,
    mpijob,
    pytorchjob,
    raycluster,
    rayjob,
    rayservice,
    spark_app,
    tfjob,
    training_job,
    training_runtime,
    trainjob,
    workflow,
)

pytestmark = pytest.mark.e2e

LANE = "test.kubenexus.io/lane"
URGENT = "urgent"  # the preemptor's PriorityClass
PREEMPTOR = "preemptor"
VICTIM = "victim"
REASON = "PreemptionByGangAdmission"  # the DisruptionTarget reason of pods preempted for a gang
RECREATED, FAILED = "recreated", "failed"
TIMEOUT = 30.0
BACKED_OFF = 60.0  # Jobs replace failed pods after 10 s x 2^(failures - 1): 20 s for two
POLL = 0.5  # API reads of a lane
IGNORE_DISRUPTIONS = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}


@dataclass(frozen=True)
class Victim:
    root: Obj  # the opted-in root, as created
    subject: Obj  # what its operator fails (the root, or the run or Job it made)


@dataclass(frozen=True)
class Lane:
    name: str
    build: Callable[[Callable[[Obj], Obj]], Victim]  # creates the victim with the lane's ``create``
    reaction: str  # RECREATED or FAILED
    size: int  # members of the victim's gangs, all running before the preemption and, recreated, after it
    waiting: int | None = None  # members back (gated) while it waits again, when fewer than ``size``: a first stage
    failures: int | None = None  # pod failures its Jobs count (status.failed, summed), for Job-based roots
    reason: str = ""  # in the operator's word of failure (FAILED)


def one(obj: Obj) -> Callable[[Callable[[Obj], Obj]], Victim]:
    def build(create: Callable[[Obj], Obj]) -> Victim:
        created = create(obj)
        return Victim(created, created)

    return build


def with_policy(job_spec: Obj, **fields: Any) -> Obj:
    """A Job spec ignoring disruptions (``podFailurePolicy``, which needs ``restartPolicy: Never``)."""
    assert job_spec["template"]["spec"]["restartPolicy"] == "Never"
    return {**job_spec, **fields, "podFailurePolicy": copy.deepcopy(IGNORE_DISRUPTIONS)}


def spark_on_failure() -> Obj:
    app = spark_app(VICTIM, OPTED_IN)
    app["spec"]["restartPolicy"] = {"type": "OnFailure", "onFailureRetries": 3, "onFailureRetryInterval": 1}
    return app


def scheduled_spark(create: Callable[[Obj], Obj]) -> Victim:
    """The schedule carries the opt-in; its run is created as its controller would (none runs here)."""
    template = spark_app(VICTIM, {})["spec"]
    schedule = create({"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "ScheduledSparkApplication",
                       "metadata": {"name": VICTIM, "annotations": dict(OPTED_IN)},
                       "spec": {"schedule": "@daily", "concurrencyPolicy": "Forbid", "template": template}})
    run = create({"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
                  "metadata": {"name": f"{VICTIM}-1", "ownerReferences": [controller_ref(schedule)]},
                  "spec": copy.deepcopy(template)})
    return Victim(schedule, run)


def restarting(kind: str, policy: str | None) -> Obj:
    """A training job whose replicas have ``restartPolicy`` ``policy`` (None: unset, the kind's default)."""
    job = training_job(kind, VICTIM, OPTED_IN)
    for replica in next(iter(job["spec"].values())).values():
        replica.pop("restartPolicy")
        if policy is not None:
            replica["restartPolicy"] = policy
    return job


def jobset_ignoring() -> Obj:
    root = jobset(VICTIM, OPTED_IN)
    for rjob in root["spec"]["replicatedJobs"]:
        rjob["template"]["spec"] = with_policy(rjob["template"]["spec"])
    return root


def trainjob_ignoring(create: Callable[[Obj], Obj]) -> Victim:
    """Two nodes (two failures: 20 s of back-off); the runtime's trainer Job ignores disruptions."""
    runtime = training_runtime("torch", initializer=False)
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    node["template"]["spec"] = with_policy(node["template"]["spec"])
    create(runtime)
    train = trainjob(VICTIM, OPTED_IN, "torch")
    train["spec"]["trainer"]["numNodes"] = 2
    created = create(train)
    return Victim(created, created)


def job_ignoring() -> Obj:
    """Two pods, backoffLimit 0: one counted failure would fail it."""
    job = batch_job(VICTIM, OPTED_IN, parallelism=2, completions=2)
    job["spec"] = with_policy(job["spec"], backoffLimit=0)
    return job


def cron_job(create: Callable[[Obj], Obj]) -> Victim:
    """The CronJob carries the opt-in and the rule in its jobTemplate; its Job is created as its controller would
    (none runs here): the jobTemplate's spec, owned by the CronJob."""
    template = job_ignoring()["spec"]
    cron = create({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": VICTIM, "annotations": dict(
        OPTED_IN)}, "spec": {"schedule": "@daily", "jobTemplate": {"spec": template}}})
    job = create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": f"{VICTIM}-29000000", "ownerReferences": [controller_ref(cron)]}, "spec": copy.deepcopy(template)})
    return Victim(cron, job)


def controller_ref(owner: Obj) -> Obj:
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


LANES = [
    # the driver deleted: FAILING; restartPolicy Never (the default): FAILED. Driver + 2 executors.
    Lane("SparkApplication", one(spark_app(VICTIM, OPTED_IN)), FAILED, 3),
    # OnFailure: resubmitted, a new driver (the executors come once it runs)
    Lane("SparkApplication-OnFailure", one(spark_on_failure()), RECREATED, 3, waiting=1),
    Lane("ScheduledSparkApplication", scheduled_spark, FAILED, 3),  # its run, as a SparkApplication
    # a running replica deleted counts as failed; replicas that restart (the fixtures': OnFailure) make the job
    # Restarting, and the missing pods are created again
    Lane("PyTorchJob", one(pytorchjob(VICTIM, OPTED_IN)), RECREATED, 3),
    Lane("PaddleJob", one(training_job("PaddleJob", VICTIM, OPTED_IN)), RECREATED, 4),
    Lane("JAXJob", one(training_job("JAXJob", VICTIM, OPTED_IN)), RECREATED, 2),
    # JAXJob as commonly written: no restartPolicy, its default Never; the replica left short fails the job
    Lane("JAXJob-Never", one(restarting("JAXJob", None)), FAILED, 2, reason="JAXJobFailed"),
    # a failed replica fails a TFJob that is not restarting yet, an XGBoostJob unless it restarts on ExitCode
    Lane("TFJob", one(tfjob(VICTIM, OPTED_IN)), FAILED, 4, reason="TFJobFailed"),
    Lane("XGBoostJob", one(training_job("XGBoostJob", VICTIM, OPTED_IN)), FAILED, 3, reason="XGBoostJobFailed"),
    Lane("XGBoostJob-ExitCode", one(restarting("XGBoostJob", "ExitCode")), RECREATED, 3),
    # workers created again; the launcher Job counts its deleted pod and replaces it after its back-off
    Lane("MPIJob", one(mpijob(VICTIM, OPTED_IN)), RECREATED, 3, failures=1),
    # each Job counts its deleted pods (2 + 2 + 1, within backoffLimit 6) and replaces them after its back-off
    Lane("JobSet", one(jobset(VICTIM, OPTED_IN)), RECREATED, 5, failures=5),
    Lane("JobSet-Ignore", one(jobset_ignoring()), RECREATED, 5, failures=0),
    Lane("TrainJob-Ignore", trainjob_ignoring, RECREATED, 2, failures=0),
    # KubeRay replaces missing pods: head + 2 small workers + 1 replica of a 2-host group
    Lane("RayCluster", one(raycluster(VICTIM, OPTED_IN)), RECREATED, 5),
    Lane("RayJob", one(rayjob(VICTIM, OPTED_IN)), RECREATED, 5),
    Lane("RayService", one(rayservice(VICTIM, OPTED_IN)), RECREATED, 5),
    # RecreateGroupOnPodRestart: each group (a gang: leader + 2 workers) recreated; two groups
    Lane("LeaderWorkerSet", one(lws(VICTIM, OPTED_IN)), RECREATED, 6),
    # 3 deleted pods counted: past backoffLimit 2, the Job fails
    Lane("Job", one(batch_job(VICTIM, OPTED_IN)), FAILED, 3, failures=3, reason="BackoffLimitExceeded"),
    Lane("Job-Ignore", one(job_ignoring()), RECREATED, 2, failures=0),
    Lane("CronJob-Ignore", cron_job, RECREATED, 2, failures=0),
    # a node whose pod is gone errors ("pod deleted"), failing its step ("child '<node>' failed") and the workflow;
    # Argo never creates that pod again
    Lane("Workflow", one(workflow(VICTIM, {**OPTED_IN, MIN_AVAILABLE: "2"})), FAILED, 2, reason="child"),
]


def lane_node(index: int, lane: Lane) -> NodeSpec:
    return NodeSpec(f"lane-{index}", cpu="2", memory="4Gi", labels=((LANE, lane.name),),
                    taints=({"key": LANE, "value": lane.name, "effect": "NoSchedule"},))


def pin(obj: Obj, lane: str) -> Obj:
    """``obj`` with every pod it makes kept to the lane's node: a nodeSelector and a toleration of its taint in every
    pod template (a mapping with ``containers``), in Spark's driver and executor, and for all of a Workflow's."""
    obj = copy.deepcopy(obj)

    def onto(spec: Obj) -> None:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), LANE: lane}
        spec["tolerations"] = [*(spec.get("tolerations") or []),
                               {"key": LANE, "operator": "Equal", "value": lane, "effect": "NoSchedule"}]

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("containers"), list):
                onto(value)
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(obj)
    spec = obj.get("spec") or {}
    if obj["kind"] == "SparkApplication":
        onto(spec["driver"])
        onto(spec["executor"])
    elif obj["kind"] == "Workflow":
        onto(spec)
    return obj


def preemptor(lane: str) -> Obj:
    """1 master + 1 worker of 1 cpu, class ``urgent``: the lane node's 2 cpu, so it fits only once nothing else is
    there."""
    job = torch_job(PREEMPTOR, 1, "1")
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        spec = replica["template"]["spec"]
        del spec["nodeSelector"]  # torch_job's pool: the lane's instead
        spec["priorityClassName"] = URGENT
    return pin(job, lane)


# --- what the test sees ------------------------------------------------------------------------------------------


class Pods:
    """Every pod version one watch of all pods delivers: the pods that exist, per namespace, and each pod's versions
    by uid, so that what happened to a pod that is gone can be told."""

    def __init__(self, core: client.CoreV1Api) -> None:
        self._lock = threading.Lock()
        self._now: dict[str, dict[str, Obj]] = {}
        self._versions: dict[str, list[Obj]] = {}
        self._gone: set[str] = set()
        self._ended = ""  # why the watch ended
        self._response = core.list_pod_for_all_namespaces(watch=True, timeout_seconds=1800,
                                                          _preload_content=False)
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        try:
            for line in iter_resp_lines(self._response):
                self._apply(json.loads(line))
            self._ended = "the stream ended"
        except Exception as exc:  # at the latest when the cluster stops
            self._ended = repr(exc)

    def _apply(self, event: Obj) -> None:
        pod, kind = event.get("object") or {}, event.get("type")
        meta = pod.get("metadata") or {}
        if kind not in ("ADDED", "MODIFIED", "DELETED") or "uid" not in meta:
            return
        with self._lock:
            self._versions.setdefault(meta["uid"], []).append(pod)
            if kind == "DELETED":
                self._gone.add(meta["uid"])
                self._now.get(meta["namespace"], {}).pop(meta["uid"], None)
            else:
                self._now.setdefault(meta["namespace"], {})[meta["uid"]] = pod

    def of(self, ns: str) -> list[Obj]:
        assert not self._ended, f"the watch of pods ended: {self._ended}"
        with self._lock:
            return sorted(self._now.get(ns, {}).values(), key=lambda p: p["metadata"]["name"])

    def gone(self, uid: str) -> bool:
        with self._lock:
            return uid in self._gone

    def disrupted(self, uid: str) -> bool:
        """Some version of the pod carried a DisruptionTarget condition for a gang preemption."""
        with self._lock:
            versions = list(self._versions.get(uid, ()))
        return any(c.get("type") == "DisruptionTarget" and c.get("status") == "True" and c.get("reason") == REASON
                   for pod in versions for c in (pod.get("status") or {}).get("conditions") or [])


def all_of(pods: list[Obj], count: int, state: Callable[[Obj], bool]) -> list[Obj] | None:
    """``pods`` when there are ``count`` of them, each in ``state``."""
    return pods if len(pods) == count and all(state(p) for p in pods) else None


def uids(pods: list[Obj]) -> set[str]:
    return {p["metadata"]["uid"] for p in pods}


def read(kube: Kube, ns: str, obj: Obj) -> Obj:
    """``obj`` (a Job, or a custom resource) as stored now."""
    name = obj["metadata"]["name"]
    if obj["kind"] == "Job":
        return dict(json.loads(kube.batch.read_namespaced_job(name, ns, _preload_content=False).data))
    return kube.get(ns, obj["apiVersion"], obj["kind"], name)


def failure(obj: Obj) -> str:
    """The operator's own word that ``obj`` failed, and why ("" while it has not): a Failed condition (Kubeflow jobs,
    batch Jobs, JobSets, TrainJobs), Spark's application state FAILED, Argo's phase Failed."""
    status = obj.get("status") or {}
    found = next((f"{c.get('reason')}: {c.get('message')}" for c in status.get("conditions") or []
                  if c.get("type") == "Failed" and c.get("status") == "True"), "")
    state = status.get("applicationState") or {}
    if state.get("state") == "FAILED":
        found = f"FAILED: {state.get('errorMessage', '')}"
    if status.get("phase") == "Failed":
        found = f"Failed: {status.get('message', '')}"
    return found


def job_failures(kube: Kube, ns: str) -> int:
    return sum((j.get("status") or {}).get("failed", 0) for j in kube.jobs(ns))


def notes(kube: Kube, ns: str, obj: Obj, reason: str) -> list[str]:
    return [e.get("note", "") for e in about(list_events(kube.api_client, ns), obj["kind"], obj["metadata"]["name"],
                                            reason)]


# --- one lane ------------------------------------------------------------------------------------------------------


def run_lane(kube: Kube, pods: Pods, lane: Lane) -> None:
    ns = kube.namespace()
    victim = lane.build(lambda obj: kube.create(ns, pin(obj, lane.name)))

    def members() -> list[Obj]:
        """The victim's gang members that are not on their way out."""
        return [p for p in pods.of(ns) if GROUP in (labels := p["metadata"].get("labels") or {})
                and labels.get(JOB_NAME) != PREEMPTOR and not p["metadata"].get("deletionTimestamp")]

    def theirs() -> list[Obj]:
        return [p for p in pods.of(ns) if (p["metadata"].get("labels") or {}).get(JOB_NAME) == PREEMPTOR]

    def seen() -> str:
        return f"pods: {describe(pods.of(ns))}"

    first = wait_for(lambda: all_of(members(), lane.size, running), TIMEOUT,
                     lambda: f"the victim running whole; {seen()}")
    assert {p["spec"].get("priority", 0) for p in first} == {0}
    groups = sorted({p["metadata"]["labels"][GROUP] for p in first})

    def preempted() -> dict[str, Obj]:
        """The Preempted condition of each of the victim's PodGroups that has one."""
        found = podgroups(kube.api_client, ns)
        return {g: told for g in groups if (told := condition(found.get(g), "Preempted"))}

    def all_preempted() -> dict[str, Obj] | None:
        found = preempted()
        return found if sorted(found) == groups else None

    kube.create(ns, preemptor(lane.name))
    wait_for(lambda: all(pods.gone(uid) for uid in uids(first)), TIMEOUT,
             lambda: f"every member of the victim gone; {seen()}")
    assert [p["metadata"]["name"] for p in first if not pods.disrupted(p["metadata"]["uid"])] == [], \
        f"every member marked DisruptionTarget ({REASON})"
    told = wait_for(lambda: notes(kube, ns, victim.root, "GangPreempted"), TIMEOUT,
                    f"GangPreempted on {victim.root['kind']} {VICTIM}", interval=POLL)
    assert all(f"preempted by gang {ns}/{PREEMPTOR}" in note for note in told), told
    wait_for(lambda: all_of(theirs(), 2, running), TIMEOUT, lambda: f"the preemptor running; {seen()}")
    if lane.failures is not None:
        wait_for(lambda: job_failures(kube, ns) == lane.failures, TIMEOUT,
                 lambda: f"{lane.failures} pod failure(s) counted: {job_failures(kube, ns)}", interval=POLL)

    if lane.reaction == FAILED:
        why = wait_for(lambda: failure(read(kube, ns, victim.subject)), TIMEOUT,
                       lambda: f"{victim.subject['kind']} failed by its operator: {read(kube, ns, victim.subject)}",
                       interval=POLL)
        assert lane.reason in why, why
        stays(lambda: not any(running(p) for p in pods.of(ns) if p["metadata"]["uid"] not in uids(theirs())),
              lambda: f"nothing of the failed {victim.subject['kind']} runs; {seen()}")
        return

    back = wait_for(lambda: all_of(members(), lane.waiting or lane.size, lambda p: gated(p) and not uids([p]) & uids(
        first)), BACKED_OFF, lambda: f"the victim's members back, gated; {seen()}")
    stays(lambda: uids(members()) == uids(back) and all(gated(p) for p in members())
          and all(running(p) for p in theirs()), lambda: f"the victim waiting whole while the preemptor runs; {seen()}")
    conditions = wait_for(all_preempted, TIMEOUT, lambda: f"every gang of the victim told preempted: {preempted()}",
                          interval=POLL)
    assert all(c["status"] == "True" and f"preempted by gang {ns}/{PREEMPTOR}" in c["message"]
               for c in conditions.values()), conditions
    kube.custom.delete_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs", PREEMPTOR)
    wait_for(lambda: all_of(members(), lane.size, running), TIMEOUT,
             lambda: f"the victim running whole again; {seen()}")
    wait_for(lambda: not preempted(), TIMEOUT, lambda: f"the victim told preempted no more: {preempted()}",
             interval=POLL)
    if lane.failures is not None:
        assert job_failures(kube, ns) == lane.failures, "no more failures counted"
    assert not failure(read(kube, ns, victim.subject))


# --- the module ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    nodes = [lane_node(i, lane) for i, lane in enumerate(LANES)] + [NodeSpec("spare", cpu="8", memory="16Gi")]
    with LocalCluster(nodes=list(nodes), workdir=str(tmp_path_factory.mktemp("preemption-operators"))) as local:
        local.run_components(preemption=True, stop_seconds=1.0)
        yield local


@pytest.fixture(scope="module")
def kube(cluster: LocalCluster, workdir: Any, tls: Any) -> Iterator[Kube]:
    with admitted(cluster, workdir, tls) as admin:
        install_crd(admin.api_client)
        admin.ensure_namespace("kubenexus-system")
        client.SchedulingV1Api(admin.api_client).create_priority_class({"metadata": {"name": URGENT}, "value": 1000})
        api = new_api_client(cluster.kubeconfig, len(LANES) + 8, 3)  # a connection per lane
        yield Kube(api)
        api.close()


@pytest.fixture(scope="module")
def reactions(kube: Kube, controller_kubeconfig: str) -> Iterator[dict[str, Future[None]]]:
    pods = Pods(kube.core)
    controller = Controller(new_api_client(controller_kubeconfig, 32, 3), Config(), port=0).start()
    try:
        with ThreadPoolExecutor(len(LANES)) as pool:
            yield {lane.name: pool.submit(run_lane, kube, pods, lane) for lane in LANES}
    finally:
        controller.stop()


@pytest.mark.parametrize("lane", LANES, ids=[lane.name for lane in LANES])
def test_a_preempted_gang_meets_its_operators_reaction(reactions: dict[str, Future[None]], lane: Lane) -> None:
    """The victim ran whole; preempted, all its members were marked DisruptionTarget and went; then its operator's
    reaction: members recreated, gated, waiting whole while the preemptor runs and running whole once it is gone,
    or the job failed with nothing of it running; Jobs count the failures as their podFailurePolicy says."""
    reactions[lane.name].result()

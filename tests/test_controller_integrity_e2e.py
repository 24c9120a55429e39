"""A released gang ends whole or not at all, end to end on the local cluster, against other actors.

One local cluster of four 4-cpu nodes with the real webhook registered (an admin may remove the gate: it is in
``gateRemovers``) and a gate controller under its service account. The emulated default scheduler places ordinary
pods; gang members are addressed to ``kubenexus-scheduler``, which this test plays itself, binding released members
to their planned nodes through the Binding API when it chooses, so that the races a real cluster has (another
scheduler's pod landing on a planned node first, an admin releasing one member, pods escaping admission) happen
deterministically. Expectations come from the scenario (sizes and capacities chosen here), never from the product.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from cluster.local import ADMIN, LocalCluster, NodeSpec
from controller import run as controller_run
from controller.run import Controller
from gang.config import Config
from kube.client import new_api_client
from kubenexus.local_webhook import LocalWebhook, register
from tests.support.contract import CONTROLLER, GATE, GROUP
from tests.support.contract import PLANNED_NODE as PLANNED
from tests.support.gang_pods import (
    JOB_NAME,
    LEASE,
    describe,
    gated,
    name_of,
    planned,
    running,
    torch_job,
    wait_event,
)
from tests.support.kube import WEBHOOK_IDENTITY, Kube
from tests.support.polling import stays, wait_for
from tests.support.roots import OPTED_IN, jobset, lws, raycluster, spark_app, tfjob

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]
TIMEOUT = 30.0
NODES = [f"n-{i}" for i in range(4)]
BIND_TIMEOUT = 4.0
WEB = "web"  # where the ordinary pods of the default scheduler live
ROOT_RESOURCES = [("kubeflow.org", "v1", "pytorchjobs"), ("kubeflow.org", "v1", "tfjobs"),
                  ("sparkoperator.k8s.io", "v1beta2", "sparkapplications"), ("ray.io", "v1", "rayclusters"),
                  ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"), ("jobset.x-k8s.io", "v1alpha2", "jobsets")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    nodes = [NodeSpec(n, cpu="4", memory="16Gi", labels=(("pool", "cpu"),)) for n in NODES]  # torch_job's pool
    with LocalCluster(nodes=nodes, workdir=str(tmp_path_factory.mktemp("integrity-e2e"))) as running_:
        running_.run_components(scheduler_names=("default-scheduler",))  # the gang scheduler is this test
        yield running_


@pytest.fixture(scope="module")
def webhook(cluster: LocalCluster, workdir: Any, tls: Any) -> Iterator[LocalWebhook]:
    hook = LocalWebhook(workdir, tls, cluster.add_user(WEBHOOK_IDENTITY),
                        {"gateRemovers": [CONTROLLER, ADMIN.username]})
    try:
        hook.wait_ready()
        yield hook
    finally:
        hook.stop()


@pytest.fixture(scope="module")
def kube(cluster: LocalCluster, webhook: LocalWebhook) -> Iterator[Kube]:
    from kubernetes import config

    api = Kube(config.new_client_from_config(cluster.kubeconfig))
    register(client.AdmissionregistrationV1Api(api.api_client), webhook)
    for namespace in (LEASE[0], WEB):
        api.core.create_namespace({"metadata": {"name": namespace}})
    yield api


@pytest.fixture
def controller(cluster: LocalCluster, kube: Kube) -> Iterator[Controller]:
    api = new_api_client(cluster.add_user(CONTROLLER), 32, 3)
    started = Controller(api, Config(bind_timeout_seconds=BIND_TIMEOUT), port=0).start()
    yield started
    started.stop()


@pytest.fixture
def ns(kube: Kube) -> Iterator[str]:
    """A fresh namespace; afterwards its jobs and every pod of it and of ``web`` are deleted (empty nodes again)."""
    name = kube.namespace()
    yield name
    for group, version, plural in ROOT_RESOURCES:
        for obj in kube.custom.list_namespaced_custom_object(group, version, name, plural)["items"]:
            kube.custom.delete_namespaced_custom_object(group, version, name, plural, obj["metadata"]["name"])

    def gone() -> bool:
        pods = kube.pods(name) + kube.pods(WEB)
        for pod in pods:
            try:
                kube.core.delete_namespaced_pod(name_of(pod), pod["metadata"]["namespace"], grace_period_seconds=0)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        return not pods

    wait_for(gone, TIMEOUT, "the test's pods to be gone")


# --- the other actors ----------------------------------------------------------------------------------------------


def bind(kube: Kube, pod: Obj, node: str) -> None:
    """What the gang scheduler does: a Binding of the pod to ``node``."""
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name_of(pod)},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
    kube.core.create_namespaced_pod_binding(name_of(pod), pod["metadata"]["namespace"], body, _preload_content=False)


def schedule_released(kube: Kube, ns: str, skip: tuple[str, ...] = ()) -> None:
    """Bind every released, unbound member to its planned node, except the members named in ``skip``."""
    for pod in kube.pods(ns):
        if not gated(pod) and planned(pod) and not pod["spec"].get("nodeName") and name_of(pod) not in skip:
            bind(kube, pod, str(planned(pod)))


def ordinary(kube: Kube, name: str, cpu: str, node: str | None = None) -> None:
    """A pod of the default scheduler in namespace ``web`` (no gang), optionally only fitting ``node``."""
    spec: Obj = {"containers": [{"name": "web", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}]}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    kube.core.create_namespaced_pod(WEB, {"metadata": {"name": name}, "spec": spec})
    wait_for(lambda: kube.core.read_namespaced_pod(name, WEB).spec.node_name, TIMEOUT, f"web/{name} bound")


def job(kube: Kube, ns: str, name: str) -> list[Obj]:
    return kube.pods(ns, f"{JOB_NAME}={name}")


def uids(pods: list[Obj]) -> set[str]:
    return {p["metadata"]["uid"] for p in pods}


def metric(controller: Controller, name: str, **labels: str) -> float:
    value = controller.metrics.registry.get_sample_value(name, labels)
    return value or 0.0


# --- stranded releases -----------------------------------------------------------------------------------------


def test_a_gang_stranded_by_another_schedulers_pod_is_evicted_and_starts_whole_later(
        kube: Kube, ns: str, controller: Controller) -> None:
    """PyTorchJob 1 + 3 of 3 cpu on four 4-cpu nodes: one member per node. Released; the master binds; before
    worker-0 binds, an ordinary 2-cpu pod lands on worker-0's planned node (4 - 2 = 2 < 3): worker-0 can never bind
    there. The gang never ran whole: it is evicted (all four deleted), the training operator recreates them through
    admission (gated), they wait while the ordinary pod runs (only three nodes have 3 cpu), and start whole once it
    is gone."""
    kube.create(ns, torch_job("strand", 3, "3"))
    first = wait_for(lambda: (pods := job(kube, ns, "strand")) and len(pods) == 4
                     and all(not gated(p) and planned(p) for p in pods) and pods, TIMEOUT,
                     lambda: f"all four released; pods: {describe(job(kube, ns, 'strand'))}")
    master = next(p for p in first if "master" in name_of(p))
    worker = next(p for p in first if name_of(p).endswith("worker-0"))
    bind(kube, master, str(planned(master)))
    ordinary(kube, "intruder", "2", node=str(planned(worker)))

    assert wait_event(kube, ns, "PyTorchJob", "strand", "GangEvicted")
    replaced = wait_for(lambda: (pods := job(kube, ns, "strand")) and len(pods) == 4
                        and not uids(pods) & uids(first) and all(gated(p) for p in pods) and pods, TIMEOUT,
                        lambda: f"four new gated members; pods: {describe(job(kube, ns, 'strand'))}")
    assert metric(controller, "kubenexus_controller_gang_evictions_total", reason="unplaceable") == 1
    assert wait_event(kube, ns, "PyTorchJob", "strand", "GangInsufficientCapacity")
    stays(lambda: all(gated(p) for p in job(kube, ns, "strand")), "no room for four 3-cpu members: all gated")

    kube.core.delete_namespaced_pod("intruder", "web", grace_period_seconds=0)
    wait_for(lambda: all(not gated(p) for p in job(kube, ns, "strand")), TIMEOUT, "the new members released")
    schedule_released(kube, ns)
    pods = wait_for(lambda: (pods := job(kube, ns, "strand")) and all(running(p) for p in pods) and pods, TIMEOUT,
                    "the gang running whole")
    assert uids(pods) == uids(replaced) and sorted(p["spec"]["nodeName"] for p in pods) == NODES


def test_a_member_that_never_binds_evicts_its_half_started_gang_after_the_bind_timeout(
        kube: Kube, ns: str, controller: Controller) -> None:
    """Released 1 + 1 (1 cpu each); the gang scheduler binds the master but never worker-0: past the bind timeout
    the running master goes too, and the job comes back gated."""
    kube.create(ns, torch_job("slow", 1, "1"))
    first = wait_for(lambda: (pods := job(kube, ns, "slow")) and len(pods) == 2
                     and all(not gated(p) for p in pods) and pods, TIMEOUT, "both released")
    released = time.monotonic()
    schedule_released(kube, ns, skip=("slow-worker-0",))
    wait_for(lambda: any(running(p) for p in job(kube, ns, "slow")), TIMEOUT, "the master running")
    [message] = wait_event(kube, ns, "PyTorchJob", "slow", "GangEvicted")
    waited = time.monotonic() - released
    assert BIND_TIMEOUT - 1 < waited < BIND_TIMEOUT + 10, f"evicted {waited:.1f}s after the release"
    assert "slow-worker-0 was released" in message and "still not bound" in message
    assert metric(controller, "kubenexus_controller_gang_evictions_total", reason="bind-timeout") == 1
    wait_for(lambda: (pods := job(kube, ns, "slow")) and not uids(pods) & uids(first), TIMEOUT, "new members")


def test_a_member_its_kubelet_rejects_evicts_its_gang(kube: Kube, ns: str, controller: Controller) -> None:
    """A Job gang of 2 x 3 cpu, released; a misbehaving scheduler binds both to one node (3 + 3 > 4 cpu): its kubelet
    rejects the second (OutOfcpu, the pod Failed) while the first runs. The gang never ran whole: it is evicted, and
    the Job counts both pods as failed (its replacements come after its back-off, gated)."""
    job_obj = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "rejected", "annotations": OPTED_IN},
               "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {
                   "restartPolicy": "Never", "nodeSelector": {"pool": "cpu"},
                   "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "3"}}}]}}}}
    kube.create(ns, job_obj)
    pods = wait_for(lambda: (pods := kube.pods(ns)) and len(pods) == 2 and all(not gated(p) for p in pods) and pods,
                    TIMEOUT, "both released")
    # The first on its planned node, admitted and running before the second comes: the kubelet checks pods in
    # creation order (then by name), and one pinned elsewhere checked first would fail NodeAffinity, not OutOfcpu.
    first, second = sorted(pods, key=name_of)
    node = str(planned(first))
    bind(kube, first, node)
    wait_for(lambda: any(name_of(p) == name_of(first) and (p.get("status") or {}).get("phase") == "Running"
                         for p in kube.pods(ns)), TIMEOUT, "the first member running")
    bind(kube, second, node)
    [message] = wait_event(kube, ns, "Job", "rejected", "GangEvicted")
    assert "OutOfcpu" in message and "Pod was rejected" in message
    assert metric(controller, "kubenexus_controller_gang_evictions_total", reason="rejected") == 1
    wait_for(lambda: not uids(kube.pods(ns)) & uids(pods), TIMEOUT, lambda: f"evicted; pods: {describe(kube.pods(ns))}")
    wait_for(lambda: (kube.jobs(ns)[0].get("status") or {}).get("failed") == 2, TIMEOUT, "the Job counting both")


# --- a member released by someone else --------------------------------------------------------------------------


def test_an_admin_releasing_one_member_of_a_gang_that_never_fits_does_not_release_the_rest(
        kube: Kube, ns: str, controller: Controller) -> None:
    """PyTorchJob 1 + 2 of 6 cpu: no 4-cpu node holds one member, the gang never fits. An admin (allowed to remove
    the gate) releases worker-0. The controller must not take that as the signal to release the rest: worker-0 is
    deleted and comes back through admission, gated; the gang stays known (never-fits) and fully gated."""
    kube.create(ns, torch_job("huge", 2, "6"))
    wait_for(lambda: len(job(kube, ns, "huge")) == 3, TIMEOUT, "three members")
    assert wait_event(kube, ns, "PyTorchJob", "huge", "GangNeverFits")
    worker = next(p for p in job(kube, ns, "huge") if name_of(p).endswith("worker-0"))
    index = [g["name"] for g in worker["spec"]["schedulingGates"]].index(GATE)
    kube.core.patch_namespaced_pod(name_of(worker), ns, [{"op": "remove", "path": f"/spec/schedulingGates/{index}"}])

    def replaced() -> bool:
        pods = job(kube, ns, "huge")
        assert all(gated(p) for p in pods if name_of(p) != name_of(worker)), f"others released: {describe(pods)}"
        return len(pods) == 3 and all(gated(p) for p in pods) and worker["metadata"]["uid"] not in uids(pods)

    wait_for(replaced, TIMEOUT, lambda: f"worker-0 recreated gated; pods: {describe(job(kube, ns, 'huge'))}")
    assert metric(controller, "kubenexus_controller_member_evictions_total", reason="escaped") == 1
    stays(lambda: all(gated(p) for p in job(kube, ns, "huge")) and len(job(kube, ns, "huge")) == 3,
          "the gang stays whole and gated")
    assert controller.last_cycle is not None
    assert [d.decision for d in controller.last_cycle.gangs if d.key[0] == ns] == ["never-fits"]


# --- members that escaped admission --------------------------------------------------------------------------------


def test_members_that_escaped_admission_are_counted_when_bound_and_recreated_when_not(
        kube: Kube, ns: str, controller: Controller, webhook: LocalWebhook, monkeypatch: pytest.MonkeyPatch) -> None:
    """PyTorchJob 1 + 3 of 3 cpu, gated, waiting: ordinary 2-cpu pods fill every node (4 - 2 = 2 < 3). Admission goes
    down and two gated members are deleted: their operator recreates them without gate or gang labels, and with no
    room they stay unbound. The controller finds them (their root is opted in) and deletes them; while admission is
    down they come back escaped, and are held back (not deleted over and over); once admission is back they return
    gated. Two nodes are then freed: two members escape again and run there (admission down once more) — they are
    counted in their gang, which the controller completes on the other two nodes when those free up."""
    admission = client.AdmissionregistrationV1Api(kube.api_client)
    for i, node in enumerate(NODES):
        ordinary(kube, f"filler-{i}", "2", node=node)
    kube.create(ns, torch_job("esc", 3, "3"))
    wait_for(lambda: len(job(kube, ns, "esc")) == 4 and all(gated(p) for p in job(kube, ns, "esc")), TIMEOUT,
             "four gated members")

    def admission_down() -> None:
        admission.delete_mutating_webhook_configuration("kubenexus-mutate")
        admission.delete_validating_webhook_configuration("kubenexus-validate")

    try:
        escaped_admission(kube, ns, controller, webhook, admission, admission_down, monkeypatch)
    finally:  # the module's other tests need admission, whatever happened here
        names = {c.metadata.name for c in admission.list_mutating_webhook_configuration().items}
        if "kubenexus-mutate" not in names:
            register(admission, webhook)


def escaped_admission(kube: Kube, ns: str, controller: Controller, webhook: LocalWebhook, admission: Any,
                      admission_down: Callable[[], None], monkeypatch: pytest.MonkeyPatch) -> None:
    # The first re-deletion backoff, long enough that a loaded machine still sees it hold for a while (a full make
    # test once took 13.3 s from the deletion to the re-escaped pods); it runs from the controller's first deletion,
    # which comes after ``start``. The test watches a few seconds of it, then lets the rest run out.
    backoff = 20.0
    monkeypatch.setattr(controller_run, "ESCAPE_BACKOFF", (backoff, 300.0))
    admission_down()
    start = time.monotonic()
    for pod in job(kube, ns, "esc")[:2]:
        kube.core.delete_namespaced_pod(name_of(pod), ns, grace_period_seconds=0)
    wait_for(lambda: metric(controller, "kubenexus_controller_escaped_pods_total", action="recreated") >= 2, TIMEOUT,
             lambda: f"the escaped pods deleted; pods: {describe(job(kube, ns, 'esc'))}")
    # recreated while admission is still down: escaped again, and held back for the backoff
    wait_for(lambda: sum(1 for p in job(kube, ns, "esc") if GROUP not in p["metadata"]["labels"]) == 2, TIMEOUT,
             "two escaped again")
    held = start + backoff - 1.0 - time.monotonic()
    assert held > 1.0, f"the re-escaped pods were seen only {backoff - 1.0 - held:.1f} s after the deletion"
    stays(lambda: metric(controller, "kubenexus_controller_escaped_pods_total", action="recreated") == 2,
          "re-escaped pods are not deleted again at once", seconds=min(held, 5.0))
    register(admission, webhook)
    wait_for(lambda: len(pods := job(kube, ns, "esc")) == 4 and all(gated(p) and GROUP in p["metadata"]["labels"]
                                                                    for p in pods), TIMEOUT,
             lambda: f"all four gated again; pods: {describe(job(kube, ns, 'esc'))}")

    # now two members escape onto freed nodes and run there; the other two nodes free up too
    admission_down()
    for i in (2, 3):
        kube.core.delete_namespaced_pod(f"filler-{i}", WEB, grace_period_seconds=0)
    for pod in [p for p in job(kube, ns, "esc") if "master" not in name_of(p)][:2]:
        kube.core.delete_namespaced_pod(name_of(pod), ns, grace_period_seconds=0)
    escaped = wait_for(lambda: [p for p in job(kube, ns, "esc") if running(p)] if sum(
        running(p) for p in job(kube, ns, "esc")) == 2 else None, TIMEOUT, "two escaped members running")
    register(admission, webhook)
    for i in (0, 1):
        kube.core.delete_namespaced_pod(f"filler-{i}", WEB, grace_period_seconds=0)
    wait_for(lambda: all(not gated(p) for p in job(kube, ns, "esc")), TIMEOUT,
             lambda: f"the gated two released around the joined two; pods: {describe(job(kube, ns, 'esc'))}")
    assert metric(controller, "kubenexus_controller_escaped_pods_total", action="joined") == 2
    schedule_released(kube, ns)
    pods = wait_for(lambda: (pods := job(kube, ns, "esc")) and len(pods) == 4 and all(running(p) for p in pods)
                    and pods, TIMEOUT, "the gang running whole")
    assert uids(escaped) <= uids(pods), "the escaped members kept running, counted in their gang"
    assert all(GROUP in p["metadata"]["labels"] for p in pods)
    assert sorted(p["spec"]["nodeName"] for p in pods) == NODES
    assert all(PLANNED not in (p["metadata"].get("annotations") or {}) for p in escaped)
    assert metric(controller, "kubenexus_controller_gang_evictions_total", reason="incomplete") == 0


# --- each operator's reaction to an evicted gang ------------------------------------------------------------------


def spark_on_failure(name: str) -> Obj:
    app = spark_app(name, OPTED_IN)
    app["spec"]["restartPolicy"] = {"type": "OnFailure", "onFailureRetries": 3, "onFailureRetryInterval": 1}
    return app


# kind -> (root, what its operator does when the gang's members are deleted)
REACTIONS: dict[str, tuple[Callable[[str], Obj], str]] = {
    "SparkApplication": (spark_on_failure, "recreated"),  # the driver deleted: FAILING, then resubmitted
    "LeaderWorkerSet": (lambda name: lws(name, OPTED_IN), "recreated"),  # RecreateGroupOnPodRestart
    "RayCluster": (lambda name: raycluster(name, OPTED_IN), "recreated"),  # KubeRay replaces missing pods
    "TFJob": (lambda name: tfjob(name, OPTED_IN), "failed"),  # a deleted running replica fails a TFJob
    "JobSet": (lambda name: jobset(name, OPTED_IN), "counted"),  # each Job counts its deleted pods, backs off
}


def gang_of(kube: Kube, ns: str, group: str) -> list[Obj]:
    return [p for p in kube.pods(ns) if (p["metadata"].get("labels") or {}).get(GROUP) == group
            and not p["metadata"].get("deletionTimestamp")]


def root_failed(kube: Kube, ns: str, root: Obj) -> bool:
    group, version = root["apiVersion"].split("/")
    obj = kube.custom.get_namespaced_custom_object(group, version, ns, root["kind"].lower() + "s",
                                                   root["metadata"]["name"])
    status = obj.get("status") or {}
    return any(c.get("type") == "Failed" and c.get("status") == "True" for c in status.get("conditions") or [])


@pytest.mark.parametrize("kind", list(REACTIONS))
def test_an_evicted_gang_meets_its_operators_reaction_and_never_runs_half(
        kube: Kube, ns: str, controller: Controller, kind: str) -> None:
    """The gang is released; the test (its scheduler) binds every member but one, then cordons that one's planned
    node: it can never bind there and the gang never ran whole, so the controller evicts it. What follows is the
    operator's, as the real one does it: recreate the members (they come back through admission, gated, and
    start whole), fail the job (nothing of it keeps running), or count the deleted pods as failures and back off
    before replacing them (nothing keeps running meanwhile)."""
    build, reaction = REACTIONS[kind]
    root = build(f"ev-{kind.lower()}")
    kube.create(ns, root)

    def released_gang() -> tuple[str, list[Obj]] | None:
        groups = sorted({(p["metadata"].get("labels") or {}).get(GROUP) for p in kube.pods(ns)} - {None})
        for group in groups:
            pods = gang_of(kube, ns, str(group))
            if pods and all(not gated(p) and planned(p) for p in pods):
                return str(group), pods
        return None

    group, first = wait_for(released_gang, TIMEOUT, lambda: f"a released gang; pods: {describe(kube.pods(ns))}")
    victim = first[-1]
    schedule_released(kube, ns, skip=(name_of(victim),))
    wait_for(lambda: all(running(p) for p in gang_of(kube, ns, group) if p["spec"].get("nodeName")) and gang_of(
        kube, ns, group), TIMEOUT, "the bound members running: the gang is half started")
    node = str(planned(victim))
    kube.core.patch_node(node, {"spec": {"unschedulable": True}})
    try:
        wait_event(kube, ns, root["kind"], root["metadata"]["name"], "GangEvicted")
    finally:
        kube.core.patch_node(node, {"spec": {"unschedulable": False}})
    old = uids(first)
    wait_for(lambda: not uids(kube.pods(ns)) & old, TIMEOUT,
             lambda: f"the evicted members gone; pods: {describe(kube.pods(ns))}")
    if reaction == "failed":
        wait_for(lambda: root_failed(kube, ns, root), TIMEOUT, f"{kind} failed by its operator")
        stays(lambda: not any(running(p) for p in kube.pods(ns)), "nothing of the failed job runs")
    elif reaction == "counted":
        def counted() -> bool:
            return sum((j.get("status") or {}).get("failed", 0) for j in kube.jobs(ns)) >= len(first)
        wait_for(counted, TIMEOUT, lambda: f"the Jobs counting their deleted pods: {kube.jobs(ns)}")
        stays(lambda: not any(running(p) for p in kube.pods(ns)), "nothing runs while the Jobs back off")
    else:
        def whole_again() -> bool:
            schedule_released(kube, ns)
            pods = gang_of(kube, ns, group)
            fresh = [p for p in pods if p["metadata"]["uid"] not in old]
            return len(fresh) == len(pods) and len(pods) >= len(first) and all(running(p) for p in pods)

        wait_for(whole_again, TIMEOUT, lambda: f"{kind} recreated through admission and whole again; pods: "
                                               f"{describe(gang_of(kube, ns, group))}")

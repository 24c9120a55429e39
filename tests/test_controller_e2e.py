"""End-to-end gate controller on the local cluster: webhook gates, controller releases, scheduler binds.

One local cluster (apiserver, scheduler, kubelet, emulated operators) with the real webhook registered, and a
small fixed node list so that capacity decides: three CPU nodes of 4 cpu (``pool=cpu``) and two GPU nodes of
4 ``nvidia.com/gpu`` each, tainted so that only GPU workloads land there. Each test runs in its own namespace,
starts its own gate controller(s) under the controller's service-account identity (the validating webhook lets
only that identity remove the gate), and checks the pods as stored, events and the Lease through the API.

Expectations come from the scenario (sizes, requests and node capacities chosen here), never from the product:
what the controller must do is issue 4, "Tests (in make test)", second bullet.
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from cluster.local import LocalCluster
from controller.run import Controller
from kube.client import new_api_client
from tests.support.contract import GROUP
from tests.support.contract import PLANNED_NODE as PLANNED
from tests.support.gang_pods import (
    CPU_NODES,
    GPU_NODES,
    JOB_NAME,
    LEASE,
    ROOTS,
    TIMEOUT,
    TWO_POOLS,
    delete_pods,
    describe,
    events,
    gated,
    name_of,
    planned,
    running,
    torch_job,
    wait_event,
    wait_pods,
)
from tests.support.kube import Kube, admitted
from tests.support.polling import stays, wait_for
from tests.support.roots import OPTED_IN, Obj, spark_app

pytestmark = pytest.mark.e2e



# --- root objects ------------------------------------------------------------------------------------------------


# --- pods as stored ----------------------------------------------------------------------------------------------


def pins(pod: Obj) -> list[list[str]]:
    """For every required node-affinity term, the node names its ``matchFields`` metadata.name In pins to."""
    required = (((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    return [[v for f in term.get("matchFields") or [] if f.get("key") == "metadata.name" and f.get("operator") == "In"
             for v in f.get("values") or []]
            for term in required.get("nodeSelectorTerms") or []]


def assert_released_onto_plan(pod: Obj) -> str:
    """Released, bound to the node its planned-node annotation names, and pinned there; returns the node."""
    where, node = name_of(pod), pod["spec"].get("nodeName")
    assert not gated(pod), f"{where} still gated"
    assert node, f"{where} not bound"
    assert planned(pod) == node, f"{where}: planned-node {planned(pod)!r}, bound to {node!r}"
    terms = pins(pod)
    assert terms and all(t == [node] for t in terms), f"{where}: pinned {terms}, bound to {node!r}"
    return str(node)


def job_pods(pods: list[Obj], job: str) -> list[Obj]:
    return [p for p in pods if (p["metadata"].get("labels") or {}).get(JOB_NAME) == job]


def all_running(count: int) -> Callable[[list[Obj]], bool]:
    return lambda pods: len(pods) == count and all(running(p) for p in pods)


def all_gated(count: int) -> Callable[[list[Obj]], bool]:
    return lambda pods: len(pods) == count and all(gated(p) for p in pods)


def mark_succeeded(kube: Kube, ns: str, pods: list[Obj]) -> None:
    """The kubelet's report that the pods' containers exited 0: they are terminal and hold nothing any more."""
    for pod in pods:
        status = {"phase": "Succeeded", "conditions": [{"type": "Ready", "status": "False"}],
                  "containerStatuses": [{"name": c["name"], "ready": False, "restartCount": 0, "image": "",
                                         "imageID": "", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
                                        for c in pod["spec"]["containers"]]}
        kube.core.patch_namespaced_pod_status(name_of(pod), ns, {"status": status},
                                              _content_type="application/merge-patch+json")


# --- cluster, webhook, controllers -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(nodes=list(TWO_POOLS), workdir=str(tmp_path_factory.mktemp("controller-e2e"))) as running_:
        running_.run_components()
        yield running_


@pytest.fixture(scope="module")
def kube(cluster: LocalCluster, workdir: Any, tls: Any) -> Iterator[Kube]:
    """``admitted``, plus the namespace where the controller is deployed and keeps its Lease."""
    with admitted(cluster, workdir, tls) as api:
        api.ensure_namespace(LEASE[0])
        yield api


@pytest.fixture
def controller_api(controller_kubeconfig: str) -> client.CoreV1Api:
    """The controller's identity, for writing a release by hand."""
    return client.CoreV1Api(new_api_client(controller_kubeconfig, 4, 0))


@pytest.fixture
def ns(kube: Kube) -> Iterator[str]:
    """A fresh namespace; afterwards its roots and pods are deleted, so the next test starts on empty nodes."""
    name = kube.namespace()
    yield name
    for group, version, plural in ROOTS:
        for obj in kube.custom.list_namespaced_custom_object(group, version, name, plural)["items"]:
            kube.custom.delete_namespaced_custom_object(group, version, name, plural, obj["metadata"]["name"])
    delete_pods(kube, name)


# --- 1. Spark: 10 executors ---------------------------------------------------------------------------------------


def test_spark_application_with_ten_executors_starts_whole(kube: Kube, ns: str,
                                                           controllers: Callable[..., Controller]) -> None:
    """Driver + 10 executors of 1 cpu each on three 4-cpu nodes: 11 of 12 cpu, so the plan spans all three nodes
    and the executors, which only the running driver creates (in two batches of 5, 2 s apart), go into room kept
    for them: a 2-cpu gang submitted between the batches would fit in the reserved room, never in the 1 cpu left."""
    controllers()
    app = spark_app("pi", OPTED_IN)
    app["spec"]["driver"].update(coreRequest="1", memory="512m")  # 1 cpu, 512 + 384 MiB
    app["spec"]["executor"].update(instances=10, coreRequest="1", memory="2g")  # 1 cpu, 2048 + 384 MiB each
    app["spec"]["sparkConf"] = {"spark.kubernetes.allocation.batch.size": "5",
                                "spark.kubernetes.allocation.batch.delay": "2s"}
    kube.create(ns, app)

    # the driver is released, runs, and creates the first batch of executors
    wait_pods(kube, ns, lambda pods: any(running(p) for p in pods if name_of(p) == "pi-driver") and len(pods) >= 6,
              "the driver running and the first executor batch")
    kube.create(ns, torch_job("intruder", 1, "1"))  # 2 x 1 cpu, created after the Spark gang's plan was made

    def spark_whole(pods: list[Obj]) -> bool:
        assert all(gated(p) for p in job_pods(pods, "intruder")), f"intruder released into reserved room: " \
            f"{describe(pods)}"
        return sum(1 for p in pods if JOB_NAME not in p["metadata"]["labels"] and running(p)) == 11

    spark = wait_pods(kube, ns, spark_whole, "driver and 10 executors running")
    spark = [p for p in spark if JOB_NAME not in p["metadata"]["labels"]]
    assert len(spark) == 11, describe(spark)
    assert sum(1 for p in spark if p["metadata"]["labels"].get("spark-role") == "executor") == 10, describe(spark)
    nodes = [assert_released_onto_plan(p) for p in spark]
    assert set(nodes) == set(CPU_NODES), f"11 one-cpu pods on 4-cpu nodes need all three: {sorted(nodes)}"
    assert all(nodes.count(n) <= 4 for n in CPU_NODES), sorted(nodes)
    assert wait_event(kube, ns, "SparkApplication", "pi", "GangReleased")
    # one release: the driver on a plan with slots for its executors, then the executors into those slots, pass after
    # pass; its event counts them all (told at most every 10 s: the notes are those of the moment they were written)
    wait_for(lambda: [n for n in events(kube, ns, "SparkApplication", "pi", "GangReleased")
                      if n.startswith("released 11 members of gang pi on a plan over 3 nodes: ")], TIMEOUT,
             lambda: f"GangReleased for all 11 members: {events(kube, ns, 'SparkApplication', 'pi', 'GangReleased')}")

    # the intruder would have taken room kept for the executors: it waits, gated, and says why
    intruder = kube.pods(ns, f"{JOB_NAME}=intruder")
    assert len(intruder) == 2 and all(gated(p) and not p["spec"].get("nodeName") for p in intruder), \
        describe(intruder)
    assert wait_event(kube, ns, "PyTorchJob", "intruder", "GangInsufficientCapacity")
    stays(lambda: all(gated(p) for p in kube.pods(ns, f"{JOB_NAME}=intruder")),
          "the intruder must stay gated: only 1 cpu is free")


# --- 2. two PyTorchJobs that each need every GPU ------------------------------------------------------------------


def test_two_pytorchjobs_competing_for_all_gpus_never_deadlock(kube: Kube, ns: str,
                                                               controllers: Callable[..., Controller]) -> None:
    """Each job: master + 3 workers x 2 GPU = 8 GPU = every GPU of the cluster. One runs whole, the other waits
    fully gated (never one member of each ungated), and starts whole once the first has completed."""
    controllers()
    jobs = ("alpha", "beta")
    for job in jobs:
        kube.create(ns, torch_job(job, 3, "500m", "1Gi", gpus=2))

    first = ""

    def one_job_whole() -> bool:
        nonlocal first
        pods = kube.pods(ns)
        ungated = {job for job in jobs if any(not gated(p) for p in job_pods(pods, job))}
        assert len(ungated) <= 1, f"members of both jobs ungated at once: {describe(pods)}"
        whole = [job for job in jobs if all_running(4)(job_pods(pods, job))]
        if whole:
            first = whole[0]
        return bool(whole)

    wait_for(one_job_whole, TIMEOUT, "one PyTorchJob running whole")
    second = next(job for job in jobs if job != first)
    pods = kube.pods(ns)
    gpu_nodes = [assert_released_onto_plan(p) for p in job_pods(pods, first)]
    assert sorted(gpu_nodes) == sorted(GPU_NODES * 2), f"2 GPU pods on each 4-GPU node: {gpu_nodes}"

    # the second waits, fully gated, and tells why
    wait_pods(kube, ns, all_gated(4), f"{second}: all 4 members present and gated", f"{JOB_NAME}={second}")
    assert wait_event(kube, ns, "PyTorchJob", second, "GangInsufficientCapacity")
    stays(lambda: all_gated(4)(kube.pods(ns, f"{JOB_NAME}={second}")) and one_job_whole(),
          f"{second} must stay fully gated while {first} holds every GPU")

    # the first completes: the second starts whole, on the GPUs the first held
    mark_succeeded(kube, ns, job_pods(kube.pods(ns), first))
    pods = wait_pods(kube, ns, all_running(4), f"{second} running whole", f"{JOB_NAME}={second}")
    assert sorted(assert_released_onto_plan(p) for p in pods) == sorted(GPU_NODES * 2)
    assert wait_event(kube, ns, "PyTorchJob", second, "GangReleased")


# --- 3. a restart in the middle of a release ----------------------------------------------------------------------


def release_by_hand(api: client.CoreV1Api, pod: Obj, node: str) -> None:
    """What the controller writes for one member: gate off, pinned to ``node``, planned-node recorded."""
    patch = [{"op": "test", "path": "/metadata/uid", "value": pod["metadata"]["uid"]},
             {"op": "test", "path": "/spec/schedulingGates", "value": pod["spec"]["schedulingGates"]},
             {"op": "remove", "path": "/spec/schedulingGates"},
             {"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {
                 "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                     {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}},
             {"op": "add", "path": "/metadata/annotations/" + PLANNED.replace("/", "~1"), "value": node}]
    api.patch_namespaced_pod(name_of(pod), pod["metadata"]["namespace"], patch,
                             _content_type="application/json-patch+json")


def test_restart_finishes_a_half_released_gang_before_anything_else(
        kube: Kube, ns: str, controllers: Callable[..., Controller], controller_api: client.CoreV1Api) -> None:
    """Gang "big" (6 x 2 cpu = all 12 cpu, 2 per node) was half released by a controller that then died: 3 members
    run on cpu-0 (2) and cpu-1 (1). Gang "small" (2 x 2 cpu), older, would fit in the 6 cpu still free, but those
    are owed to big's other 3 members. A fresh controller must complete big first and keep small gated."""
    kube.create(ns, torch_job("small", 1, "2"))
    wait_pods(kube, ns, all_gated(2), "small: 2 gated members")
    time.sleep(1.1)  # creationTimestamp has whole seconds: small is strictly older, so it ranks first by age
    kube.create(ns, torch_job("big", 5, "2"))
    big = wait_pods(kube, ns, all_gated(6), "big: 6 gated members", f"{JOB_NAME}=big")
    small = kube.pods(ns, f"{JOB_NAME}=small")
    assert max(p["metadata"]["creationTimestamp"] for p in small) < min(p["metadata"]["creationTimestamp"] for p in big)

    by_name = {name_of(p): p for p in big}
    half = {"big-master-0": "cpu-0", "big-worker-0": "cpu-0", "big-worker-1": "cpu-1"}
    for name, node in half.items():
        release_by_hand(controller_api, by_name[name], node)
    wait_pods(kube, ns, lambda pods: sum(1 for p in pods if running(p)) == 3, "the hand-released half running",
              f"{JOB_NAME}=big")
    assert all(gated(p) for p in kube.pods(ns, f"{JOB_NAME}=small")), "nothing may release small yet"

    controllers()

    def big_whole_small_gated(pods: list[Obj]) -> bool:
        small = job_pods(pods, "small")
        assert len(small) == 2 and all(gated(p) for p in small), f"small released into big's room: {describe(pods)}"
        return all_running(6)(job_pods(pods, "big"))

    wait_pods(kube, ns, big_whole_small_gated, "big running whole")
    big = kube.pods(ns, f"{JOB_NAME}=big")
    nodes = {name_of(p): assert_released_onto_plan(p) for p in big}
    assert {n: nodes[n] for n in half} == half, nodes
    assert sorted(nodes.values()) == sorted(CPU_NODES * 2), f"6 x 2 cpu on 3 x 4 cpu: 2 per node, got {nodes}"
    small = kube.pods(ns, f"{JOB_NAME}=small")
    assert all(gated(p) for p in small), f"small was released into big's room: {describe(small)}"
    assert wait_event(kube, ns, "PyTorchJob", "small", "GangInsufficientCapacity")
    stays(lambda: all(gated(p) for p in kube.pods(ns, f"{JOB_NAME}=small")), "small must stay gated: no cpu is free")

    # small really fits once big has completed: it was held for capacity, not for anything else
    mark_succeeded(kube, ns, big)
    small = wait_pods(kube, ns, all_running(2), "small running once big completed", f"{JOB_NAME}=small")
    for pod in small:
        assert_released_onto_plan(pod)


def test_controller_killed_mid_release_is_completed_by_the_next(kube: Kube, ns: str,
                                                                 controllers: Callable[..., Controller]) -> None:
    """A 30-member gang; the controller is stopped as soon as the first gate is gone (it may or may not have
    finished by then); the next controller completes the release, every member pinned to its planned node."""
    first = controllers()
    kube.create(ns, torch_job("wide", 29, "100m", "64Mi"))
    pods = wait_for(lambda: [p for p in kube.pods(ns) if not gated(p)] and kube.pods(ns), TIMEOUT,
                    "the first gate removed")
    first.stop()
    released_at_kill = sum(1 for p in kube.pods(ns) if not gated(p))
    assert 1 <= released_at_kill <= 30, describe(pods)
    controllers()
    pods = wait_pods(kube, ns, all_running(30), f"30 members running (the first controller had released "
                     f"{released_at_kill})")
    for pod in pods:
        assert_released_onto_plan(pod)


# --- 4. leader failover --------------------------------------------------------------------------------------------


def test_leader_failover_between_two_replicas(kube: Kube, ns: str, controllers: Callable[..., Controller]) -> None:
    """Two replicas with a 2 s lease: one leads (and holds the Lease) and releases a gang; once it stops, the other
    takes the Lease over and releases the next gang."""
    suffix = uuid.uuid4().hex[:6]
    replicas = [controllers(leader_elect=True, identity=f"{who}-{suffix}", lease=(2.0, 1.5, 0.2))
                for who in ("a", "b")]
    identities = {id(c): f"{who}-{suffix}" for c, who in zip(replicas, ("a", "b"), strict=True)}
    leases = client.CoordinationV1Api(kube.api_client)

    def holder() -> str:
        return str(leases.read_namespaced_lease(LEASE[1], LEASE[0]).spec.holder_identity or "")

    def single_leader() -> Controller | None:
        leading = [c for c in replicas if c.leading]
        assert len(leading) <= 1, "two replicas lead at once"
        return leading[0] if leading else None

    leader = wait_for(single_leader, TIMEOUT, "one replica leading")
    stays(lambda: single_leader() is leader, "leadership must stay with one replica", 1.0)
    assert holder() == identities[id(leader)]

    kube.create(ns, torch_job("before", 2, "100m", "64Mi"))
    for pod in wait_pods(kube, ns, all_running(3), "the first gang running", f"{JOB_NAME}=before"):
        assert_released_onto_plan(pod)

    leader.stop()
    standby = next(c for c in replicas if c is not leader)
    wait_for(lambda: standby.leading, TIMEOUT, "the standby to take over")
    assert not leader.leading
    wait_for(lambda: holder() == identities[id(standby)], TIMEOUT, "the Lease to name the new leader")

    kube.create(ns, torch_job("after", 2, "100m", "64Mi"))
    for pod in wait_pods(kube, ns, all_running(3), "the second gang running", f"{JOB_NAME}=after"):
        assert_released_onto_plan(pod)
    assert holder() == identities[id(standby)]


# --- 5. a member deleted from a running gang -----------------------------------------------------------------------


def test_deleted_member_is_replaced_into_its_slot(kube: Kube, ns: str,
                                                  controllers: Callable[..., Controller]) -> None:
    """Master + 3 workers x 2 cpu on three 4-cpu nodes. A deleted worker is recreated by the operator under the same
    name, gated by the webhook, and released onto the node its predecessor held (its slot), the others untouched."""
    controllers()
    kube.create(ns, torch_job("resnet", 3, "2"))
    pods = wait_pods(kube, ns, all_running(4), "the gang running whole")
    before = {name_of(p): (p["metadata"]["uid"], assert_released_onto_plan(p)) for p in pods}
    victim = "resnet-worker-1"
    old_uid, old_node = before[victim]

    kube.core.delete_namespaced_pod(victim, ns)

    def replaced(pods: list[Obj]) -> bool:
        return any(name_of(p) == victim and p["metadata"]["uid"] != old_uid for p in pods)

    pods = wait_pods(kube, ns, replaced, f"{victim} recreated")
    [new] = [p for p in pods if name_of(p) == victim]
    assert (new["metadata"].get("labels") or {}).get(GROUP) == "resnet", "the replacement joins the gang"
    pods = wait_pods(kube, ns, all_running(4), "the replacement running")
    [new] = [p for p in pods if name_of(p) == victim]
    assert new["metadata"]["uid"] != old_uid
    assert assert_released_onto_plan(new) == old_node, f"replacement not in its predecessor's slot on {old_node}"
    assert {name_of(p): (p["metadata"]["uid"], p["spec"]["nodeName"]) for p in pods if name_of(p) != victim} == \
        {n: v for n, v in before.items() if n != victim}


# --- 7. What users see while a gang waits: timeout, never-fits, health and metrics ---------------------------------


def test_a_gang_past_its_timeout_is_warned_about_and_stays_gated(kube: Kube, ns: str,
                                                                 controllers: Callable[..., Controller]) -> None:
    """3 × 3 cpu run on three 4-cpu nodes; a 2 × 2 cpu gang then waits (1 cpu free per node), and after its
    1 s timeout gets a GangTimeout warning and stays gated."""
    controller = controllers()
    kube.create(ns, torch_job("holder", 2, cpu="3"))
    wait_pods(kube, ns, all_running(3), "the holder job running", selector=f"{JOB_NAME}=holder")
    job = torch_job("waits", 1, cpu="2")
    job["metadata"]["annotations"]["kubenexus.io/schedule-timeout-seconds"] = "1"
    kube.create(ns, job)
    wait_pods(kube, ns, all_gated(2), "2 gated members", selector=f"{JOB_NAME}=waits")
    [message] = wait_event(kube, ns, "PyTorchJob", "waits", "GangTimeout")
    assert "schedule timeout" in message
    stays(lambda: all(gated(p) for p in kube.pods(ns, f"{JOB_NAME}=waits")), "the gang stays gated after the timeout")
    giant = torch_job("giant", 1, cpu="5")  # no node has 5 cpu, however empty the cluster
    kube.create(ns, giant)
    [never] = wait_event(kube, ns, "PyTorchJob", "giant", "GangNeverFits")
    assert "5 cpu" in never
    port = controller.health_port
    for path, expected in (("/healthz", 200), ("/readyz", 200)):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            assert response.status == expected
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    assert 'kubenexus_controller_gangs{state="never_fits"} 1.0' in text
    assert "kubenexus_controller_gang_timeouts_total 1.0" in text
    assert 'kubenexus_controller_gangs{state="waiting"}' in text

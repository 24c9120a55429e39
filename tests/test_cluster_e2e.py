"""End-to-end gang admission on the local cluster: root object in, operator pods out, webhook in between.

One local cluster (apiserver, scheduler, kubelet, every emulated operator) with the real ``kubenexus webhook``
(default settings) registered for pod admission. Each test creates a realistic root object through the official
Python client in its own namespace, lets the emulated operator create the pods, and checks the pods as the
apiserver stored them, i.e. after the webhook's patch was applied.

Gang sizes and expected members are computed here from the spec by the documented formulas
(/work/shared/operators.md, docs/reference/operators.md), never taken from the product. Gated pods never run in
this milestone (the gate controller that releases them comes later), so for staged gangs only the first stage
exists: the tests assert it and that the later stage has not appeared after a short wait. The same roots without
opt-in run to completion of their startup (all stages) with the default scheduler.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import pytest

from cluster.local import LocalCluster
from tests.support.contract import (
    EXPECTED,
    GATE,
    GROUP,
    GROUP_NAME,
    MIN,
    MIN_AVAILABLE,
    OPT_IN,
    OWNER,
    OWNER_UID,
    SCHEDULER,
    SIGS_GROUP,
    SIGS_MIN,
    UNRESOLVED,
)
from tests.support.gang_pods import running
from tests.support.kube import Kube, admitted
from tests.support.operator_fixtures import job_pods, jobset_size, ray_size, replicated_job_pods, training_size
from tests.support.polling import stays, wait_for
from tests.support.roots import (
    OPTED_IN,
    TRAINER_RESOURCES,
    TRAINING_KINDS,
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

TIMEOUT = 15.0  # every bounded wait
DEFAULT_SCHEDULER = "default-scheduler"
LWS_REVISION = "leaderworkerset.sigs.k8s.io/template-revision-hash"


# --- quantities and the documented size formulas (independent of the product) ----------------------------------

_SUFFIX = {"m": Fraction(1, 1000), "": Fraction(1), "k": Fraction(10**3), "M": Fraction(10**6),
           "G": Fraction(10**9), "Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30),
           "Ti": Fraction(2**40)}
MI = 2**20


def quantity(value: Any) -> Fraction:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([a-zA-Z]*)", str(value))
    assert match and match[2] in _SUFFIX, f"not a quantity: {value!r}"
    return Fraction(match[1]) * _SUFFIX[match[2]]


def spark_mib(text: str) -> int:
    match = re.fullmatch(r"(\d+)([mg])", text)
    assert match, text
    return int(match[1]) * (1024 if match[2] == "g" else 1)


def spark_executors(spec: Obj) -> int:
    """executor.instances (default 1); with dynamic allocation max(instances, initialExecutors, minExecutors)."""
    count = spec["executor"].get("instances", 1)
    dynamic = spec.get("dynamicAllocation") or {}
    if dynamic.get("enabled"):
        count = max(count, dynamic.get("initialExecutors", 0), dynamic.get("minExecutors", 0))
    return count


def spark_executor_member(spec: Obj) -> Obj:
    """cpu = coreRequest or cores; memory = memory + max(384 MiB, factor × memory), factor 0.1 JVM / 0.4 Python."""
    executor = spec["executor"]
    memory = spark_mib(executor["memory"])
    factor = Fraction(4, 10) if spec["type"] in ("Python", "R") else Fraction(1, 10)
    overhead = max(384, int(factor * memory))
    return {"role": "executor", "count": spark_executors(spec),
            "requests": {"cpu": executor.get("coreRequest") or executor["cores"], "memory": (memory + overhead) * MI},
            "nodeSelector": {**(spec.get("nodeSelector") or {}), **(executor.get("nodeSelector") or {})},
            "tolerations": executor.get("tolerations") or [], "affinity": executor.get("affinity")}


def template_member(role: str, count: int, pod_spec: Obj) -> Obj:
    """An expected member stamped from a one-container pod template."""
    [only] = pod_spec["containers"]
    return {"role": role, "count": count, "requests": dict(only["resources"]["requests"]),
            "nodeSelector": pod_spec.get("nodeSelector") or {}, "tolerations": pod_spec.get("tolerations") or [],
            "affinity": pod_spec.get("affinity")}


def normalized(members: list[Obj]) -> list[Obj]:
    """Requests as exact numbers, so "1408Mi" and 1408 × 2**20 compare equal."""
    return [{**m, "requests": {k: quantity(v) for k, v in m["requests"].items()}} for m in members]


# --- realistic root objects ------------------------------------------------------------------------------------


# --- cluster, webhook, client ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(workdir=str(tmp_path_factory.mktemp("e2e-cluster"))) as running:
        running.run_components()
        yield running


@pytest.fixture(scope="module")
def kube(cluster: LocalCluster, workdir: Any, tls: Any) -> Iterator[Kube]:
    with admitted(cluster, workdir, tls) as api:
        yield api


# --- bounded polling -------------------------------------------------------------------------------------------


def names(objs: list[Obj]) -> list[str]:
    return [o["metadata"]["name"] for o in objs]


def wait_pods(kube: Kube, ns: str, count: int) -> list[Obj]:
    """Exactly ``count`` pods (waits for at least that many, then checks there are no more)."""
    seen: list[Obj] = []

    def enough() -> bool:
        nonlocal seen
        seen = kube.pods(ns)
        return len(seen) >= count

    wait_for(enough, TIMEOUT, lambda: f"{count} pods in {ns}, saw {names(seen)}")
    assert len(seen) == count, f"expected {count} pods in {ns}, got {names(seen)}"
    return seen


def wait_running(kube: Kube, ns: str, count: int) -> list[Obj]:
    """``count`` pods, all bound and Running (no more appear meanwhile)."""
    pods: list[Obj] = []

    def all_running() -> bool:
        nonlocal pods
        pods = kube.pods(ns)
        return len(pods) >= count and all(running(p) for p in pods)

    wait_for(all_running, TIMEOUT, lambda: f"{count} running pods in {ns}, saw "
                                  f"{[(p['metadata']['name'], p.get('status', {}).get('phase')) for p in pods]}")
    assert len(pods) == count, f"expected {count} pods in {ns}, got {names(pods)}"
    return pods




# --- assertions on stored pods ---------------------------------------------------------------------------------


def owner_string(root: Obj) -> str:
    return f"{root['apiVersion']}/{root['kind']}/{root['metadata']['name']}"


def assert_gang(pod: Obj, root: Obj, group: str, size: int, expected: list[Obj] | None = None) -> None:
    metadata, spec = pod["metadata"], pod["spec"]
    labels, annotations, where = metadata.get("labels") or {}, metadata.get("annotations") or {}, metadata["name"]
    assert [g["name"] for g in spec.get("schedulingGates") or []] == [GATE], where
    assert (labels.get(GROUP), labels.get(MIN)) == (group, str(size)), (where, labels)
    assert (annotations.get(SIGS_GROUP), annotations.get(SIGS_MIN)) == (group, str(size)), (where, annotations)
    assert spec.get("schedulerName") == SCHEDULER, where
    assert annotations.get(OWNER) == owner_string(root), (where, annotations)
    assert annotations.get(OWNER_UID) == root["metadata"]["uid"], (where, annotations)
    assert UNRESOLVED not in annotations, (where, annotations)
    if expected is None:
        assert EXPECTED not in annotations, (where, annotations.get(EXPECTED))
    else:
        assert EXPECTED in annotations, (where, annotations)
        assert normalized(json.loads(annotations[EXPECTED])) == normalized(expected), where
    assert not spec.get("nodeName") and (pod.get("status") or {}).get("phase", "Pending") == "Pending", where


def assert_plain(pod: Obj) -> None:
    """Admitted unchanged: no gate, default scheduler, none of the gang keys."""
    metadata, spec, where = pod["metadata"], pod["spec"], pod["metadata"]["name"]
    assert not spec.get("schedulingGates"), where
    assert spec.get("schedulerName") == DEFAULT_SCHEDULER, where
    assert not {GROUP, MIN} & set(metadata.get("labels") or {}), where
    assert not {SIGS_GROUP, SIGS_MIN, OWNER, OWNER_UID, EXPECTED, UNRESOLVED} & set(metadata.get("annotations") or {})


# --- Spark -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("python", [False, True], ids=["scala", "python-dynamic-allocation"])
def test_spark_driver_is_gated_and_announces_its_executors(kube: Kube, python: bool) -> None:
    ns = kube.namespace()
    app = kube.create(ns, spark_app("spark-pi", OPTED_IN, python=python))
    [driver] = wait_pods(kube, ns, 1)
    assert driver["metadata"]["name"] == "spark-pi-driver"
    assert_gang(driver, app, "spark-pi", 1 + spark_executors(app["spec"]), [spark_executor_member(app["spec"])])
    assert names(kube.pods(ns, f"{GROUP}=spark-pi")) == ["spark-pi-driver"]  # kubectl get pods -l ... works
    # the driver creates the executors once it runs; gated, it never does
    stays(lambda: names(kube.pods(ns)) == ["spark-pi-driver"], "no executor may appear while the driver is gated")


def test_spark_with_a_native_batch_scheduler_is_left_to_it(kube: Kube) -> None:
    ns = kube.namespace()
    app = spark_app("spark-pi", OPTED_IN)
    app["spec"]["batchScheduler"] = "volcano"  # spark-operator points the pods at Volcano's own gang scheduling
    kube.create(ns, app)
    [driver] = wait_pods(kube, ns, 1)
    assert not driver["spec"].get("schedulingGates") and driver["spec"]["schedulerName"] == "volcano"
    assert GROUP not in driver["metadata"]["labels"]


# --- Kubeflow training-operator --------------------------------------------------------------------------------


@pytest.mark.parametrize("min_available", [None, 2], ids=["replicas", "schedulingPolicy-minAvailable"])
def test_pytorchjob_pods_form_one_gang(kube: Kube, min_available: int | None) -> None:
    ns = kube.namespace()
    job = kube.create(ns, pytorchjob("resnet", OPTED_IN, min_available))
    size = training_size(job["spec"], "pytorchReplicaSpecs")
    assert size == (min_available or 3)
    pods = wait_pods(kube, ns, 3)
    assert names(pods) == ["resnet-master-0", "resnet-worker-0", "resnet-worker-1"]
    for pod in pods:
        assert_gang(pod, job, "resnet", size)


def test_tfjob_pods_form_one_gang(kube: Kube) -> None:
    ns = kube.namespace()
    job = kube.create(ns, tfjob("mnist", OPTED_IN))
    size = training_size(job["spec"], "tfReplicaSpecs")  # Chief without replicas counts as 1
    assert size == 4
    pods = wait_pods(kube, ns, size)
    assert names(pods) == ["mnist-chief-0", "mnist-ps-0", "mnist-worker-0", "mnist-worker-1"]
    for pod in pods:
        assert_gang(pod, job, "mnist", size)


@pytest.mark.parametrize("kind", TRAINING_KINDS)
def test_other_training_operator_jobs_form_one_gang(kube: Kube, kind: str) -> None:
    ns = kube.namespace()
    job = kube.create(ns, training_job(kind, "job", OPTED_IN))
    field, replicas = TRAINING_KINDS[kind]
    size = training_size(job["spec"], field)
    pods = wait_pods(kube, ns, size)
    assert names(pods) == sorted(f"job-{t.lower()}-{i}" for t, n in replicas.items() for i in range(n))
    for pod in pods:
        assert_gang(pod, job, "job", size)


def test_root_annotations_override_the_group_name_and_size(kube: Kube) -> None:
    ns = kube.namespace()
    job = kube.create(ns, pytorchjob("resnet", {**OPTED_IN, GROUP_NAME: "team-a.resnet", MIN_AVAILABLE: "2"}))
    assert training_size(job["spec"], "pytorchReplicaSpecs") == 3  # the override asks for fewer
    for pod in wait_pods(kube, ns, 3):
        assert_gang(pod, job, "team-a.resnet", 2)
    assert len(kube.pods(ns, f"{GROUP}=team-a.resnet")) == 3


def test_namespace_label_gangs_an_unannotated_pytorchjob(kube: Kube) -> None:
    ns = kube.namespace({OPT_IN: "enabled"})
    job = kube.create(ns, pytorchjob("bert", {}))
    for pod in wait_pods(kube, ns, 3):
        assert_gang(pod, job, "bert", training_size(job["spec"], "pytorchReplicaSpecs"))


def test_root_opt_out_beats_the_namespace_label(kube: Kube) -> None:
    ns = kube.namespace({OPT_IN: "enabled"})
    kube.create(ns, pytorchjob("bert", {OPT_IN: "false"}))
    for pod in wait_running(kube, ns, 3):
        assert_plain(pod)


def test_disabled_namespace_is_never_touched_even_for_an_opted_in_root(kube: Kube) -> None:
    ns = kube.namespace({OPT_IN: "disabled"})
    kube.create(ns, pytorchjob("bert", OPTED_IN))
    for pod in wait_running(kube, ns, 3):
        assert_plain(pod)


# --- MPIJob v2beta1 (mpi-operator) -----------------------------------------------------------------------------

def test_mpijob_launcher_and_workers_are_one_gang(kube: Kube) -> None:
    ns = kube.namespace()
    job = kube.create(ns, mpijob("allreduce", OPTED_IN))
    size = job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] + 1
    pods = wait_pods(kube, ns, size)
    assert [p for p in names(pods) if p.startswith("allreduce-launcher-")]  # the launcher Job's pod
    assert [p for p in names(pods) if p.startswith("allreduce-worker-")] == ["allreduce-worker-0", "allreduce-worker-1"]
    for pod in pods:  # the launcher's owner chain (pod -> Job -> MPIJob) ends at the MPIJob too
        assert_gang(pod, job, "allreduce", size)


def test_mpijob_wait_for_workers_ready_workers_announce_the_launcher(kube: Kube) -> None:
    ns = kube.namespace()
    job = kube.create(ns, mpijob("allreduce", OPTED_IN, policy="WaitForWorkersReady"))
    spec = job["spec"]
    size = spec["mpiReplicaSpecs"]["Worker"]["replicas"] + 1
    launcher = template_member("launcher", 1, spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"])
    workers = wait_pods(kube, ns, size - 1)
    assert names(workers) == ["allreduce-worker-0", "allreduce-worker-1"]
    for pod in workers:
        assert_gang(pod, job, "allreduce", size, [launcher])
    stays(lambda: not kube.jobs(ns) and len(kube.pods(ns)) == size - 1,
          "the launcher Job must not be created while the workers are gated")


# --- JobSet ----------------------------------------------------------------------------------------------------

REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"


def test_jobset_pods_form_one_gang(kube: Kube) -> None:
    ns = kube.namespace()
    js = kube.create(ns, jobset("llm", OPTED_IN))
    size = jobset_size(js["spec"])
    assert size == 5  # 2 Jobs × min(parallelism 3, completions 2) + 1
    pods = wait_pods(kube, ns, size)
    assert sorted(j["metadata"]["name"] for j in kube.jobs(ns)) == ["llm-ps-0", "llm-workers-0", "llm-workers-1"]
    for pod in pods:
        assert_gang(pod, js, "llm", size)


@pytest.mark.parametrize("stages", ["dependsOn", "InOrder"])
def test_jobset_first_stage_announces_the_later_replicated_jobs(kube: Kube, stages: str) -> None:
    ns = kube.namespace()
    js = kube.create(ns, jobset("pipeline", OPTED_IN, stages))
    first, *later = js["spec"]["replicatedJobs"]
    size = jobset_size(js["spec"])
    expected = [{**template_member(r["name"], replicated_job_pods(r), r["template"]["spec"]["template"]["spec"]),
                 "perChild": job_pods(r["template"]["spec"])} for r in later]  # each child Job's share
    [pod] = wait_pods(kube, ns, replicated_job_pods(first))
    assert pod["metadata"]["labels"][REPLICATED_JOB] == first["name"]
    assert_gang(pod, js, "pipeline", size, expected)
    stays(lambda: names(kube.jobs(ns)) == [f"pipeline-{first['name']}-0"] and len(kube.pods(ns)) == 1,
          "later replicated jobs must not start while the first stage is gated")


# --- TrainJob (Kubeflow Trainer v2) ----------------------------------------------------------------------------


def test_trainjob_pods_form_one_gang_computed_from_its_jobset(kube: Kube) -> None:
    ns = kube.namespace()
    runtime = f"torch-distributed-{ns}"  # cluster-scoped, like the runtimes the trainer ships
    kube.create(ns, training_runtime(runtime, initializer=False, kind="ClusterTrainingRuntime"))
    train = kube.create(ns, trainjob("fine-tune", OPTED_IN, runtime, kind="ClusterTrainingRuntime"))
    size = train["spec"]["trainer"]["numNodes"]  # 1 replicated job × parallelism = completions = numNodes
    pods = wait_pods(kube, ns, size)
    jobset_obj = kube.get(ns, "jobset.x-k8s.io/v1alpha2", "JobSet", "fine-tune")
    assert OPT_IN not in (jobset_obj["metadata"].get("annotations") or {})  # the opt-in is read on the TrainJob
    for pod in pods:
        assert_gang(pod, train, "fine-tune", size)


def test_trainjob_initializer_announces_the_trainer_nodes(kube: Kube) -> None:
    ns = kube.namespace()
    runtime = kube.create(ns, training_runtime("torch-with-initializer", initializer=True))
    train = kube.create(ns, trainjob("fine-tune", OPTED_IN, "torch-with-initializer"))
    nodes = train["spec"]["trainer"]["numNodes"]
    node_template = runtime["spec"]["template"]["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]
    node = {"role": "node", "count": nodes, "requests": TRAINER_RESOURCES["requests"], "nodeSelector": {},
            "tolerations": node_template["tolerations"], "affinity": None,  # the trainer's resourcesPerNode
            "perChild": nodes}  # one child Job of numNodes pods
    [pod] = wait_pods(kube, ns, 1)
    assert pod["metadata"]["labels"][REPLICATED_JOB] == "dataset-initializer"
    assert_gang(pod, train, "fine-tune", 1 + nodes, [node])
    stays(lambda: names(kube.jobs(ns)) == ["fine-tune-dataset-initializer-0"] and len(kube.pods(ns)) == 1,
          "the trainer nodes must not start while the initializer is gated")


# --- KubeRay ---------------------------------------------------------------------------------------------------

NODE_TYPE = "ray.io/node-type"


@pytest.mark.parametrize("autoscaling", [False, True], ids=["replicas", "in-tree-autoscaling"])
def test_raycluster_head_and_workers_form_one_gang(kube: Kube, autoscaling: bool) -> None:
    ns = kube.namespace()
    cluster = kube.create(ns, raycluster("ray", OPTED_IN, autoscaling))
    size = ray_size(cluster["spec"])
    assert size == (2 if autoscaling else 5)
    pods = wait_pods(kube, ns, size)
    assert [p["metadata"]["labels"][NODE_TYPE] for p in pods].count("head") == 1
    for pod in pods:
        assert_gang(pod, cluster, "ray", size)


def test_rayjob_cluster_is_gated_and_its_submitter_never_appears(kube: Kube) -> None:
    ns = kube.namespace()
    job = kube.create(ns, rayjob("train", OPTED_IN))
    size = ray_size(job["spec"]["rayClusterSpec"])
    pods = wait_pods(kube, ns, size)
    assert {p["metadata"]["labels"]["ray.io/cluster"] for p in pods} == {
        kube.get(ns, "ray.io/v1", "RayJob", "train")["status"]["rayClusterName"]}
    for pod in pods:  # one gang named after the RayJob, the root of pod -> RayCluster -> RayJob
        assert_gang(pod, job, "train", size)
    # the submitter Job is created only once the cluster is ready; gated, it never is
    stays(lambda: not kube.jobs(ns) and len(kube.pods(ns)) == size, "no submitter while the cluster is gated")


def test_rayjob_without_opt_in_runs_and_its_submitter_pod_is_not_gated(kube: Kube) -> None:
    ns = kube.namespace()
    job = kube.create(ns, rayjob("train", {}))
    size = ray_size(job["spec"]["rayClusterSpec"])
    pods = wait_running(kube, ns, size + 1)
    [submitter] = [p for p in pods if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name")
                   == "train"]
    assert names(kube.jobs(ns)) == ["train"]
    for pod in pods:
        assert_plain(pod)
    assert submitter["spec"]["containers"][0]["name"] == "ray-job-submitter"


def test_rayservice_gang_is_named_after_its_raycluster(kube: Kube) -> None:
    ns = kube.namespace()
    service = kube.create(ns, rayservice("serve", OPTED_IN))
    size = ray_size(service["spec"]["rayClusterConfig"])
    pods = wait_pods(kube, ns, size)
    [cluster_name] = {p["metadata"]["labels"]["ray.io/cluster"] for p in pods}
    assert cluster_name.startswith("serve-raycluster-")
    for pod in pods:
        assert_gang(pod, service, cluster_name, size)


# --- LeaderWorkerSet -------------------------------------------------------------------------------------------


def _lws_group(pod: Obj, name: str) -> str:
    match = re.fullmatch(rf"{name}-(\d+)(?:-\d+)?", pod["metadata"]["name"])
    assert match, pod["metadata"]["name"]
    return match[1]


def test_leaderworkerset_each_group_is_a_gang(kube: Kube) -> None:
    ns = kube.namespace()
    obj = kube.create(ns, lws("vllm", OPTED_IN))
    replicas, size = obj["spec"]["replicas"], obj["spec"]["leaderWorkerTemplate"]["size"]
    pods = wait_pods(kube, ns, replicas * size)
    assert names(pods) == ["vllm-0", "vllm-0-1", "vllm-0-2", "vllm-1", "vllm-1-1", "vllm-1-2"]
    groups = set()
    for pod in pods:
        revision = pod["metadata"]["labels"][LWS_REVISION]  # the operator's template revision
        group = f"vllm-{_lws_group(pod, 'vllm')}-{revision}"
        groups.add(group)
        assert_gang(pod, obj, group, size)
    assert len(groups) == replicas  # groups are independent gangs

    def indexed() -> bool:  # LWS's pod labels arrive by UPDATE after CREATE; /validate must let them through
        return all({"leaderworkerset.sigs.k8s.io/group-index", "leaderworkerset.sigs.k8s.io/worker-index"}
                   <= set(p["metadata"]["labels"]) for p in kube.pods(ns))

    wait_for(indexed, TIMEOUT, lambda: f"LWS index labels on every pod in {ns}")
    for pod in kube.pods(ns):  # and the gang labels are unchanged by it
        assert_gang(pod, obj, f"vllm-{_lws_group(pod, 'vllm')}-{pod['metadata']['labels'][LWS_REVISION]}", size)


def test_leaderworkerset_leader_ready_leaders_announce_their_workers(kube: Kube) -> None:
    ns = kube.namespace()
    obj = kube.create(ns, lws("vllm", OPTED_IN, startup="LeaderReady"))
    template = obj["spec"]["leaderWorkerTemplate"]
    size = template["size"]
    workers = template_member("worker", size - 1, template["workerTemplate"]["spec"])
    leaders = wait_pods(kube, ns, obj["spec"]["replicas"])
    assert names(leaders) == ["vllm-0", "vllm-1"]
    for pod in leaders:
        group = f"vllm-{_lws_group(pod, 'vllm')}-{pod['metadata']['labels'][LWS_REVISION]}"
        assert_gang(pod, obj, group, size, [workers])
    stays(lambda: names(kube.statefulsets(ns)) == ["vllm"] and len(kube.pods(ns)) == 2,
          "no worker StatefulSet may be created while the leaders are gated")


# --- batch Job -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("parallelism", "completions", "indexed"), [(3, 5, False), (4, 2, True)],
                         ids=["parallelism", "indexed-completions"])
def test_batch_job_pods_running_at_once_form_the_gang(kube: Kube, parallelism: int, completions: int,
                                                      indexed: bool) -> None:
    ns = kube.namespace()
    job = kube.create(ns, batch_job("etl", OPTED_IN, parallelism, completions, indexed))
    size = job_pods(job["spec"])
    pods = wait_pods(kube, ns, size)
    for pod in pods:  # generateName pods: no name at admission
        assert pod["metadata"]["name"].startswith("etl-")
        assert_gang(pod, job, "etl", size)
    stays(lambda: len(kube.pods(ns)) == size, "the Job controller keeps min(parallelism, completions) pods")


# --- Argo Workflow ---------------------------------------------------------------------------------------------


def test_workflow_with_min_available_is_a_gang(kube: Kube) -> None:
    ns = kube.namespace()
    wf = kube.create(ns, workflow("pipeline", {**OPTED_IN, MIN_AVAILABLE: "2"}))
    pods = wait_pods(kube, ns, 2)  # the first step group
    for pod in pods:
        assert pod["metadata"]["labels"]["workflows.argoproj.io/workflow"] == "pipeline"
        assert_gang(pod, wf, "pipeline", int(wf["metadata"]["annotations"][MIN_AVAILABLE]))


def test_workflow_without_min_available_is_not_gated_and_runs(kube: Kube) -> None:
    ns = kube.namespace()
    kube.create(ns, workflow("pipeline", OPTED_IN))  # opted in, but no static gang exists
    for pod in wait_running(kube, ns, 2):
        assert_plain(pod)


# --- the same roots without opt-in: untouched, scheduled by the default scheduler, all stages start -------------

UNOPTED: dict[str, tuple[Callable[[], Obj], int]] = {
    # (root, pods once every stage has started); later stages appear because nothing is gated
    "spark": (lambda: spark_app("spark-pi", {}), 1 + 2),
    "pytorchjob": (lambda: pytorchjob("resnet", {}), 3),
    "tfjob": (lambda: tfjob("mnist", {}), 4),
    "mpijob": (lambda: mpijob("allreduce", {}), 3),
    "mpijob-wait-for-workers-ready": (lambda: mpijob("allreduce", {}, policy="WaitForWorkersReady"), 3),
    "jobset": (lambda: jobset("llm", {}), 5),
    "jobset-dependsOn": (lambda: jobset("pipeline", {}, "dependsOn"), 1 + 4),
    "jobset-InOrder": (lambda: jobset("pipeline", {}, "InOrder"), 1 + 2 + 1),
    "raycluster": (lambda: raycluster("ray", {}), 5),
    "rayservice": (lambda: rayservice("serve", {}), 5),
    "leaderworkerset": (lambda: lws("vllm", {}), 6),
    "leaderworkerset-LeaderReady": (lambda: lws("vllm", {}, startup="LeaderReady"), 6),
    "job": (lambda: batch_job("etl", {}), 3),
    "workflow": (lambda: workflow("pipeline", {}), 2),
    **{kind.lower(): (lambda kind=kind: training_job(kind, "job", {}),
                      sum(TRAINING_KINDS[kind][1].values())) for kind in TRAINING_KINDS},
}


@pytest.mark.parametrize("kind", UNOPTED)
def test_root_without_opt_in_runs_ungated_with_the_default_scheduler(kube: Kube, kind: str) -> None:
    build, count = UNOPTED[kind]
    ns = kube.namespace()
    kube.create(ns, build())
    for pod in wait_running(kube, ns, count):
        assert_plain(pod)


def test_trainjob_without_opt_in_runs_ungated(kube: Kube) -> None:
    ns = kube.namespace()
    kube.create(ns, training_runtime("torch-distributed", initializer=False))
    train = kube.create(ns, trainjob("fine-tune", {}, "torch-distributed"))
    for pod in wait_running(kube, ns, train["spec"]["trainer"]["numNodes"]):
        assert_plain(pod)

"""End-to-end gang admission on the local cluster: root object in, operator pods out, webhook in between.

One local cluster (apiserver, scheduler, kubelet, every emulated operator) with the real ``kubenexus webhook``
(default settings) registered for pod admission. Each test creates a realistic root object through the official
Python client in its own namespace, lets the emulated operator create the pods, and checks the pods as the
apiserver stored them, i.e. after the webhook's patch was applied.

Gang sizes and expected members are computed here from the spec by the documented formulas
(/work/shared/operators.md, README "Supported operators"), never taken from the product. Gated pods never run in
this milestone (the gate controller that releases them comes later), so for staged gangs only the first stage
exists: the tests assert it and that the later stage has not appeared after a short wait. The same roots without
opt-in run to completion of their startup (all stages) with the default scheduler.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import pytest
from kubernetes import client, config

from cluster.local import LocalCluster
from kubenexus.local_webhook import LocalWebhook, register
from tests.conftest import wait_for
from tests.contract import (
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

Obj = dict[str, Any]
TIMEOUT = 15.0  # every bounded wait
SETTLE = 1.5  # an ungated next stage appears within ~0.8 s here: one that has not after this is held back
WEBHOOK_IDENTITY = "system:serviceaccount:kubenexus-system:kubenexus-webhook"
DEFAULT_SCHEDULER = "default-scheduler"
OPTED_IN = {OPT_IN: "true"}
IMAGE = "registry.example.com/ml/train:1.0"
TOLERATION = {"key": "example.com/accelerator", "operator": "Exists", "effect": "NoSchedule"}
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
LWS_REVISION = "leaderworkerset.sigs.k8s.io/template-revision-hash"
CLUSTER_SCOPED = ("ClusterTrainingRuntime",)


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


def training_size(spec: Obj, field: str) -> int:
    """runPolicy.schedulingPolicy.minAvailable, else Σ replicas (a replica spec without replicas is 1 pod)."""
    minimum = ((spec.get("runPolicy") or {}).get("schedulingPolicy") or {}).get("minAvailable")
    return minimum or sum(r.get("replicas", 1) for r in spec[field].values())


def job_pods(job_spec: Obj) -> int:
    parallelism = job_spec.get("parallelism", 1)
    completions = job_spec.get("completions")
    return parallelism if completions is None else min(parallelism, completions)


def replicated_pods(rjob: Obj) -> int:
    return rjob.get("replicas", 1) * job_pods(rjob["template"]["spec"])


def jobset_size(spec: Obj) -> int:
    return sum(replicated_pods(r) for r in spec["replicatedJobs"])


def ray_size(spec: Obj) -> int:
    """1 head + Σ clamp(replicas, min, max) × numOfHosts; minReplicas instead of replicas under autoscaling."""
    total = 1
    for group in spec.get("workerGroupSpecs") or []:
        low, high = group.get("minReplicas", 0), group.get("maxReplicas", 2**31)
        wanted = low if spec.get("enableInTreeAutoscaling") else group.get("replicas", 0)
        total += max(low, min(wanted, high)) * group.get("numOfHosts", 1)
    return total


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


def container(name: str, cpu: str = "100m", memory: str = "64Mi", image: str = IMAGE) -> Obj:
    return {"name": name, "image": image, "resources": {"requests": {"cpu": cpu, "memory": memory}}}


def pod_spec(name: str, cpu: str = "100m", memory: str = "64Mi", **extra: Any) -> Obj:
    return {"containers": [container(name, cpu, memory)], **extra}


def meta(name: str, annotations: Obj) -> Obj:
    return {"name": name, "annotations": dict(annotations)}


def spark_app(name: str, annotations: Obj, python: bool = False) -> Obj:
    spec: Obj = {"type": "Scala", "mode": "cluster", "image": "apache/spark:3.5.3", "sparkVersion": "3.5.3",
                 "mainClass": "org.apache.spark.examples.SparkPi",
                 "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples_2.12-3.5.3.jar",
                 "restartPolicy": {"type": "Never"},
                 "driver": {"coreRequest": "100m", "cores": 1, "memory": "512m"},
                 "executor": {"instances": 2, "coreRequest": "100m", "cores": 1, "memory": "512m"}}
    if python:
        spec.update(type="Python", pythonVersion="3", mainApplicationFile="local:///opt/spark/examples/src/pi.py",
                    dynamicAllocation={"enabled": True, "initialExecutors": 3, "minExecutors": 2, "maxExecutors": 6})
        spec.pop("mainClass")
        spec["executor"] = {"instances": 1, "coreRequest": "250m", "cores": 1, "memory": "1g",
                            "nodeSelector": {"example.com/pool": "spark"}, "tolerations": [TOLERATION]}
    return {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
            "metadata": meta(name, annotations), "spec": spec}


def _replica(replicas: int | None, name: str) -> Obj:
    replica: Obj = {"restartPolicy": "OnFailure", "template": {"spec": pod_spec(name)}}
    if replicas is not None:
        replica["replicas"] = replicas
    return replica


def pytorchjob(name: str, annotations: Obj, min_available: int | None = None) -> Obj:
    spec: Obj = {"pytorchReplicaSpecs": {"Master": _replica(1, "pytorch"), "Worker": _replica(2, "pytorch")}}
    if min_available:
        spec["runPolicy"] = {"schedulingPolicy": {"minAvailable": min_available}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta(name, annotations), "spec": spec}


TRAINING_KINDS = {  # kind: (replica field, replica specs)
    "XGBoostJob": ("xgbReplicaSpecs", {"Master": 1, "Worker": 2}),
    "PaddleJob": ("paddleReplicaSpecs", {"Master": 1, "Worker": 3}),
    "JAXJob": ("jaxReplicaSpecs", {"Worker": 2}),
}


def training_job(kind: str, name: str, annotations: Obj) -> Obj:
    field, replicas = TRAINING_KINDS[kind]
    return {"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": meta(name, annotations),
            "spec": {field: {t: _replica(n, kind.lower().removesuffix("job")) for t, n in replicas.items()}}}


def tfjob(name: str, annotations: Obj) -> Obj:
    spec = {"tfReplicaSpecs": {"Chief": _replica(None, "tensorflow"), "PS": _replica(1, "tensorflow"),
                               "Worker": _replica(2, "tensorflow")}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": meta(name, annotations), "spec": spec}


def mpijob(name: str, annotations: Obj, policy: str | None = None) -> Obj:
    spec: Obj = {"slotsPerWorker": 1, "runPolicy": {"cleanPodPolicy": "Running"},
                 "sshAuthMountPath": "/home/mpiuser/.ssh",
                 "mpiReplicaSpecs": {
                     "Launcher": {"replicas": 1, "template": {"spec": pod_spec(
                         "mpi-launcher", "200m", "128Mi", tolerations=[TOLERATION])}},
                     "Worker": {"replicas": 2, "template": {"spec": pod_spec("mpi-worker")}}}}
    if policy:
        spec["launcherCreationPolicy"] = policy
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": meta(name, annotations), "spec": spec}


def _rjob(name: str, replicas: int, parallelism: int | None = None, completions: int | None = None,
          depends_on: str | None = None, spec: Obj | None = None) -> Obj:
    job: Obj = {"template": {"spec": {"restartPolicy": "Never", **(spec or pod_spec(name))}}}
    if parallelism is not None:
        job["parallelism"] = parallelism
    if completions is not None:
        job["completions"] = completions
    rjob: Obj = {"name": name, "replicas": replicas, "template": {"spec": job}}
    if depends_on:
        rjob["dependsOn"] = [{"name": depends_on, "status": "Ready"}]
    return rjob


STAGE_SPEC = pod_spec("trainer", "300m", "256Mi", tolerations=[TOLERATION])


def jobset(name: str, annotations: Obj, stages: str = "") -> Obj:
    """``stages``: "" (one stage), "dependsOn" or "InOrder"."""
    spec: Obj
    if stages == "dependsOn":
        spec = {"replicatedJobs": [_rjob("driver", 1),
                                   _rjob("workers", 2, 2, 2, depends_on="driver", spec=STAGE_SPEC)]}
    elif stages == "InOrder":
        spec = {"startupPolicy": {"startupPolicyOrder": "InOrder"},
                "replicatedJobs": [_rjob("init", 1), _rjob("workers", 1, 2, 2, spec=STAGE_SPEC),
                                   _rjob("eval", 1, spec=STAGE_SPEC)]}
    else:  # parallelism 3 but only 2 completions: 2 pods per Job
        spec = {"replicatedJobs": [_rjob("workers", 2, 3, 2), _rjob("ps", 1)]}
    spec["network"] = {"enableDNSHostnames": True}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta(name, annotations),
            "spec": spec}


def training_runtime(name: str, initializer: bool, kind: str = "TrainingRuntime") -> Obj:
    """A Kubeflow Trainer runtime; with ``initializer`` the trainer waits for a dataset initializer."""
    node: Obj = {"name": "node", "template": {"metadata": {"labels": {ANCESTOR: "trainer"}}, "spec": {"template": {
        "spec": {"restartPolicy": "Never", "tolerations": [TOLERATION],
                 "containers": [{"name": "node", "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"}]}}}}}
    jobs = [node]
    if initializer:
        node["dependsOn"] = [{"name": "dataset-initializer", "status": "Complete"}]
        jobs.insert(0, {"name": "dataset-initializer", "template": {
            "metadata": {"labels": {ANCESTOR: "dataset-initializer"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                container("dataset-initializer", "200m", "128Mi", "ghcr.io/kubeflow/trainer/dataset-initializer")]}}}}})
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind, "metadata": {"name": name},
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
                     "template": {"spec": {"replicatedJobs": jobs}}}}


TRAINER_RESOURCES = {"requests": {"cpu": "150m", "memory": "96Mi"}}


def trainjob(name: str, annotations: Obj, runtime: str, kind: str = "TrainingRuntime") -> Obj:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": meta(name, annotations),
            "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": kind, "name": runtime},
                     "trainer": {"numNodes": 3, "image": "registry.example.com/ml/fine-tune:2.0",
                                 "command": ["torchrun", "train.py"], "resourcesPerNode": TRAINER_RESOURCES}}}


def ray_cluster_spec(autoscaling: bool = False) -> Obj:
    def group(name: str, replicas: int, low: int, high: int, hosts: int = 1) -> Obj:
        return {"groupName": name, "replicas": replicas, "minReplicas": low, "maxReplicas": high, "numOfHosts": hosts,
                "rayStartParams": {}, "template": {"spec": pod_spec("ray-worker")}}

    spec: Obj = {"rayVersion": "2.41.0",
                 "headGroupSpec": {"rayStartParams": {"dashboard-host": "0.0.0.0"}, "template": {"spec": {
                     "containers": [container("ray-head", image="rayproject/ray:2.41.0")]}}},
                 # clamp(2, 1, 3) = 2 small workers; clamp(5, 0, 1) = 1 replica of a 2-host group
                 "workerGroupSpecs": [group("small", 2, 1, 3), group("multihost", 5, 0, 1, hosts=2)]}
    if autoscaling:
        spec["enableInTreeAutoscaling"] = True
    return spec


def raycluster(name: str, annotations: Obj, autoscaling: bool = False) -> Obj:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta(name, annotations),
            "spec": ray_cluster_spec(autoscaling)}


def rayjob(name: str, annotations: Obj) -> Obj:
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta(name, annotations),
            "spec": {"entrypoint": "python /home/ray/samples/sample_code.py", "shutdownAfterJobFinishes": True,
                     "rayClusterSpec": ray_cluster_spec()}}


def rayservice(name: str, annotations: Obj) -> Obj:
    return {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": meta(name, annotations),
            "spec": {"serveConfigV2": "applications: []\n", "rayClusterConfig": ray_cluster_spec()}}


LWS_WORKER_SPEC = pod_spec("worker", "100m", "64Mi", tolerations=[TOLERATION])


def lws(name: str, annotations: Obj, startup: str | None = None) -> Obj:
    spec: Obj = {"replicas": 2, "leaderWorkerTemplate": {
        "size": 3, "restartPolicy": "RecreateGroupOnPodRestart",
        "leaderTemplate": {"spec": pod_spec("leader", "200m", "128Mi")}, "workerTemplate": {"spec": LWS_WORKER_SPEC}}}
    if startup:
        spec["startupPolicy"] = startup
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": meta(name, annotations), "spec": spec}


def batch_job(name: str, annotations: Obj, parallelism: int = 3, completions: int = 5, indexed: bool = False) -> Obj:
    spec: Obj = {"parallelism": parallelism, "completions": completions, "backoffLimit": 2,
                 "template": {"spec": {"restartPolicy": "Never", **pod_spec("main")}}}
    if indexed:
        spec["completionMode"] = "Indexed"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta(name, annotations), "spec": spec}


def workflow(name: str, annotations: Obj) -> Obj:
    """Steps: two pods in parallel, then a third once both succeeded."""
    work = {"name": "work", "container": {"image": "busybox:1.36", "command": ["sh", "-c", "sleep 30"],
                                          "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}}}}
    steps = [[{"name": "prepare-a", "template": "work"}, {"name": "prepare-b", "template": "work"}],
             [{"name": "train", "template": "work"}]]
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": meta(name, annotations),
            "spec": {"entrypoint": "main", "templates": [{"name": "main", "steps": steps}, work]}}


# --- cluster, webhook, client ----------------------------------------------------------------------------------


class Kube:
    """The official client, returning plain dicts exactly as the apiserver serialised them."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)

    def namespace(self, labels: dict[str, str] | None = None) -> str:
        name = f"e2e-{uuid.uuid4().hex[:8]}"
        self.core.create_namespace({"metadata": {"name": name, "labels": labels or {}}})
        return name

    def create(self, ns: str, obj: Obj) -> Obj:
        if obj["apiVersion"] == "batch/v1":
            return self.api_client.sanitize_for_serialization(self.batch.create_namespaced_job(ns, obj))
        group, version = obj["apiVersion"].split("/")
        if obj["kind"] in CLUSTER_SCOPED:
            return self.custom.create_cluster_custom_object(group, version, obj["kind"].lower() + "s", obj)
        return self.custom.create_namespaced_custom_object(group, version, ns, obj["kind"].lower() + "s", obj)

    def get(self, ns: str, api_version: str, kind: str, name: str) -> Obj:
        group, version = api_version.split("/")
        return self.custom.get_namespaced_custom_object(group, version, ns, kind.lower() + "s", name)

    @staticmethod
    def _items(response: Any) -> list[Obj]:
        return sorted(json.loads(response.data)["items"], key=lambda o: o["metadata"]["name"])

    def pods(self, ns: str, selector: str = "") -> list[Obj]:
        return self._items(self.core.list_namespaced_pod(ns, label_selector=selector, _preload_content=False))

    def jobs(self, ns: str) -> list[Obj]:
        return self._items(self.batch.list_namespaced_job(ns, _preload_content=False))

    def statefulsets(self, ns: str) -> list[Obj]:
        return self._items(self.apps.list_namespaced_stateful_set(ns, _preload_content=False))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(workdir=str(tmp_path_factory.mktemp("e2e-cluster"))) as running:
        running.run_components()
        yield running


@contextlib.contextmanager
def admitted(cluster: LocalCluster, workdir: Any, tls: Any) -> Iterator[Kube]:
    """The admin client, with ``kubenexus webhook`` (default settings) running and registered for pod admission."""
    hook = LocalWebhook(workdir, tls, cluster.add_user(WEBHOOK_IDENTITY), {})
    try:
        hook.wait_ready()
        api = Kube(config.new_client_from_config(cluster.kubeconfig))
        register(client.AdmissionregistrationV1Api(api.api_client), hook)
        yield api
    finally:
        hook.stop()


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


def running(pod: Obj) -> bool:
    return bool(pod["spec"].get("nodeName")) and (pod.get("status") or {}).get("phase") == "Running"


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


def stays(check: Callable[[], bool], what: str, seconds: float = SETTLE) -> None:
    """``check`` holds throughout ``seconds``: something that must not happen does not."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert check(), what
        time.sleep(0.05)


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
    expected = [template_member(r["name"], replicated_pods(r), r["template"]["spec"]["template"]["spec"])
                for r in later]
    [pod] = wait_pods(kube, ns, replicated_pods(first))
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
            "tolerations": node_template["tolerations"], "affinity": None}  # the trainer's resourcesPerNode
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

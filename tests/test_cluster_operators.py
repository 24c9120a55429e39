"""The emulator's operators, with no webhook installed: pods appear with each operator's documented names,
labels and owner chains (/work/shared/operators.md), in the documented stages, and exactly once.

Staging is made deterministic by holding first-stage pods Pending with a nodeSelector no node matches, checking
that the next stage does not appear, then labelling a node ("release") so they run. Pods that must finish are
marked Succeeded by the test, standing in for the kubelet. Expected values are worked by hand.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from cluster.controllers import Client, Loop
from cluster.crds import crd_manifests
from cluster.kubelet import Kubelet
from cluster.local import ADMIN, LocalCluster
from cluster.operators.base import Operator
from cluster.operators.table import OPERATORS, start_operators
from cluster.scheduler import Scheduler
from tests.support.polling import wait_for
from workloads.ray.emulator import group_size
from workloads.spark.emulator import executor_count, resources

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
HOLD = "test.kubenexus.io/release"


@dataclass
class Env:
    cluster: LocalCluster
    admin: Client

    def list(self, group: str, version: str, plural: str, ns: str) -> list[Obj]:
        resource = self.cluster.registry.get(group, version, plural)
        assert resource is not None
        return self.cluster.store.list(resource, ns)[0]

    def pods(self, ns: str) -> list[Obj]:
        return self.list("", "v1", "pods", ns)

    def jobs(self, ns: str) -> list[Obj]:
        return self.list("batch", "v1", "jobs", ns)

    def get(self, api_version: str, kind: str, ns: str, name: str) -> Obj:
        resource = self.cluster.registry.by_kind(api_version, kind)
        assert resource is not None
        return self.cluster.store.get(resource, ns, name)

    def create(self, api_version: str, plural: str, ns: str, obj: Obj) -> Obj:
        base = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
        return self.admin.create(f"{base}/namespaces/{ns}/{plural}", obj)

    def release(self, ns: str) -> None:
        """Label a node so that the pods held by ``hold(ns)`` can be scheduled."""
        self.admin.patch("/api/v1/nodes/node-0", {"metadata": {"labels": {f"{HOLD}-{ns}"[-63:]: "yes"}}})

    def succeed(self, pod: Obj) -> None:
        """Finish a running pod, as its kubelet would."""
        meta = pod["metadata"]
        wait_for(lambda: self.get("v1", "Pod", meta["namespace"], meta["name"])["status"]["phase"] == "Running")
        self.admin.patch(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                         {"status": {"phase": "Succeeded"}})

    def added(self, ns: str, name: str) -> Obj:
        """The pod exactly as it was first stored (before any later patch), from the watch history."""
        resource = self.cluster.registry.get("", "v1", "pods")
        assert resource is not None
        for event in self.cluster.store.watch(resource, ns, 0, time.monotonic() + 0.05, lambda o: True):
            if not isinstance(event, int) and event.type == "ADDED" and event.obj["metadata"]["name"] == name:
                return event.obj
        raise AssertionError(f"no ADDED event for pod {ns}/{name}")


def hold(ns: str) -> Obj:
    return {f"{HOLD}-{ns}"[-63:]: "yes"}


def stays(check: Callable[[], Any], seconds: float = 0.6) -> None:
    """``check`` holds throughout ``seconds`` (something must NOT happen yet, or must not change)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert check(), "condition stopped holding"
        time.sleep(0.02)


def container(name: str = "main", cpu: str = "100m", memory: str = "64Mi") -> Obj:
    return {"name": name, "image": "registry.example.com/app:1.0", "resources": {"requests": {"cpu": cpu,
                                                                                               "memory": memory}}}


def template(node_selector: Obj | None = None, name: str = "main", **meta: Any) -> Obj:
    spec: Obj = {"containers": [container(name)], "restartPolicy": "Never"}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"metadata": meta, "spec": spec} if meta else {"spec": spec}


def controller(obj: Obj) -> Obj:
    refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")]
    assert len(refs) == 1, obj["metadata"].get("ownerReferences")
    return refs[0]


def chain(env: Env, obj: Obj) -> list[str]:
    """``Kind/name`` of ``obj`` and each controller above it, up to the root."""
    out = [f"{obj['kind']}/{obj['metadata']['name']}"]
    while obj["metadata"].get("ownerReferences"):
        ref = controller(obj)
        assert ref.get("blockOwnerDeletion") is True or ref["kind"] == "Pod"
        obj = env.get(ref["apiVersion"], ref["kind"], obj["metadata"]["namespace"], ref["name"])
        assert obj["metadata"]["uid"] == ref["uid"]
        out.append(f"{obj['kind']}/{obj['metadata']['name']}")
    return out


def named(pods: list[Obj], pattern: str) -> list[Obj]:
    return [p for p in pods if re.fullmatch(pattern, p["metadata"]["name"])]


def by_name(objs: list[Obj]) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in objs}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    cluster = LocalCluster(workdir=str(tmp_path_factory.mktemp("operators")))
    admin = Client(cluster.api, ADMIN)
    for crd in crd_manifests():
        admin.create(CRDS, crd)
    loops: list[Loop] = [Scheduler(cluster.api), Kubelet(cluster.api, start_seconds=0.05)]
    for loop in loops:
        loop.start()
    loops += start_operators(cluster.api)
    yield Env(cluster, admin)
    for loop in loops:
        loop.stop()  # (not join(): Loop's _stop attribute shadows Thread._stop)


@pytest.fixture
def ns(env: Env) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    env.admin.create("/api/v1/namespaces", {"metadata": {"name": name}})
    return name


# --- the table and the CRDs ---------------------------------------------------------------------------------


def test_operator_table_is_one_interface() -> None:
    for name, cls in OPERATORS.items():
        assert issubclass(cls, Operator), name
        assert len(cls.root) == 3 and len(cls.identity) == 2, name


def test_start_operators_starts_the_named_subset(env: Env) -> None:
    loops = start_operators(env.cluster.api, ["job-controller"])
    try:
        assert [loop.name for loop in loops] == ["job-controller"] and loops[0].is_alive()
        assert loops[0].client.user.username == "system:serviceaccount:kube-system:job-controller"
    finally:
        loops[0].stop()


def test_crds_are_minimal_and_served(env: Env) -> None:
    manifests = {m["spec"]["names"]["kind"]: m for m in crd_manifests()}
    expected = {"SparkApplication": ("sparkoperator.k8s.io", "v1beta2"),
                "ScheduledSparkApplication": ("sparkoperator.k8s.io", "v1beta2"),
                "PyTorchJob": ("kubeflow.org", "v1"), "TFJob": ("kubeflow.org", "v1"),
                "XGBoostJob": ("kubeflow.org", "v1"), "PaddleJob": ("kubeflow.org", "v1"),
                "JAXJob": ("kubeflow.org", "v1"), "MPIJob": ("kubeflow.org", "v2beta1"),
                "JobSet": ("jobset.x-k8s.io", "v1alpha2"), "TrainJob": ("trainer.kubeflow.org", "v1alpha1"),
                "RayCluster": ("ray.io", "v1"), "RayJob": ("ray.io", "v1"), "RayService": ("ray.io", "v1"),
                "LeaderWorkerSet": ("leaderworkerset.x-k8s.io", "v1"), "Workflow": ("argoproj.io", "v1alpha1")}
    for kind, (group, version) in expected.items():
        spec = manifests[kind]["spec"]
        assert (spec["group"], spec["scope"]) == (group, "Namespaced")
        assert manifests[kind]["metadata"]["name"] == f"{spec['names']['plural']}.{group}"
        assert spec["names"]["singular"] == kind.lower()
        [served] = spec["versions"]
        assert served["name"] == version and served["served"] and served["storage"]
        assert served["schema"]["openAPIV3Schema"]["x-kubernetes-preserve-unknown-fields"] is True
        assert served["subresources"] == {"status": {}}
        resource = env.cluster.registry.get(group, version, spec["names"]["plural"])
        assert resource is not None and "status" in resource.subresources


# --- SparkApplication -------------------------------------------------------------------------------------------


def spark_app(name: str, **spec: Any) -> Obj:
    base = {"type": "Scala", "mode": "cluster", "image": "spark:3.5.1", "sparkVersion": "3.5.1",
            "mainClass": "org.example.Main", "mainApplicationFile": "local:///opt/app.jar",
            "driver": {"cores": 1, "memory": "512m", "serviceAccount": "spark"},
            "executor": {"instances": 3, "cores": 1, "memory": "512m"}}
    return {"metadata": {"name": name, "labels": {"team": "data"}}, "spec": {**base, **spec}}


def executors(env: Env, ns: str) -> list[Obj]:
    return [p for p in env.pods(ns) if p["metadata"]["labels"].get("spark-role") == "executor"]


def test_spark_driver_first_executors_only_once_it_runs(env: Env, ns: str) -> None:
    env.create("sparkoperator.k8s.io/v1beta2", "sparkapplications", ns, spark_app(
        "pi", driver={"cores": 1, "memory": "512m", "serviceAccount": "spark", "nodeSelector": hold(ns)},
        executor={"instances": 3, "cores": 2, "memory": "4g"}))
    driver = wait_for(lambda: by_name(env.pods(ns)).get("pi-driver"))
    assert chain(env, driver) == ["Pod/pi-driver", "SparkApplication/pi"]
    labels = driver["metadata"]["labels"]
    assert labels["spark-role"] == "driver" and labels["sparkoperator.k8s.io/app-name"] == "pi"
    assert labels["sparkoperator.k8s.io/launched-by-spark-operator"] == "true"
    assert labels["team"] == "data"  # the app's labels reach its pods
    assert re.fullmatch(r"spark-[0-9a-f]{32}", labels["spark-app-selector"])
    # 512 MiB + max(384, 0.1 x 512) = 896 MiB
    assert driver["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "896Mi"}
    stays(lambda: not executors(env, ns))
    assert wait_for(lambda: (env.get("sparkoperator.k8s.io/v1beta2", "SparkApplication", ns, "pi").get("status")
                             or {}).get("applicationState")) == {"state": "SUBMITTED"}

    env.release(ns)
    found = wait_for(lambda: len(executors(env, ns)) == 3 and executors(env, ns))
    driver = env.get("v1", "Pod", ns, "pi-driver")
    assert driver["status"]["phase"] == "Running"
    prefixes = set()
    for pod in found:
        meta = pod["metadata"]
        match = re.fullmatch(r"(pi-[0-9a-f]{16})-exec-([123])", meta["name"])
        assert match, meta["name"]
        prefixes.add(match[1])
        assert meta["labels"]["spark-exec-id"] == match[2]
        assert meta["labels"]["spark-app-selector"] == labels["spark-app-selector"]
        assert meta["labels"]["sparkoperator.k8s.io/app-name"] == "pi" and meta["labels"]["team"] == "data"
        assert meta["labels"]["sparkoperator.k8s.io/launched-by-spark-operator"] == "true"
        # the driver pod alone owns its executors (spark-operator since kubeflow/spark-operator#3152)
        [owner] = meta["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("Pod", driver["metadata"]["uid"], True)
        # cores 2; 4 GiB = 4096 MiB + max(384, 0.1 x 4096 = 409) = 4505 MiB
        assert pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "2", "memory": "4505Mi"}
        assert "nodeSelector" not in pod["spec"]  # the driver's placement is its own
    assert len(prefixes) == 1
    wait_for(lambda: env.get("sparkoperator.k8s.io/v1beta2", "SparkApplication", ns, "pi")["status"]
             ["applicationState"] == {"state": "RUNNING"})
    stays(lambda: len(executors(env, ns)) == 3)


def test_spark_dynamic_allocation_executors_arrive_in_batches(env: Env, ns: str) -> None:
    env.create("sparkoperator.k8s.io/v1beta2", "sparkapplications", ns, spark_app(
        "dyn", executor={"instances": 1, "cores": 1, "memory": "512m"},
        dynamicAllocation={"enabled": True, "initialExecutors": 4, "minExecutors": 2, "maxExecutors": 10},
        sparkConf={"spark.kubernetes.allocation.batch.size": "2", "spark.kubernetes.allocation.batch.delay": "1s"}))
    wait_for(lambda: executors(env, ns))
    time.sleep(0.2)  # the batch is complete; the next one comes a batch delay (1 s) after it
    assert len(executors(env, ns)) == 2
    stays(lambda: len(executors(env, ns)) == 2, 0.4)
    wait_for(lambda: len(executors(env, ns)) == 4)  # max(instances 1, initial 4, min 2)
    assert {p["metadata"]["labels"]["spark-exec-id"] for p in executors(env, ns)} == {"1", "2", "3", "4"}
    stays(lambda: len(executors(env, ns)) == 4, 1.2)


@pytest.mark.parametrize(("spec", "count", "requests"), [
    ({"executor": {"instances": 2, "cores": 4, "coreRequest": "3500m", "memory": "2g"}}, 2,
     {"cpu": "3500m", "memory": "2432Mi"}),  # 2048 + 384 (0.1 x 2048 = 204 < 384)
    ({"type": "Python", "executor": {"cores": 1, "memory": "2g"}}, 1,
     {"cpu": "1", "memory": "2867Mi"}),  # 2048 + 0.4 x 2048 = 819.2 -> 819
    ({"executor": {"instances": 1, "memory": "1g", "memoryOverhead": "1g"},
      "sparkConf": {"spark.dynamicAllocation.enabled": "true", "spark.dynamicAllocation.minExecutors": "5"}}, 5,
     {"cpu": "1", "memory": "2048Mi"}),
    ({"memoryOverheadFactor": "0.5", "executor": {"instances": 0, "memory": "1000m"}}, 0,
     {"cpu": "1", "memory": "1500Mi"}),
])
def test_spark_executor_count_and_size(spec: Obj, count: int, requests: Obj) -> None:
    assert executor_count(spec) == count
    assert resources(spec, "executor")["requests"] == requests


# --- Kubeflow training-operator -----------------------------------------------------------------------------

TRAINING = [
    ("PyTorchJob", "pytorchjobs", "pytorchReplicaSpecs", {"Master": 1, "Worker": 2}, {"master-0"}),
    ("TFJob", "tfjobs", "tfReplicaSpecs", {"Chief": 1, "PS": 1, "Worker": 2}, {"chief-0"}),
    ("TFJob", "tfjobs", "tfReplicaSpecs", {"Worker": 3}, {"worker-0"}),
    ("XGBoostJob", "xgboostjobs", "xgbReplicaSpecs", {"Master": 1, "Worker": None}, {"master-0"}),
    ("PaddleJob", "paddlejobs", "paddleReplicaSpecs", {"Master": 1, "Worker": 1}, {"master-0"}),
    ("JAXJob", "jaxjobs", "jaxReplicaSpecs", {"Worker": 3}, {"worker-0"}),
]


@pytest.mark.parametrize(("kind", "plural", "field", "replicas", "masters"), TRAINING)
def test_training_job_pods_all_at_once(env: Env, ns: str, kind: str, plural: str, field: str,
                                       replicas: dict[str, int | None], masters: set[str]) -> None:
    specs: Obj = {}
    for replica_type, count in replicas.items():
        specs[replica_type] = {"restartPolicy": "OnFailure", "template": template(
            hold(ns) if replica_type != "Worker" else None, labels={"app": "train"})}
        if count is not None:
            specs[replica_type]["replicas"] = count
    job = env.create("kubeflow.org/v1", plural, ns, {"metadata": {"name": "tr"}, "spec": {field: specs}})
    expected = {f"tr-{t.lower()}-{i}" for t, n in replicas.items() for i in range(n or 1)}  # missing replicas = 1
    pods = wait_for(lambda: len(env.pods(ns)) == len(expected) and by_name(env.pods(ns)))
    assert set(pods) == expected  # including those of held (Pending) replica types: all created together
    for name, pod in pods.items():
        labels = pod["metadata"]["labels"]
        replica_type, index = name.removeprefix("tr-").rsplit("-", 1)
        assert labels["training.kubeflow.org/job-name"] == "tr" and labels["app"] == "train"
        assert labels["training.kubeflow.org/operator-name"] == f"{kind.lower()}-controller"
        assert labels["training.kubeflow.org/replica-type"] == replica_type
        assert labels["training.kubeflow.org/replica-index"] == index
        assert (labels.get("training.kubeflow.org/job-role") == "master") == (f"{replica_type}-{index}" in masters)
        assert controller(pod)["uid"] == job["metadata"]["uid"] and chain(env, pod) == [f"Pod/{name}", f"{kind}/tr"]
        assert pod["spec"]["restartPolicy"] == "OnFailure"
    stays(lambda: len(env.pods(ns)) == len(expected), 0.3)


# <Kind>DefaultRestartPolicy of training-operator's pkg/apis/kubeflow.org/v1/<framework>_types.go
DEFAULT_RESTART_POLICY = [("PyTorchJob", "pytorchjobs", "pytorchReplicaSpecs", "OnFailure"),
                          ("PaddleJob", "paddlejobs", "paddleReplicaSpecs", "OnFailure"),
                          ("TFJob", "tfjobs", "tfReplicaSpecs", "Never"),
                          ("XGBoostJob", "xgboostjobs", "xgbReplicaSpecs", "Never"),
                          ("JAXJob", "jaxjobs", "jaxReplicaSpecs", "Never")]


@pytest.mark.parametrize(("kind", "plural", "field", "policy"), DEFAULT_RESTART_POLICY,
                         ids=[case[0] for case in DEFAULT_RESTART_POLICY])
def test_training_job_replicas_default_their_restart_policy_per_framework(env: Env, ns: str, kind: str, plural: str,
                                                                         field: str, policy: str) -> None:
    spec = template(hold(ns))["spec"]
    del spec["restartPolicy"]  # neither the replica nor its template says
    env.create("kubeflow.org/v1", plural, ns, {"metadata": {"name": "dflt"}, "spec": {field: {"Worker": {
        "replicas": 1, "template": {"spec": spec}}}}})
    pod = wait_for(lambda: next(iter(env.pods(ns)), None))
    assert pod["spec"]["restartPolicy"] == policy


def test_refused_pod_becomes_a_failed_create_event(env: Env, ns: str) -> None:
    bad = {"spec": {"containers": [{"name": "main"}]}}  # no image: the apiserver refuses the pod
    env.create("kubeflow.org/v1", "pytorchjobs", ns, {"metadata": {"name": "bad"}, "spec": {
        "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": bad}}}})
    events = wait_for(lambda: env.list("", "v1", "events", ns))
    assert events[0]["reason"] == "FailedCreate" and "spec.containers[0].image" in events[0]["message"]
    assert events[0]["involvedObject"]["kind"] == "PyTorchJob"
    stays(lambda: len(env.list("", "v1", "events", ns)) == 1 and not env.pods(ns), 0.6)  # retried, reported once


def test_malformed_root_is_reported_and_others_still_served(env: Env, ns: str) -> None:
    env.create("kubeflow.org/v1", "pytorchjobs", ns, {"metadata": {"name": "odd"}, "spec": {
        "pytorchReplicaSpecs": {"Master": {"replicas": "two", "template": template()}}}})
    env.create("kubeflow.org/v1", "pytorchjobs", ns, {"metadata": {"name": "fine"}, "spec": {
        "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template()}}}})
    wait_for(lambda: {p["metadata"]["name"] for p in env.pods(ns)} == {"fine-master-0"})
    [event] = wait_for(lambda: env.list("", "v1", "events", ns))
    assert event["reason"] == "ReconcileError" and event["involvedObject"]["name"] == "odd"


# --- MPIJob v2beta1 -------------------------------------------------------------------------------------------


def mpijob(name: str, ns: str, policy: str | None) -> Obj:
    spec: Obj = {"slotsPerWorker": 1, "mpiReplicaSpecs": {
        "Launcher": {"replicas": 1, "template": template(name="launcher")},
        "Worker": {"replicas": 2, "template": template(hold(ns), name="worker")}}}
    if policy:
        spec["launcherCreationPolicy"] = policy
    return {"metadata": {"name": name}, "spec": spec}


def test_mpijob_launcher_waits_for_ready_workers(env: Env, ns: str) -> None:
    job = env.create("kubeflow.org/v2beta1", "mpijobs", ns, mpijob("mpi", ns, "WaitForWorkersReady"))
    workers = wait_for(lambda: len(env.pods(ns)) == 2 and by_name(env.pods(ns)))
    assert set(workers) == {"mpi-worker-0", "mpi-worker-1"}
    for index, pod in enumerate(workers.values()):
        labels = pod["metadata"]["labels"]
        assert labels["training.kubeflow.org/job-role"] == "worker"
        assert labels["training.kubeflow.org/replica-index"] == str(index)
        assert labels["training.kubeflow.org/job-name"] == "mpi"
        assert controller(pod)["uid"] == job["metadata"]["uid"]
    stays(lambda: not env.jobs(ns))

    env.release(ns)
    launcher = wait_for(lambda: [p for p in env.pods(ns) if p["metadata"].get("generateName") == "mpi-launcher-"])
    assert all(env.get("v1", "Pod", ns, n)["status"]["phase"] == "Running" for n in workers)
    [pod] = launcher
    assert chain(env, pod) == [f"Pod/{pod['metadata']['name']}", "Job/mpi-launcher", "MPIJob/mpi"]
    assert pod["metadata"]["labels"]["training.kubeflow.org/job-role"] == "launcher"
    assert pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "mpi-launcher"
    stays(lambda: len(env.pods(ns)) == 3 and len(env.jobs(ns)) == 1, 0.4)


def test_mpijob_launcher_at_startup_by_default(env: Env, ns: str) -> None:
    env.create("kubeflow.org/v2beta1", "mpijobs", ns, mpijob("mpi", ns, None))
    wait_for(lambda: len(env.pods(ns)) == 3)  # workers held Pending, launcher created anyway
    assert [j["metadata"]["name"] for j in env.jobs(ns)] == ["mpi-launcher"]


# --- batch Job ------------------------------------------------------------------------------------------------


def test_job_pods_generate_names_and_complete(env: Env, ns: str) -> None:
    job = env.create("batch/v1", "jobs", ns, {"metadata": {"name": "work"}, "spec": {
        "parallelism": 2, "completions": 3, "template": template(labels={"app": "w"}, annotations={"a": "b"})}})
    pods = wait_for(lambda: len(env.pods(ns)) == 2 and env.pods(ns))
    uid = job["metadata"]["uid"]
    for pod in pods:
        meta = pod["metadata"]
        assert meta["generateName"] == "work-" and re.fullmatch(r"work-[a-z0-9]{5}", meta["name"])
        assert meta["labels"] == {"app": "w", "batch.kubernetes.io/job-name": "work", "job-name": "work",
                                  "batch.kubernetes.io/controller-uid": uid, "controller-uid": uid}
        assert meta["annotations"] == {"a": "b"}
        assert chain(env, pod) == [f"Pod/{meta['name']}", "Job/work"]
    env.succeed(pods[0])
    wait_for(lambda: len(env.pods(ns)) == 3)  # min(parallelism 2, completions 3 - 1 succeeded) = 2 active
    for pod in env.pods(ns):
        if pod["status"]["phase"] != "Succeeded":
            env.succeed(pod)
    done = wait_for(lambda: [c for c in (env.get("batch/v1", "Job", ns, "work").get("status") or {})
                             .get("conditions", []) if c["type"] == "Complete"])
    assert done[0]["status"] == "True"
    assert env.get("batch/v1", "Job", ns, "work")["status"]["succeeded"] == 3
    stays(lambda: len(env.pods(ns)) == 3, 0.3)


def test_indexed_job_pods(env: Env, ns: str) -> None:
    env.create("batch/v1", "jobs", ns, {"metadata": {"name": "idx"}, "spec": {
        "parallelism": 3, "completions": 3, "completionMode": "Indexed", "template": template()}})
    pods = wait_for(lambda: len(env.pods(ns)) == 3 and env.pods(ns))
    indexes = set()
    for pod in pods:
        index = pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
        indexes.add(index)
        assert pod["metadata"]["generateName"] == f"idx-{index}-"
        assert pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == index
        assert pod["spec"]["hostname"] == f"idx-{index}"
    assert indexes == {"0", "1", "2"}


# --- JobSet / TrainJob ----------------------------------------------------------------------------------------


def rjob(name: str, replicas: int = 1, parallelism: int = 1, node_selector: Obj | None = None,
         depends_on: tuple[str, str] | None = None) -> Obj:
    out: Obj = {"name": name, "replicas": replicas, "template": {"spec": {
        "parallelism": parallelism, "completions": parallelism, "backoffLimit": 0,
        "template": template(node_selector)}}}
    if depends_on:
        out["dependsOn"] = [{"name": depends_on[0], "status": depends_on[1]}]
    return out


def jobset_jobs(env: Env, ns: str) -> set[str]:
    return {j["metadata"]["name"] for j in env.jobs(ns)}


def test_jobset_depends_on_ready(env: Env, ns: str) -> None:
    js = env.create("jobset.x-k8s.io/v1alpha2", "jobsets", ns, {"metadata": {"name": "js"}, "spec": {
        "replicatedJobs": [rjob("driver", node_selector=hold(ns)),
                           rjob("workers", replicas=2, parallelism=2, depends_on=("driver", "Ready"))]}})
    wait_for(lambda: jobset_jobs(env, ns) == {"js-driver-0"})
    job = env.get("batch/v1", "Job", ns, "js-driver-0")
    assert controller(job)["uid"] == js["metadata"]["uid"]
    labels = job["metadata"]["labels"]
    assert {k: labels[k] for k in ("jobset.sigs.k8s.io/jobset-name", "jobset.sigs.k8s.io/replicatedjob-name",
                                   "jobset.sigs.k8s.io/job-index", "jobset.sigs.k8s.io/restart-attempt")} == \
        {"jobset.sigs.k8s.io/jobset-name": "js", "jobset.sigs.k8s.io/replicatedjob-name": "driver",
         "jobset.sigs.k8s.io/job-index": "0", "jobset.sigs.k8s.io/restart-attempt": "0"}
    [pod] = wait_for(lambda: env.pods(ns))
    assert chain(env, pod) == [f"Pod/{pod['metadata']['name']}", "Job/js-driver-0", "JobSet/js"]
    assert pod["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == "js"
    assert pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "0"
    stays(lambda: jobset_jobs(env, ns) == {"js-driver-0"})

    env.release(ns)
    wait_for(lambda: jobset_jobs(env, ns) == {"js-driver-0", "js-workers-0", "js-workers-1"})
    wait_for(lambda: len(env.pods(ns)) == 5)  # 1 + 2 replicas x min(parallelism 2, completions 2)
    worker = env.get("batch/v1", "Job", ns, "js-workers-1")
    assert worker["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"] == "1"
    stays(lambda: len(env.pods(ns)) == 5, 0.3)


def test_jobset_depends_on_complete(env: Env, ns: str) -> None:
    env.create("jobset.x-k8s.io/v1alpha2", "jobsets", ns, {"metadata": {"name": "js"}, "spec": {
        "replicatedJobs": [rjob("init"), rjob("main", depends_on=("init", "Complete"))]}})
    [pod] = wait_for(lambda: env.pods(ns))
    wait_for(lambda: env.get("v1", "Pod", ns, pod["metadata"]["name"])["status"]["phase"] == "Running")
    stays(lambda: jobset_jobs(env, ns) == {"js-init-0"}, 0.4)  # Ready is not Complete
    env.succeed(pod)
    wait_for(lambda: jobset_jobs(env, ns) == {"js-init-0", "js-main-0"})


def test_jobset_in_order_startup(env: Env, ns: str) -> None:
    env.create("jobset.x-k8s.io/v1alpha2", "jobsets", ns, {"metadata": {"name": "js"}, "spec": {
        "startupPolicy": {"startupPolicyOrder": "InOrder"},
        "replicatedJobs": [rjob("a", node_selector=hold(ns)), rjob("b"), rjob("c")]}})
    wait_for(lambda: jobset_jobs(env, ns) == {"js-a-0"})
    stays(lambda: jobset_jobs(env, ns) == {"js-a-0"})
    env.release(ns)
    wait_for(lambda: jobset_jobs(env, ns) == {"js-a-0", "js-b-0", "js-c-0"})


def test_trainjob_becomes_a_jobset_of_the_same_name(env: Env, ns: str) -> None:
    train = env.create("trainer.kubeflow.org/v1alpha1", "trainjobs", ns, {"metadata": {"name": "tj"}, "spec": {
        "runtimeRef": {"name": "torch-distributed", "kind": "ClusterTrainingRuntime"},
        "trainer": {"numNodes": 3, "image": "registry.example.com/train:2.0",
                    "resourcesPerNode": {"requests": {"cpu": "100m", "memory": "64Mi"}}}}})
    js = wait_for(lambda: env.list("jobset.x-k8s.io", "v1alpha2", "jobsets", ns))
    assert js[0]["metadata"]["name"] == "tj" and controller(js[0])["uid"] == train["metadata"]["uid"]
    pods = wait_for(lambda: len(env.pods(ns)) == 3 and env.pods(ns))
    assert chain(env, pods[0]) == [f"Pod/{pods[0]['metadata']['name']}", "Job/tj-node-0", "JobSet/tj", "TrainJob/tj"]
    assert env.get("batch/v1", "Job", ns, "tj-node-0")["spec"]["parallelism"] == 3
    assert pods[0]["spec"]["containers"][0]["image"] == "registry.example.com/train:2.0"


def test_trainjob_runtime_stages(env: Env, ns: str) -> None:
    ancestor = "trainer.kubeflow.org/trainjob-ancestor-step"
    env.create("trainer.kubeflow.org/v1alpha1", "trainingruntimes", ns, {"metadata": {"name": "rt"}, "spec": {
        "mlPolicy": {"numNodes": 2}, "template": {"spec": {"replicatedJobs": [
            {"name": "initializer", "template": {"metadata": {"labels": {ancestor: "initializer"}},
                                                 "spec": {"template": template(name="init")}}},
            {"name": "node", "dependsOn": [{"name": "initializer", "status": "Complete"}],
             "template": {"metadata": {"labels": {ancestor: "trainer"}}, "spec": {"template": template(name="node")}}},
        ]}}}})
    env.create("trainer.kubeflow.org/v1alpha1", "trainjobs", ns, {"metadata": {"name": "tj"}, "spec": {
        "runtimeRef": {"name": "rt", "kind": "TrainingRuntime"}}})
    [init] = wait_for(lambda: env.pods(ns))
    assert init["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "initializer"
    stays(lambda: jobset_jobs(env, ns) == {"tj-initializer-0"}, 0.4)
    env.succeed(init)
    wait_for(lambda: len(env.pods(ns)) == 3)  # + numNodes 2 (the runtime's mlPolicy) node pods
    assert env.get("batch/v1", "Job", ns, "tj-node-0")["spec"]["completions"] == 2


# --- KubeRay ----------------------------------------------------------------------------------------------------


def ray_spec(ns: str | None = None, autoscaling: bool = False) -> Obj:
    spec: Obj = {"rayVersion": "2.41.0", "headGroupSpec": {"rayStartParams": {}, "template": template(
        hold(ns) if ns else None, name="ray-head")}, "workerGroupSpecs": [
        {"groupName": "small", "replicas": 5, "maxReplicas": 2, "rayStartParams": {}, "template": template()},
        {"groupName": "tpu", "replicas": 0, "minReplicas": 1, "numOfHosts": 2, "rayStartParams": {},
         "template": template()}]}
    if autoscaling:
        spec["enableInTreeAutoscaling"] = True
    return spec


def test_ray_group_size() -> None:
    spec = ray_spec()
    assert [group_size(spec, g) for g in spec["workerGroupSpecs"]] == [2, 2]  # clamp(5, 0, 2); clamp(0, 1, ..) x 2
    auto = ray_spec(autoscaling=True)
    assert [group_size(auto, g) for g in auto["workerGroupSpecs"]] == [0, 2]  # minReplicas instead of replicas


def check_ray_pods(env: Env, ns: str, cluster: str) -> None:
    pods = wait_for(lambda: len(env.pods(ns)) >= 5 and env.pods(ns))
    ray = [p for p in pods if p["metadata"]["labels"].get("ray.io/cluster") == cluster]
    assert len(ray) == 5
    assert len(named(ray, rf"{cluster}-head-[a-z0-9]{{5}}")) == 1
    assert len(named(ray, rf"{cluster}-small-worker-[a-z0-9]{{5}}")) == 2
    assert len(named(ray, rf"{cluster}-tpu-worker-[a-z0-9]{{5}}")) == 2
    for pod in ray:
        labels = pod["metadata"]["labels"]
        head = pod["metadata"]["generateName"] == f"{cluster}-head-"
        assert labels["ray.io/node-type"] == ("head" if head else "worker")
        assert labels["ray.io/group"] == ("headgroup" if head else pod["metadata"]["name"].split("-")[-3])
        assert controller(pod)["kind"] == "RayCluster" and controller(pod)["name"] == cluster


def test_raycluster_pods_created_together(env: Env, ns: str) -> None:
    env.create("ray.io/v1", "rayclusters", ns, {"metadata": {"name": "rc"}, "spec": ray_spec(ns)})
    check_ray_pods(env, ns, "rc")  # workers exist although the head is held Pending
    stays(lambda: len(env.pods(ns)) == 5, 0.3)


def test_rayjob_submitter_after_cluster_ready(env: Env, ns: str) -> None:
    rayjob = env.create("ray.io/v1", "rayjobs", ns, {"metadata": {"name": "rj"}, "spec": {
        "entrypoint": "python train.py", "rayClusterSpec": ray_spec(ns)}})
    [cluster] = wait_for(lambda: env.list("ray.io", "v1", "rayclusters", ns))
    name = cluster["metadata"]["name"]
    assert re.fullmatch(r"rj-raycluster-[a-z0-9]{5}", name)
    assert controller(cluster)["uid"] == rayjob["metadata"]["uid"]
    check_ray_pods(env, ns, name)
    stays(lambda: not env.jobs(ns))

    env.release(ns)
    [submitter] = wait_for(lambda: [p for p in env.pods(ns) if p["metadata"].get("generateName") == "rj-"])
    assert chain(env, submitter) == [f"Pod/{submitter['metadata']['name']}", "Job/rj", "RayJob/rj"]
    assert submitter["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "rj"
    assert env.get("ray.io/v1", "RayCluster", ns, name)["status"]["state"] == "ready"
    stays(lambda: len(env.pods(ns)) == 6 and len(env.list("ray.io", "v1", "rayclusters", ns)) == 1, 0.3)


def test_rayservice_owns_its_cluster(env: Env, ns: str) -> None:
    env.create("ray.io/v1", "rayservices", ns, {"metadata": {"name": "rs"}, "spec": {
        "serveConfigV2": "applications: []", "rayClusterConfig": ray_spec()}})
    [cluster] = wait_for(lambda: env.list("ray.io", "v1", "rayclusters", ns))
    check_ray_pods(env, ns, cluster["metadata"]["name"])
    pod = env.pods(ns)[0]
    assert chain(env, pod)[1:] == [f"RayCluster/{cluster['metadata']['name']}", "RayService/rs"]


# --- LeaderWorkerSet ----------------------------------------------------------------------------------------------

LWS = "leaderworkerset.sigs.k8s.io"


def test_lws_workers_after_leader_ready(env: Env, ns: str) -> None:
    lws = env.create("leaderworkerset.x-k8s.io/v1", "leaderworkersets", ns, {"metadata": {"name": "lw"}, "spec": {
        "replicas": 2, "startupPolicy": "LeaderReady", "leaderWorkerTemplate": {
            "size": 3, "leaderTemplate": template(hold(ns), name="leader"), "workerTemplate": template()}}})
    leaders = wait_for(lambda: len(env.pods(ns)) == 2 and by_name(env.pods(ns)))
    assert set(leaders) == {"lw-0", "lw-1"}
    sts = env.get("apps/v1", "StatefulSet", ns, "lw")
    assert controller(sts)["uid"] == lws["metadata"]["uid"] and sts["spec"]["replicas"] == 2
    for name, leader in leaders.items():
        assert chain(env, leader) == [f"Pod/{name}", "StatefulSet/lw", "LeaderWorkerSet/lw"]
        labels = leader["metadata"]["labels"]
        assert labels[f"{LWS}/name"] == "lw" and labels[f"{LWS}/worker-index"] == "0"
        assert labels[f"{LWS}/template-revision-hash"]
        assert f"{LWS}/group-index" not in env.added(ns, name)["metadata"]["labels"]  # LWS's webhook runs later
        wait_for(lambda n=name: env.get("v1", "Pod", ns, n)["metadata"]["labels"].get(f"{LWS}/group-index")
                 == n[-1])
    stays(lambda: {s["metadata"]["name"] for s in env.list("apps", "v1", "statefulsets", ns)} == {"lw"})

    env.release(ns)
    pods = wait_for(lambda: len(env.pods(ns)) == 6 and by_name(env.pods(ns)))
    assert set(pods) == {"lw-0", "lw-1", "lw-0-1", "lw-0-2", "lw-1-1", "lw-1-2"}
    for group in (0, 1):
        leader = pods[f"lw-{group}"]
        assert leader["status"]["phase"] == "Running"
        worker_sts = env.get("apps/v1", "StatefulSet", ns, f"lw-{group}")
        assert controller(worker_sts)["kind"] == "Pod" and controller(worker_sts)["uid"] == leader["metadata"]["uid"]
        for index in (1, 2):
            worker = pods[f"lw-{group}-{index}"]
            assert chain(env, worker) == [f"Pod/lw-{group}-{index}", f"StatefulSet/lw-{group}", f"Pod/lw-{group}",
                                          "StatefulSet/lw", "LeaderWorkerSet/lw"]
            labels = worker["metadata"]["labels"]
            assert labels[f"{LWS}/group-index"] == str(group)
            assert labels[f"{LWS}/template-revision-hash"] == leader["metadata"]["labels"][
                f"{LWS}/template-revision-hash"]
            wait_for(lambda n=f"lw-{group}-{index}", i=index: env.get("v1", "Pod", ns, n)["metadata"]["labels"]
                     .get(f"{LWS}/worker-index") == str(i))
    stays(lambda: len(env.pods(ns)) == 6, 0.3)


def test_lws_default_startup_creates_workers_with_pending_leader(env: Env, ns: str) -> None:
    env.create("leaderworkerset.x-k8s.io/v1", "leaderworkersets", ns, {"metadata": {"name": "lw"}, "spec": {
        "replicas": 1, "leaderWorkerTemplate": {"size": 2, "leaderTemplate": template(hold(ns)),
                                                "workerTemplate": template()}}})
    wait_for(lambda: {p["metadata"]["name"] for p in env.pods(ns)} == {"lw-0", "lw-0-1"})
    assert env.get("v1", "Pod", ns, "lw-0")["status"]["phase"] == "Pending"


# --- Argo Workflow ------------------------------------------------------------------------------------------------


def fnv1a_32(text: str) -> int:
    h = 2166136261
    for b in text.encode():
        h = (h ^ b) * 16777619 % 2**32
    return h


def test_workflow_steps_one_group_at_a_time(env: Env, ns: str) -> None:
    wf = env.create("argoproj.io/v1alpha1", "workflows", ns, {"metadata": {"name": "wf"}, "spec": {
        "entrypoint": "main", "templates": [
            {"name": "main", "steps": [[{"name": "prep", "template": "step"}],
                                       [{"name": "left", "template": "step"}, {"name": "right", "template": "step"}]]},
            {"name": "step", "container": container()}]}})
    first = f"wf-step-{fnv1a_32('wf[0].prep')}"
    [pod] = wait_for(lambda: env.pods(ns))
    assert pod["metadata"]["name"] == first
    assert pod["metadata"]["labels"]["workflows.argoproj.io/workflow"] == "wf"
    assert pod["metadata"]["annotations"]["workflows.argoproj.io/node-name"] == "wf[0].prep"
    assert controller(pod)["uid"] == wf["metadata"]["uid"]
    assert [c["name"] for c in pod["spec"]["containers"]] == ["wait", "main"]
    wait_for(lambda: env.get("v1", "Pod", ns, first)["status"]["phase"] == "Running")
    stays(lambda: len(env.pods(ns)) == 1, 0.4)

    env.succeed(pod)
    second = {f"wf-step-{fnv1a_32('wf[1].left')}", f"wf-step-{fnv1a_32('wf[1].right')}"}
    wait_for(lambda: {p["metadata"]["name"] for p in env.pods(ns)} == second | {first})
    for name in second:
        env.succeed(env.get("v1", "Pod", ns, name))
    wait_for(lambda: (env.get("argoproj.io/v1alpha1", "Workflow", ns, "wf").get("status") or {}).get("phase")
             == "Succeeded")
    stays(lambda: len(env.pods(ns)) == 3, 0.3)


def test_workflow_container_entrypoint_pod_is_named_after_the_workflow(env: Env, ns: str) -> None:
    env.create("argoproj.io/v1alpha1", "workflows", ns, {"metadata": {"name": "hello"}, "spec": {
        "entrypoint": "main", "templates": [{"name": "main", "container": container()}]}})
    [pod] = wait_for(lambda: env.pods(ns))
    assert pod["metadata"]["name"] == "hello"

"""Each emulated operator's reaction to a member pod that is deleted (as a gang repair deletes it) or that fails
(as when its kubelet rejects it), on a local cluster with every component running: recreated, job failed, group
restarted, application retried. Expected reactions are the real operators' (see each kind's
workloads/<kind>/emulator.py); no webhook is installed, so pods start as soon as they are scheduled.

A pod is held Pending by a nodeSelector no node matches (``held``); "its kubelet" failing a pod is stood in for
by a status patch, exactly what the kubelet writes when it rejects one.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from cluster.controllers import Client
from cluster.local import ADMIN, LocalCluster, NodeSpec
from cluster.store import ApiError
from tests.support.polling import wait_for

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]
TIMEOUT = 30.0
NODES = [NodeSpec(f"node-{i}", cpu="16", memory="64Gi") for i in range(3)]


@dataclass
class Env:
    cluster: LocalCluster
    admin: Client
    ns: str = ""

    def items(self, api_version: str, kind: str) -> list[Obj]:
        resource = self.cluster.registry.by_kind(api_version, kind)
        assert resource is not None
        return self.cluster.store.list(resource, self.ns)[0]

    def pods(self, **selector: str) -> list[Obj]:
        return [p for p in self.items("v1", "Pod")
                if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())]

    def get(self, api_version: str, kind: str, name: str) -> Obj:
        resource = self.cluster.registry.by_kind(api_version, kind)
        assert resource is not None
        return self.cluster.store.get(resource, self.ns, name)

    def create(self, api_version: str, plural: str, obj: Obj) -> Obj:
        base = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
        return self.admin.create(f"{base}/namespaces/{self.ns}/{plural}", obj)

    def delete(self, pod: Obj) -> None:
        """DELETE the pod with its uid as precondition, as the gate controller deletes gang members."""
        meta = pod["metadata"]
        self.admin.call("DELETE", f"/api/v1/namespaces/{self.ns}/pods/{meta['name']}",
                        {"preconditions": {"uid": meta["uid"]}})

    def fail(self, pod: Obj, reason: str = "OutOfcpu") -> None:
        """What the kubelet writes when it rejects a pod."""
        self.admin.patch(f"/api/v1/namespaces/{self.ns}/pods/{pod['metadata']['name']}/status",
                         {"status": {"phase": "Failed", "reason": reason,
                                     "message": f"Pod was rejected: Node didn't have enough resource: {reason}"}})

    def running(self, count: int, **selector: str) -> list[Obj]:
        def ready() -> list[Obj] | None:
            pods = [p for p in self.pods(**selector) if not p["metadata"].get("deletionTimestamp")]
            return pods if len(pods) == count and all(p["status"]["phase"] == "Running" for p in pods) else None

        return wait_for(ready, TIMEOUT, lambda: f"{count} running pods {selector}: {self.summary()}")

    def summary(self) -> list[tuple[str, str, bool]]:
        return [(p["metadata"]["name"], p["status"].get("phase", ""), bool(p["metadata"].get("deletionTimestamp")))
                for p in self.items("v1", "Pod")]

    def condition(self, api_version: str, kind: str, name: str, type_: str) -> Obj | None:
        conditions = (self.get(api_version, kind, name).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c.get("type") == type_ and c.get("status") == "True"), None)

    def gone(self, pod: Obj) -> bool:
        return all(p["metadata"]["uid"] != pod["metadata"]["uid"] for p in self.items("v1", "Pod"))


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(nodes=NODES) as local:
        local.run_components(start_seconds=0.05, stop_seconds=0.3)
        yield local


@pytest.fixture
def env(cluster: LocalCluster) -> Env:
    admin = Client(cluster.api, ADMIN)
    ns = f"r-{uuid.uuid4().hex[:8]}"
    admin.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    return Env(cluster, admin, ns)


def container(name: str = "main") -> Obj:
    return {"name": name, "image": "registry.example.com/app:1.0",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}


def pod_spec(held: bool = False, **extra: Any) -> Obj:
    spec: Obj = {"containers": [container()], **extra}
    if held:
        spec["nodeSelector"] = {"test.kubenexus.io/never": "true"}
    return spec


def eventually(check: Callable[[], Any], what: str) -> Any:
    return wait_for(check, TIMEOUT, what)


# --- batch/v1 Job -----------------------------------------------------------------------------------------------


def test_job_counts_a_deleted_pod_as_failed_and_replaces_it_after_the_back_off(env: Env) -> None:
    env.create("batch/v1", "jobs", {"metadata": {"name": "work"}, "spec": {
        "parallelism": 2, "completions": 2, "template": {"spec": pod_spec(restartPolicy="Never")}}})
    victim, other = env.running(2, **{"batch.kubernetes.io/job-name": "work"})
    assert "batch.kubernetes.io/job-tracking" in victim["metadata"]["finalizers"]
    env.delete(victim)
    deleted_at = time.monotonic()
    eventually(lambda: env.gone(victim), "the deleted pod counted and released")
    assert env.get("batch/v1", "Job", "work")["status"]["failed"] == 1
    replacement = eventually(lambda: [p for p in env.pods(**{"batch.kubernetes.io/job-name": "work"})
                                      if p["metadata"]["uid"] not in (victim["metadata"]["uid"],
                                                                      other["metadata"]["uid"])],
                             "a replacement pod")
    assert time.monotonic() - deleted_at >= 9.0  # DefaultJobPodFailureBackOff: 10 s after the first failure
    assert replacement[0]["metadata"]["generateName"] == "work-"
    assert env.condition("batch/v1", "Job", "work", "Failed") is None


def test_job_past_its_backoff_limit_fails_and_deletes_its_other_pods(env: Env) -> None:
    env.create("batch/v1", "jobs", {"metadata": {"name": "strict"}, "spec": {
        "parallelism": 2, "completions": 2, "backoffLimit": 0, "template": {"spec": pod_spec(restartPolicy="Never")}}})
    victim, _ = env.running(2, **{"batch.kubernetes.io/job-name": "strict"})
    env.delete(victim)
    failed = eventually(lambda: env.condition("batch/v1", "Job", "strict", "Failed"), "the Job Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert env.condition("batch/v1", "Job", "strict", "FailureTarget") is not None
    eventually(lambda: not env.pods(**{"batch.kubernetes.io/job-name": "strict"}), "its pods deleted")
    assert env.get("batch/v1", "Job", "strict")["status"]["failed"] == 2


# --- training-operator ------------------------------------------------------------------------------------------


def pytorchjob(name: str, held_worker: bool = False, **replica: Any) -> Obj:
    return {"metadata": {"name": name}, "spec": {"pytorchReplicaSpecs": {
        "Master": {"replicas": 1, "template": {"spec": pod_spec()}, **replica},
        "Worker": {"replicas": 2, "template": {"spec": pod_spec(held=held_worker)}, **replica}}}}


def test_pytorchjob_recreates_a_deleted_pending_pod(env: Env) -> None:
    env.create("kubeflow.org/v1", "pytorchjobs", pytorchjob("pending", held_worker=True))
    worker = eventually(lambda: next((p for p in env.pods() if p["metadata"]["name"] == "pending-worker-0"), None),
                        "the held worker")
    env.delete(worker)
    again = eventually(lambda: next((p for p in env.pods() if p["metadata"]["name"] == "pending-worker-0"
                                     and p["metadata"]["uid"] != worker["metadata"]["uid"]), None), "recreated")
    assert again["spec"]["restartPolicy"] == "OnFailure"  # PyTorchJob's default replica restart policy
    assert env.condition("kubeflow.org/v1", "PyTorchJob", "pending", "Failed") is None


def test_pytorchjob_restarts_when_a_running_pod_is_deleted(env: Env) -> None:
    """UpdateJobReplicaStatuses counts a Running pod with a deletionTimestamp as failed: the replica is short, and
    under the default restartPolicy OnFailure the job is Restarting; the pod comes back once gone."""
    env.create("kubeflow.org/v1", "pytorchjobs", pytorchjob("evicted"))
    pods = env.running(3, **{"training.kubeflow.org/job-name": "evicted"})
    victim = next(p for p in pods if p["metadata"]["name"] == "evicted-worker-1")
    env.delete(victim)
    restarting = eventually(lambda: env.condition("kubeflow.org/v1", "PyTorchJob", "evicted", "Restarting"),
                            "Restarting")
    assert (restarting["reason"], restarting["message"]) == (
        "PyTorchJobRestarting", "PyTorchJob evicted is restarting because 1 Worker replica(s) failed.")
    again = env.running(3, **{"training.kubeflow.org/job-name": "evicted"})
    assert "evicted-worker-1" in {p["metadata"]["name"] for p in again} and env.gone(victim)
    assert env.condition("kubeflow.org/v1", "PyTorchJob", "evicted", "Failed") is None


def test_pytorchjob_with_restart_policy_never_fails_when_a_running_pod_is_deleted(env: Env) -> None:
    env.create("kubeflow.org/v1", "pytorchjobs", pytorchjob("strict", restartPolicy="Never"))
    pods = env.running(3, **{"training.kubeflow.org/job-name": "strict"})
    env.delete(next(p for p in pods if p["metadata"]["name"] == "strict-worker-1"))
    failed = eventually(lambda: env.condition("kubeflow.org/v1", "PyTorchJob", "strict", "Failed"), "job Failed")
    assert (failed["reason"], failed["message"]) == (
        "PyTorchJobFailed", "PyTorchJob strict is failed because 1 Worker replica(s) failed.")
    time.sleep(1.0)
    assert "strict-worker-1" not in {p["metadata"]["name"] for p in env.pods()}  # a failed job creates nothing
    assert len(env.pods(**{"training.kubeflow.org/job-name": "strict"})) == 2  # cleanPodPolicy None


def test_pytorchjob_restarts_a_pod_its_kubelet_rejected(env: Env) -> None:
    env.create("kubeflow.org/v1", "pytorchjobs", pytorchjob("rejected"))
    pods = env.running(3, **{"training.kubeflow.org/job-name": "rejected"})
    victim = next(p for p in pods if p["metadata"]["name"] == "rejected-worker-0")
    env.fail(victim)
    eventually(lambda: env.condition("kubeflow.org/v1", "PyTorchJob", "rejected", "Restarting"), "Restarting")
    eventually(lambda: env.gone(victim), "the failed pod deleted")
    env.running(3, **{"training.kubeflow.org/job-name": "rejected"})
    eventually(lambda: env.condition("kubeflow.org/v1", "PyTorchJob", "rejected", "Running"), "Running again")
    assert env.condition("kubeflow.org/v1", "PyTorchJob", "rejected", "Failed") is None


def test_tfjob_fails_on_a_rejected_pod_and_cleans_its_running_pods(env: Env) -> None:
    """TFJob replicas default to restartPolicy Never and cleanPodPolicy Running."""
    env.create("kubeflow.org/v1", "tfjobs", {"metadata": {"name": "tf"}, "spec": {"tfReplicaSpecs": {
        "Worker": {"replicas": 3, "template": {"spec": pod_spec()}}}}})
    pods = env.running(3, **{"training.kubeflow.org/job-name": "tf"})
    env.fail(pods[0])
    eventually(lambda: env.condition("kubeflow.org/v1", "TFJob", "tf", "Failed"), "job Failed")
    eventually(lambda: [p["metadata"]["name"] for p in env.pods(**{"training.kubeflow.org/job-name": "tf"})]
               == [pods[0]["metadata"]["name"]], "the running pods cleaned, the failed one kept")


# --- mpi-operator -----------------------------------------------------------------------------------------------


def test_mpijob_recreates_workers_and_fails_with_its_launcher(env: Env) -> None:
    env.create("kubeflow.org/v2beta1", "mpijobs", {"metadata": {"name": "mpi"}, "spec": {
        "runPolicy": {"backoffLimit": 0}, "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": {"spec": pod_spec()}},
            "Worker": {"replicas": 2, "template": {"spec": pod_spec()}}}}})
    env.running(3, **{"training.kubeflow.org/job-name": "mpi"})
    worker = next(p for p in env.pods() if p["metadata"]["name"] == "mpi-worker-1")
    env.delete(worker)
    eventually(lambda: any(p["metadata"]["name"] == "mpi-worker-1" and p["metadata"]["uid"] != worker["metadata"]
                           ["uid"] for p in env.pods()), "the worker recreated")
    launcher = env.pods(**{"training.kubeflow.org/job-role": "launcher"})[0]
    env.delete(launcher)
    failed = eventually(lambda: env.condition("kubeflow.org/v2beta1", "MPIJob", "mpi", "Failed"), "MPIJob Failed")
    assert failed["reason"] == "BackoffLimitExceeded"  # the launcher Job's (runPolicy.backoffLimit 0)


# --- JobSet and TrainJob ----------------------------------------------------------------------------------------


def replicated(name: str, replicas: int = 2) -> Obj:
    return {"name": name, "replicas": replicas, "template": {"spec": {
        "parallelism": 1, "completions": 1, "backoffLimit": 0, "template": {"spec": pod_spec()}}}}


def test_jobset_restarts_while_max_restarts_allow_then_fails(env: Env) -> None:
    env.create("jobset.x-k8s.io/v1alpha2", "jobsets", {"metadata": {"name": "js"}, "spec": {
        "failurePolicy": {"maxRestarts": 1}, "replicatedJobs": [replicated("workers")]}})
    first = env.running(2, **{"jobset.sigs.k8s.io/jobset-name": "js"})
    env.delete(first[0])
    restarted = eventually(lambda: [p for p in env.running(2, **{"jobset.sigs.k8s.io/jobset-name": "js"})
                                    if p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "1"],
                           "the Jobs recreated for restart attempt 1")
    assert env.get("jobset.x-k8s.io/v1alpha2", "JobSet", "js")["status"]["restarts"] == 1
    assert all(env.gone(p) for p in first)  # the first attempt's Jobs were deleted with their pods
    env.delete(restarted[0])
    failed = eventually(lambda: env.condition("jobset.x-k8s.io/v1alpha2", "JobSet", "js", "Failed"), "JobSet Failed")
    assert failed["reason"] == "ReachedMaxRestarts"
    eventually(lambda: not env.pods(), "the active Jobs deleted with their pods")


def test_jobset_without_failure_policy_fails_at_the_first_failed_job(env: Env) -> None:
    env.create("jobset.x-k8s.io/v1alpha2", "jobsets", {"metadata": {"name": "once"}, "spec": {
        "replicatedJobs": [replicated("workers")]}})
    pods = env.running(2, **{"jobset.sigs.k8s.io/jobset-name": "once"})
    env.delete(pods[0])
    failed = eventually(lambda: env.condition("jobset.x-k8s.io/v1alpha2", "JobSet", "once", "Failed"), "Failed")
    assert failed["reason"] == "FailedJobs" and "jobset failed due to one or more job failures" in failed["message"]


def test_trainjob_fails_with_its_jobset(env: Env) -> None:
    env.create("trainer.kubeflow.org/v1alpha1", "trainingruntimes", {"metadata": {"name": "torch"}, "spec": {
        "mlPolicy": {"numNodes": 2}, "template": {"spec": {"replicatedJobs": [{
            "name": "node", "template": {"metadata": {"labels": {
                "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}}, "spec": {
                "backoffLimit": 0, "template": {"spec": pod_spec()}}}}]}}}})
    env.create("trainer.kubeflow.org/v1alpha1", "trainjobs", {"metadata": {"name": "tj"}, "spec": {
        "runtimeRef": {"name": "torch", "kind": "TrainingRuntime"}}})
    pods = env.running(2, **{"jobset.sigs.k8s.io/jobset-name": "tj"})
    env.delete(pods[1])
    failed = eventually(lambda: env.condition("trainer.kubeflow.org/v1alpha1", "TrainJob", "tj", "Failed"),
                        "TrainJob Failed")
    assert failed["reason"] == "FailedJobs"


# --- KubeRay ----------------------------------------------------------------------------------------------------


def ray_spec() -> Obj:
    return {"headGroupSpec": {"template": {"spec": pod_spec()}},
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "template": {"spec": pod_spec()}}]}


def test_raycluster_replaces_deleted_and_failed_pods(env: Env) -> None:
    env.create("ray.io/v1", "rayclusters", {"metadata": {"name": "rc"}, "spec": ray_spec()})
    pods = env.running(3, **{"ray.io/cluster": "rc"})
    head = next(p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head")
    worker = next(p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "worker")
    env.delete(head)
    env.fail(worker)
    eventually(lambda: env.gone(head) and env.gone(worker), "the deleted head and the failed worker gone")
    again = env.running(3, **{"ray.io/cluster": "rc"})
    assert {p["metadata"]["uid"] for p in again} & {head["metadata"]["uid"], worker["metadata"]["uid"]} == set()


def test_rayjob_and_rayservice_clusters_replace_deleted_pods(env: Env) -> None:
    env.create("ray.io/v1", "rayjobs", {"metadata": {"name": "rj"}, "spec": {
        "entrypoint": "python train.py", "rayClusterSpec": ray_spec()}})
    env.create("ray.io/v1", "rayservices", {"metadata": {"name": "rs"}, "spec": {"rayClusterConfig": ray_spec()}})
    for root in ("rj", "rs"):
        name = eventually(lambda r=root: next((c["metadata"]["name"] for c in env.items("ray.io/v1", "RayCluster")
                                               if c["metadata"]["labels"]["ray.io/originated-from-cr-name"] == r),
                                              None), f"the cluster of {root}")
        pods = env.running(3, **{"ray.io/cluster": name})
        victim = next(p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "worker")
        env.delete(victim)
        assert victim["metadata"]["uid"] not in {p["metadata"]["uid"]
                                                 for p in env.running(3, **{"ray.io/cluster": name})}


# --- LeaderWorkerSet --------------------------------------------------------------------------------------------


def lws(name: str, policy: str | None = None) -> Obj:
    template: Obj = {"size": 3, "workerTemplate": {"spec": pod_spec()}}
    if policy:
        template["restartPolicy"] = policy
    return {"metadata": {"name": name}, "spec": {"replicas": 1, "leaderWorkerTemplate": template}}


def test_lws_recreates_the_whole_group_when_a_worker_is_deleted(env: Env) -> None:
    env.create("leaderworkerset.x-k8s.io/v1", "leaderworkersets", lws("grp"))
    before = {p["metadata"]["name"]: p["metadata"]["uid"]
              for p in env.running(3, **{"leaderworkerset.sigs.k8s.io/name": "grp"})}
    env.delete(next(p for p in env.pods() if p["metadata"]["name"] == "grp-0-2"))

    def all_new() -> bool:
        now = {p["metadata"]["name"]: p["metadata"]["uid"]
               for p in env.running(3, **{"leaderworkerset.sigs.k8s.io/name": "grp"})}
        return set(now) == set(before) and not set(now.values()) & set(before.values())

    eventually(all_new, "leader and both workers recreated")


def test_lws_with_restart_policy_none_recreates_only_the_deleted_pod(env: Env) -> None:
    env.create("leaderworkerset.x-k8s.io/v1", "leaderworkersets", lws("solo", "None"))
    before = {p["metadata"]["name"]: p["metadata"]["uid"]
              for p in env.running(3, **{"leaderworkerset.sigs.k8s.io/name": "solo"})}
    env.delete(next(p for p in env.pods() if p["metadata"]["name"] == "solo-0-1"))
    eventually(lambda: {p["metadata"]["name"]: p["metadata"]["uid"] for p in env.running(
        3, **{"leaderworkerset.sigs.k8s.io/name": "solo"})}.get("solo-0-1") not in (None, before["solo-0-1"]),
        "the worker recreated")
    now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in env.pods()}
    assert now["solo-0"] == before["solo-0"] and now["solo-0-2"] == before["solo-0-2"]


# --- spark-operator ---------------------------------------------------------------------------------------------


def spark_app(name: str, restart: Obj | None = None) -> Obj:
    spec: Obj = {"type": "Scala", "mode": "cluster", "image": "spark:3.5.1", "sparkVersion": "3.5.1",
                 "mainClass": "org.example.Main", "mainApplicationFile": "local:///opt/app.jar",
                 "driver": {"cores": 1, "memory": "512m"}, "executor": {"instances": 2, "cores": 1, "memory": "512m"}}
    if restart:
        spec["restartPolicy"] = restart
    return {"metadata": {"name": name}, "spec": spec}


def app_state(env: Env, name: str) -> str:
    return ((env.get("sparkoperator.k8s.io/v1beta2", "SparkApplication", name).get("status") or {})
            .get("applicationState") or {}).get("state", "")


def test_spark_driver_deleted_fails_the_application_and_takes_its_executors(env: Env) -> None:
    env.create("sparkoperator.k8s.io/v1beta2", "sparkapplications", spark_app("never"))
    pods = env.running(3, **{"sparkoperator.k8s.io/app-name": "never"})
    driver = next(p for p in pods if p["metadata"]["labels"]["spark-role"] == "driver")
    env.delete(driver)
    eventually(lambda: app_state(env, "never") == "FAILED", "the application FAILED")
    status = env.get("sparkoperator.k8s.io/v1beta2", "SparkApplication", "never")["status"]
    assert status["applicationState"]["errorMessage"] == "driver pod not found"
    eventually(lambda: not env.pods(**{"sparkoperator.k8s.io/app-name": "never"}), "the executors collected")
    time.sleep(1.0)
    assert not env.pods() and app_state(env, "never") == "FAILED"  # restartPolicy Never: no new submission


def test_spark_on_failure_resubmits_while_retries_remain(env: Env) -> None:
    env.create("sparkoperator.k8s.io/v1beta2", "sparkapplications", spark_app("retry", {
        "type": "OnFailure", "onFailureRetries": 1, "onFailureRetryInterval": 1}))
    pods = env.running(3, **{"sparkoperator.k8s.io/app-name": "retry"})
    first = next(p for p in pods if p["metadata"]["labels"]["spark-role"] == "driver")
    env.delete(first)
    second = eventually(lambda: next((p for p in env.running(3, **{"sparkoperator.k8s.io/app-name": "retry"})
                                      if p["metadata"]["labels"]["spark-role"] == "driver"
                                      and p["metadata"]["uid"] != first["metadata"]["uid"]), None),
                        "a new driver with new executors")
    assert second["metadata"]["labels"]["spark-app-selector"] != first["metadata"]["labels"]["spark-app-selector"]
    assert env.get("sparkoperator.k8s.io/v1beta2", "SparkApplication", "retry")["status"]["executionAttempts"] == 2
    env.delete(second)
    eventually(lambda: app_state(env, "retry") == "FAILED", "FAILED once the retries are used up")


def test_spark_driver_replaces_deleted_and_failed_executors(env: Env) -> None:
    env.create("sparkoperator.k8s.io/v1beta2", "sparkapplications", spark_app("exec"))
    pods = env.running(3, **{"sparkoperator.k8s.io/app-name": "exec"})
    executors = sorted((p for p in pods if p["metadata"]["labels"]["spark-role"] == "executor"),
                       key=lambda p: p["metadata"]["name"])
    env.delete(executors[0])
    env.fail(executors[1])
    after = eventually(lambda: [p for p in env.running(3, **{"sparkoperator.k8s.io/app-name": "exec"})
                                if p["metadata"]["labels"]["spark-role"] == "executor"
                                and p["metadata"]["labels"]["spark-exec-id"] not in ("1", "2")],
                       "two new executors")
    assert sorted(p["metadata"]["labels"]["spark-exec-id"] for p in after) == ["3", "4"]  # ids are never reused
    assert app_state(env, "exec") == "RUNNING"


# --- Argo Workflows, StatefulSet --------------------------------------------------------------------------------


def test_workflow_marks_a_deleted_pod_error_and_never_recreates_it(env: Env) -> None:
    env.create("argoproj.io/v1alpha1", "workflows", {"metadata": {"name": "wf"}, "spec": {
        "entrypoint": "main", "templates": [{"name": "main", "container": container()}]}})
    [pod] = env.running(1, **{"workflows.argoproj.io/workflow": "wf"})
    env.delete(pod)
    eventually(lambda: (env.get("argoproj.io/v1alpha1", "Workflow", "wf").get("status") or {}).get("phase")
               == "Error", "the workflow Error")
    [node] = env.get("argoproj.io/v1alpha1", "Workflow", "wf")["status"]["nodes"].values()
    assert (node["phase"], node["message"]) == ("Error", "pod deleted")
    time.sleep(1.0)
    assert not env.pods()


def test_statefulset_recreates_deleted_and_failed_pods_under_their_names(env: Env) -> None:
    env.create("apps/v1", "statefulsets", {"metadata": {"name": "db"}, "spec": {
        "replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
        "template": {"metadata": {"labels": {"app": "db"}}, "spec": pod_spec()}}})
    first = {p["metadata"]["name"]: p for p in env.running(2, app="db")}
    env.delete(first["db-0"])
    env.fail(first["db-1"])
    eventually(lambda: {p["metadata"]["name"] for p in env.running(2, app="db")
                        if p["metadata"]["uid"] not in {q["metadata"]["uid"] for q in first.values()}}
               == {"db-0", "db-1"}, "both pods recreated under their names")


def test_a_refused_replacement_is_retried(env: Env) -> None:
    """A deletion the apiserver refuses (a stale uid precondition) changes nothing."""
    env.create("batch/v1", "jobs", {"metadata": {"name": "kept"}, "spec": {"template": {"spec": pod_spec(
        restartPolicy="Never")}}})
    [pod] = env.running(1, **{"batch.kubernetes.io/job-name": "kept"})
    with pytest.raises(ApiError) as refused:
        env.delete({"metadata": {**pod["metadata"], "uid": str(uuid.uuid4())}})
    assert refused.value.code == 409
    assert env.pods()[0]["metadata"]["uid"] == pod["metadata"]["uid"]

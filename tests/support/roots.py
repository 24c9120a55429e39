"""Realistic root objects, as users create them, for the local cluster's operators to turn into pods."""

from __future__ import annotations

from typing import Any

from tests.support.contract import OPT_IN

Obj = dict[str, Any]
OPTED_IN = {OPT_IN: "true"}
IMAGE = "registry.example.com/ml/train:1.0"
TOLERATION = {"key": "example.com/accelerator", "operator": "Exists", "effect": "NoSchedule"}
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"


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

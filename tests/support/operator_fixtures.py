"""Objects shaped the way each supported operator creates them (see /work/shared/operators.md).

Root objects, the intermediate objects between them and their pods (Jobs, StatefulSets, driver
and leader pods, RayClusters, SparkApplication runs) and the pods themselves, with owner
references (controller flags, uids), the operator's labels, and ``generateName`` without a name
where the operator uses it. Also the documented gang-size formulas and a small quantity parser,
written independently of the product so that the tests can disagree with it.
"""

from __future__ import annotations

import copy
import json
import re
import uuid
from fractions import Fraction
from typing import Any

from tests.support.contract import OPT_IN as GANG

Obj = dict[str, Any]

OPT_IN = {GANG: "true"}


# --- generic building blocks -----------------------------------------------------------------


def new_uid() -> str:
    return str(uuid.uuid4())


def ref(owner: Obj, controller: bool = True) -> Obj:
    """An ownerReference to ``owner``; ``controller=False`` leaves the flag out, as operators do."""
    meta = owner["metadata"]
    reference = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"],
                 "uid": meta["uid"], "blockOwnerDeletion": True}
    if controller:
        reference["controller"] = True
    return reference


def make(api_version: str, kind: str, ns: str, name: str, spec: Obj | None = None, *, labels: Obj | None = None,
         annotations: Obj | None = None, owners: tuple[Obj, ...] = ()) -> Obj:
    """A namespaced object as the apiserver stores it (name, namespace and uid set)."""
    meta: Obj = {"name": name, "namespace": ns, "uid": new_uid()}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    if owners:
        meta["ownerReferences"] = [dict(o) for o in owners]
    obj = {"apiVersion": api_version, "kind": kind, "metadata": meta}
    if spec is not None:
        obj["spec"] = spec
    return obj


def container(name: str = "main", cpu: str | None = "1", memory: str | None = "1Gi", **extra: Any) -> Obj:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": name, "image": "registry.example.com/train:1.0", "resources": {"requests": requests}, **extra}


def pod_spec(*containers: Obj, **extra: Any) -> Obj:
    return {"containers": list(containers) or [container()], **extra}


def pod(ns: str | None, *, name: str | None = None, generate_name: str | None = None, labels: Obj | None = None,
        owners: tuple[Obj, ...] = (), spec: Obj | None = None, annotations: Obj | None = None) -> Obj:
    """A pod as the creating controller sends it: ``name`` or only ``generateName``; the apiserver has
    already defaulted ``schedulerName``. ``ns=None`` leaves the namespace out (Job controller pods)."""
    meta: Obj = {"labels": dict(labels or {}), "ownerReferences": [dict(o) for o in owners]}
    if name is not None:
        meta["name"] = name
    if generate_name is not None:
        meta["generateName"] = generate_name
    if ns is not None:
        meta["namespace"] = ns
    if annotations:
        meta["annotations"] = dict(annotations)
    spec = copy.deepcopy(spec) if spec is not None else pod_spec()
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("restartPolicy", "Never")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def stored(obj: Obj, ns: str) -> Obj:
    """A pod the apiserver has stored (an owner of other pods): namespace and uid are set."""
    stored_obj = copy.deepcopy(obj)
    stored_obj["metadata"].update(namespace=ns, uid=new_uid())
    return stored_obj


def name_of(obj: Obj) -> str:
    return obj["metadata"]["name"]


def owner_string(root: Obj) -> str:
    """``<group>/<version>/<kind>/<name>`` of a root object."""
    return f"{root['apiVersion']}/{root['kind']}/{name_of(root)}"


# --- quantities (independent of gang.quantity) -----------------------------------------------

_SUFFIX = {"": 1, "m": Fraction(1, 1000), "k": 10**3, "M": 10**6, "G": 10**9,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
MI, GI = 2**20, 2**30


def quantity(text: str | int) -> Fraction:
    match = re.fullmatch(r"([0-9.]+)(Ki|Mi|Gi|Ti|m|k|M|G)?", str(text))
    assert match, f"not a quantity: {text!r}"
    return Fraction(match.group(1)) * _SUFFIX[match.group(2) or ""]


def quantities(requests: Obj) -> dict[str, Fraction]:
    return {name: quantity(value) for name, value in requests.items()}


# --- documented gang-size formulas -----------------------------------------------------------


def job_pods(job_spec: Obj) -> int:
    """A batch Job runs min(parallelism (default 1), completions) pods at once."""
    parallelism = job_spec.get("parallelism", 1)
    completions = job_spec.get("completions")
    return parallelism if completions is None else min(parallelism, completions)


def replicated_job_pods(rjob: Obj) -> int:
    return rjob.get("replicas", 1) * job_pods(rjob["template"]["spec"])


def jobset_size(jobset_spec: Obj) -> int:
    return sum(replicated_job_pods(r) for r in jobset_spec["replicatedJobs"])


def training_size(job_spec: Obj, replica_field: str) -> int:
    policy = job_spec.get("runPolicy", {}).get("schedulingPolicy", {})
    if policy.get("minAvailable"):
        return policy["minAvailable"]
    return sum(s.get("replicas", 1) for s in job_spec[replica_field].values())


def ray_size(cluster_spec: Obj) -> int:
    """1 head + Σ clamp(replicas, minReplicas, maxReplicas) × numOfHosts (minReplicas when autoscaling)."""
    total = 1
    for group in cluster_spec.get("workerGroupSpecs", []):
        low, high = group.get("minReplicas", 0), group.get("maxReplicas", 2**31)
        wanted = low if cluster_spec.get("enableInTreeAutoscaling") else group.get("replicas", 0)
        total += max(low, min(wanted, high)) * group.get("numOfHosts", 1)
    return total


def spark_executors(app_spec: Obj) -> int:
    """E = executor.instances (default 1); with dynamic allocation max(instances, initial, min)."""
    count = app_spec.get("executor", {}).get("instances", 1)
    conf = app_spec.get("sparkConf", {})
    dynamic = app_spec.get("dynamicAllocation", {})
    if dynamic.get("enabled") or conf.get("spark.dynamicAllocation.enabled") == "true":
        for field in ("initialExecutors", "minExecutors"):
            count = max(count, int(dynamic.get(field, conf.get(f"spark.dynamicAllocation.{field}", 0))))
    return count


# --- SparkApplication / ScheduledSparkApplication ---------------------------------------------

SPARK_API = "sparkoperator.k8s.io/v1beta2"


def spark_spec(**overrides: Any) -> Obj:
    spec = {"type": "Scala", "mode": "cluster", "sparkVersion": "3.5.1", "image": "spark:3.5.1",
            "mainClass": "org.example.Main", "mainApplicationFile": "local:///opt/app.jar",
            "driver": {"cores": 1, "memory": "1g", "serviceAccount": "spark"},
            "executor": {"instances": 3, "cores": 2, "memory": "4g"}}
    spec.update(overrides)
    return spec


def spark_app(ns: str, name: str, spec: Obj | None = None, annotations: Obj | None = None,
              labels: Obj | None = None, owners: tuple[Obj, ...] = ()) -> Obj:
    return make(SPARK_API, "SparkApplication", ns, name, spec or spark_spec(),
                annotations=annotations, labels=labels, owners=owners)


def scheduled_spark_app(ns: str, name: str, template: Obj | None = None, annotations: Obj | None = None) -> Obj:
    spec = {"schedule": "@daily", "concurrencyPolicy": "Allow", "template": template or spark_spec()}
    return make(SPARK_API, "ScheduledSparkApplication", ns, name, spec, annotations=annotations)


def spark_run(scheduled: Obj, run_id: int) -> Obj:
    """The SparkApplication a ScheduledSparkApplication creates: ownerRef *without* controller."""
    meta = scheduled["metadata"]
    return make(SPARK_API, "SparkApplication", meta["namespace"], f"{meta['name']}-{run_id}",
                copy.deepcopy(scheduled["spec"]["template"]),
                labels={"sparkoperator.k8s.io/scheduled-app-name": meta["name"]},
                owners=(ref(scheduled, controller=False),))


def _spark_labels(app: Obj, role: str) -> Obj:
    labels = {"sparkoperator.k8s.io/app-name": name_of(app),
              "spark-app-selector": "spark-" + app["metadata"]["uid"].replace("-", ""),
              "spark-role": role, "spark-version": "3.5.1",
              "sparkoperator.k8s.io/launched-by-spark-operator": "true"}
    scheduled = (app["metadata"].get("labels") or {}).get("sparkoperator.k8s.io/scheduled-app-name")
    if scheduled:
        labels["sparkoperator.k8s.io/scheduled-app-name"] = scheduled
    return labels


def spark_driver(app: Obj) -> Obj:
    """The driver pod spark-submit creates: ``<app>-driver``, owned by the SparkApplication."""
    labels = {**_spark_labels(app, "driver"), "sparkoperator.k8s.io/submission-id": new_uid()}
    return pod(app["metadata"]["namespace"], name=f"{name_of(app)}-driver", labels=labels, owners=(ref(app),),
               spec=pod_spec(container("spark-kubernetes-driver", cpu="1", memory="1408Mi")))


def spark_executor(app: Obj, driver: Obj, exec_id: int) -> Obj:
    """An executor the driver creates: controller = the driver *pod*; operator ≥ 2.4 adds a plain
    reference to the SparkApplication."""
    labels = {**_spark_labels(app, "executor"), "spark-exec-id": str(exec_id)}
    return pod(None, name="", generate_name=f"{name_of(app)}-exec-", labels=labels,
               owners=(ref(driver), ref(app, controller=False)),
               spec=pod_spec(container("spark-kubernetes-executor", cpu="2", memory="4505Mi")))


# --- Kubeflow training-operator (kubeflow.org/v1) --------------------------------------------

REPLICA_FIELDS = {"PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs", "XGBoostJob": "xgbReplicaSpecs",
                  "PaddleJob": "paddleReplicaSpecs", "JAXJob": "jaxReplicaSpecs", "MPIJob": "mpiReplicaSpecs"}


def training_job(kind: str, ns: str, name: str, replicas: dict[str, int | None], annotations: Obj | None = None,
                 api_version: str = "kubeflow.org/v1", **spec: Any) -> Obj:
    """``replicas`` maps replica type to count; None leaves ``replicas`` out (the operator runs 1)."""
    specs = {}
    for replica_type, count in replicas.items():
        specs[replica_type] = {"restartPolicy": "OnFailure",
                               "template": {"spec": pod_spec(container(replica_type.lower()))}}
        if count is not None:
            specs[replica_type]["replicas"] = count
    return make(api_version, kind, ns, name, {REPLICA_FIELDS[kind]: specs, **spec}, annotations=annotations)


def training_pod(job: Obj, replica_type: str, index: int) -> Obj:
    """``<job>-<type>-<index>``, owned by the job (training-operator names its pods explicitly)."""
    job_name, kind = name_of(job), job["kind"]
    labels = {"training.kubeflow.org/job-name": job_name,
              "training.kubeflow.org/operator-name": kind.lower().removesuffix("job") + "job-controller",
              "training.kubeflow.org/replica-type": replica_type.lower(),
              "training.kubeflow.org/replica-index": str(index)}
    if replica_type in ("Master", "Chief", "Launcher") and index == 0:
        labels["training.kubeflow.org/job-role"] = "master"
    template = job["spec"][REPLICA_FIELDS[kind]][replica_type]["template"]
    return pod(job["metadata"]["namespace"], name=f"{job_name}-{replica_type.lower()}-{index}", labels=labels,
               owners=(ref(job),), spec=template["spec"])


# --- batch Job / CronJob -----------------------------------------------------------------------


def job_spec(parallelism: int | None = None, completions: int | None = None, template_spec: Obj | None = None,
             **extra: Any) -> Obj:
    spec: Obj = {"template": {"spec": template_spec or pod_spec()}, **extra}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    return spec


def batch_job(ns: str, name: str, spec: Obj | None = None, annotations: Obj | None = None,
              labels: Obj | None = None, owners: tuple[Obj, ...] = ()) -> Obj:
    return make("batch/v1", "Job", ns, name, spec or job_spec(), annotations=annotations, labels=labels,
                owners=owners)


def cronjob(ns: str, name: str, template_spec: Obj, annotations: Obj | None = None) -> Obj:
    return make("batch/v1", "CronJob", ns, name, {"schedule": "*/5 * * * *", "jobTemplate": {"spec": template_spec}},
                annotations=annotations)


def cron_run(cron: Obj, scheduled_minute: int) -> Obj:
    """The Job a CronJob creates: ``<cronjob>-<minutes since epoch>``, owned by the CronJob."""
    meta = cron["metadata"]
    return batch_job(meta["namespace"], f"{meta['name']}-{scheduled_minute}",
                     copy.deepcopy(cron["spec"]["jobTemplate"]["spec"]), owners=(ref(cron),))


def job_pod(job: Obj, completion_index: int | None = None, labels: Obj | None = None) -> Obj:
    """A pod the Job controller creates: only ``generateName`` (``<job>-`` or ``<job>-<index>-``), no name,
    no namespace; the Job's labels are stamped from its template."""
    job_name, job_uid = name_of(job), job["metadata"]["uid"]
    pod_labels = {**(job["spec"]["template"].get("metadata", {}).get("labels") or {}), **(labels or {}),
                  "batch.kubernetes.io/job-name": job_name, "job-name": job_name,
                  "batch.kubernetes.io/controller-uid": job_uid, "controller-uid": job_uid}
    prefix = f"{job_name}-"
    if completion_index is not None:
        pod_labels["batch.kubernetes.io/job-completion-index"] = str(completion_index)
        prefix = f"{job_name}-{completion_index}-"
    return pod(None, generate_name=prefix, labels=pod_labels, owners=(ref(job),),
               spec=job["spec"]["template"]["spec"])


# --- MPIJob v2beta1 (mpi-operator) -------------------------------------------------------------


def mpijob_v2(ns: str, name: str, workers: int, policy: str | None = None, annotations: Obj | None = None,
              launcher_spec: Obj | None = None, api_version: str = "kubeflow.org/v2beta1") -> Obj:
    spec: Obj = {"slotsPerWorker": 1, "runPolicy": {"cleanPodPolicy": "Running"}, "mpiReplicaSpecs": {
        "Launcher": {"replicas": 1, "template": {"spec": launcher_spec or pod_spec(container("launcher"))}},
        "Worker": {"replicas": workers, "template": {"spec": pod_spec(container("worker", cpu="8", memory="32Gi"))}},
    }}
    if policy:
        spec["launcherCreationPolicy"] = policy
    return make(api_version, "MPIJob", ns, name, spec, annotations=annotations)


def _mpi_labels(mpijob: Obj, role: str) -> Obj:
    return {"training.kubeflow.org/job-name": name_of(mpijob), "training.kubeflow.org/job-role": role,
            "training.kubeflow.org/operator-name": "mpi-operator"}


def mpi_worker(mpijob: Obj, index: int) -> Obj:
    """``<job>-worker-<i>``, owned directly by the MPIJob."""
    labels = {**_mpi_labels(mpijob, "worker"), "training.kubeflow.org/replica-index": str(index)}
    return pod(mpijob["metadata"]["namespace"], name=f"{name_of(mpijob)}-worker-{index}", labels=labels,
               owners=(ref(mpijob),), spec=mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"])


def mpi_launcher_job(mpijob: Obj) -> Obj:
    """The Job ``<job>-launcher`` (owned by the MPIJob) whose pod is the launcher."""
    template = copy.deepcopy(mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"])
    template.setdefault("metadata", {})["labels"] = _mpi_labels(mpijob, "launcher")
    return batch_job(mpijob["metadata"]["namespace"], f"{name_of(mpijob)}-launcher",
                     {"backoffLimit": 6, "template": template}, owners=(ref(mpijob),))


# --- JobSet / TrainJob -----------------------------------------------------------------------

JOBSET_API = "jobset.x-k8s.io/v1alpha2"


def replicated_job(name: str, replicas: int | None = None, parallelism: int | None = None,
                   completions: int | None = None, template_spec: Obj | None = None,
                   depends_on: str | None = None) -> Obj:
    rjob: Obj = {"name": name, "template": {"spec": job_spec(parallelism, completions, template_spec,
                                                             completionMode="Indexed", backoffLimit=0)}}
    if replicas is not None:
        rjob["replicas"] = replicas
    if depends_on:
        rjob["dependsOn"] = [{"name": depends_on, "status": "Ready"}]
    return rjob


def jobset(ns: str, name: str, replicated_jobs: list[Obj], in_order: bool = False, annotations: Obj | None = None,
           owners: tuple[Obj, ...] = ()) -> Obj:
    spec: Obj = {"replicatedJobs": replicated_jobs, "network": {"enableDNSHostnames": True}}
    if in_order:
        spec["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    return make(JOBSET_API, "JobSet", ns, name, spec, annotations=annotations, owners=owners)


def jobset_job(js: Obj, rjob_name: str, job_index: int = 0, restart_attempt: int = 0) -> Obj:
    """The Job ``<jobset>-<replicatedJob>-<index>`` the JobSet controller creates, labels on Job and template."""
    rjob = next(r for r in js["spec"]["replicatedJobs"] if r["name"] == rjob_name)
    labels = {"jobset.sigs.k8s.io/jobset-name": name_of(js), "jobset.sigs.k8s.io/replicatedjob-name": rjob_name,
              "jobset.sigs.k8s.io/job-index": str(job_index),
              "jobset.sigs.k8s.io/restart-attempt": str(restart_attempt),
              "jobset.sigs.k8s.io/replicatedjob-replicas": str(rjob.get("replicas", 1))}
    spec = copy.deepcopy(rjob["template"]["spec"])
    spec["template"].setdefault("metadata", {})["labels"] = dict(labels)
    return batch_job(js["metadata"]["namespace"], f"{name_of(js)}-{rjob_name}-{job_index}", spec, labels=labels,
                     owners=(ref(js),))


def trainjob(ns: str, name: str, annotations: Obj | None = None) -> Obj:
    spec = {"runtimeRef": {"name": "torch-distributed", "kind": "ClusterTrainingRuntime"},
            "trainer": {"numNodes": 4}}
    return make("trainer.kubeflow.org/v1alpha1", "TrainJob", ns, name, spec, annotations=annotations)


# --- KubeRay -----------------------------------------------------------------------------------

RAY_API = "ray.io/v1"


def worker_group(name: str, replicas: int | None = None, min_replicas: int | None = None,
                 max_replicas: int | None = None, hosts: int | None = None) -> Obj:
    group: Obj = {"groupName": name, "rayStartParams": {},
                  "template": {"spec": pod_spec(container("ray-worker", cpu="4", memory="16Gi"))}}
    for key, value in (("replicas", replicas), ("minReplicas", min_replicas), ("maxReplicas", max_replicas),
                       ("numOfHosts", hosts)):
        if value is not None:
            group[key] = value
    return group


def ray_cluster_spec(*groups: Obj, autoscaling: bool = False) -> Obj:
    spec: Obj = {"rayVersion": "2.40.0",
                 "headGroupSpec": {"rayStartParams": {}, "template": {"spec": pod_spec(container("ray-head"))}},
                 "workerGroupSpecs": list(groups)}
    if autoscaling:
        spec["enableInTreeAutoscaling"] = True
    return spec


def ray_cluster(ns: str, name: str, spec: Obj, annotations: Obj | None = None, labels: Obj | None = None,
                owners: tuple[Obj, ...] = ()) -> Obj:
    return make(RAY_API, "RayCluster", ns, name, spec, annotations=annotations, labels=labels, owners=owners)


def ray_job(ns: str, name: str, cluster_spec: Obj, annotations: Obj | None = None) -> Obj:
    spec = {"entrypoint": "python train.py", "shutdownAfterJobFinishes": True, "rayClusterSpec": cluster_spec}
    return make(RAY_API, "RayJob", ns, name, spec, annotations=annotations)


def ray_service(ns: str, name: str, cluster_spec: Obj, annotations: Obj | None = None) -> Obj:
    return make(RAY_API, "RayService", ns, name, {"serveConfigV2": "applications: []",
                                                   "rayClusterConfig": cluster_spec}, annotations=annotations)


def cluster_of(root: Obj, name: str) -> Obj:
    """The RayCluster a RayJob or RayService creates (controller = the root)."""
    spec = root["spec"].get("rayClusterSpec") or root["spec"]["rayClusterConfig"]
    return ray_cluster(root["metadata"]["namespace"], name, copy.deepcopy(spec), owners=(ref(root),),
                       labels={"ray.io/originated-from-crd": root["kind"]})


def ray_pod(cluster: Obj, group: str | None = None) -> Obj:
    """Head (``group=None``) or worker pod of a RayCluster, created with ``generateName``."""
    node_type = "head" if group is None else "worker"
    labels = {"ray.io/cluster": name_of(cluster), "ray.io/node-type": node_type,
              "ray.io/group": group or "headgroup", "ray.io/is-ray-node": "yes",
              "app.kubernetes.io/created-by": "kuberay-operator"}
    prefix = f"{name_of(cluster)}-head-" if group is None else f"{name_of(cluster)}-{group}-worker-"
    return pod(cluster["metadata"]["namespace"], generate_name=prefix, labels=labels, owners=(ref(cluster),),
               spec=pod_spec(container("ray-head" if group is None else "ray-worker")))


# --- LeaderWorkerSet -------------------------------------------------------------------------

LWS_API = "leaderworkerset.x-k8s.io/v1"


def lws(ns: str, name: str, size: int, replicas: int = 1, startup: str | None = None,
        worker_spec: Obj | None = None, annotations: Obj | None = None) -> Obj:
    spec: Obj = {"replicas": replicas, "leaderWorkerTemplate": {
        "size": size, "restartPolicy": "RecreateGroupOnPodRestart",
        "leaderTemplate": {"spec": pod_spec(container("leader", cpu="2", memory="8Gi"))},
        "workerTemplate": {"spec": worker_spec or pod_spec(container("worker"))}}}
    if startup:
        spec["startupPolicy"] = startup
    return make(LWS_API, "LeaderWorkerSet", ns, name, spec, annotations=annotations)


def _lws_labels(lws_obj: Obj, revision: str | None, group: int, worker: int, index_labels: bool) -> Obj:
    labels = {"leaderworkerset.sigs.k8s.io/name": name_of(lws_obj)}
    if revision:
        labels["leaderworkerset.sigs.k8s.io/template-revision-hash"] = revision
    if index_labels:  # added by LWS's own pod webhook, which may run after ours
        labels["leaderworkerset.sigs.k8s.io/group-index"] = str(group)
        labels["leaderworkerset.sigs.k8s.io/worker-index"] = str(worker)
    return labels


def lws_leader_sts(lws_obj: Obj) -> Obj:
    """The leader StatefulSet ``<lws>`` (one leader pod per group), owned by the LWS."""
    return make("apps/v1", "StatefulSet", lws_obj["metadata"]["namespace"], name_of(lws_obj),
                {"replicas": lws_obj["spec"]["replicas"]}, owners=(ref(lws_obj),))


def lws_leader(lws_obj: Obj, leader_sts: Obj, group: int, revision: str | None = "7d9f8b6c5",
               index_labels: bool = True) -> Obj:
    """Leader pod ``<lws>-<group>`` of the leader StatefulSet."""
    return pod(lws_obj["metadata"]["namespace"], name=f"{name_of(lws_obj)}-{group}",
               labels=_lws_labels(lws_obj, revision, group, 0, index_labels), owners=(ref(leader_sts),),
               spec=lws_obj["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"])


def lws_worker_sts(lws_obj: Obj, leader: Obj) -> Obj:
    """The worker StatefulSet ``<lws>-<group>``, owned by the leader *pod*."""
    return make("apps/v1", "StatefulSet", lws_obj["metadata"]["namespace"], name_of(leader),
                {"replicas": lws_obj["spec"]["leaderWorkerTemplate"]["size"] - 1}, owners=(ref(leader),))


def lws_worker(lws_obj: Obj, worker_sts: Obj, group: int, worker: int, revision: str | None = "7d9f8b6c5",
               index_labels: bool = True) -> Obj:
    """Worker pod ``<lws>-<group>-<worker>`` (worker ≥ 1) of the worker StatefulSet."""
    return pod(lws_obj["metadata"]["namespace"], name=f"{name_of(worker_sts)}-{worker}",
               labels=_lws_labels(lws_obj, revision, group, worker, index_labels), owners=(ref(worker_sts),),
               spec=lws_obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"])


# --- Argo Workflow -----------------------------------------------------------------------------


def workflow(ns: str, name: str, annotations: Obj | None = None) -> Obj:
    spec = {"entrypoint": "main", "templates": [{"name": "main", "container": container("step")}]}
    return make("argoproj.io/v1alpha1", "Workflow", ns, name, spec, annotations=annotations)


def argo_pod(wf: Obj, step: str) -> Obj:
    """``<workflow>-<template>-<hash>``, owned by the Workflow."""
    return pod(wf["metadata"]["namespace"], name=f"{name_of(wf)}-{step}-3129834719",
               labels={"workflows.argoproj.io/workflow": name_of(wf), "workflows.argoproj.io/completed": "false"},
               annotations={"workflows.argoproj.io/node-name": f"{name_of(wf)}.{step}"},
               owners=(ref(wf),), spec=pod_spec(container("main"), container("wait", cpu="10m", memory="64Mi")))


# --- objects as the apiserver returns them ---------------------------------------------------------------

BULKY_CONTAINER = {
    "image": "registry.example.com/train:1.0", "imagePullPolicy": "IfNotPresent",
    "command": ["python", "-m", "train"], "args": ["--epochs", "10"] * 20,
    "env": [{"name": f"VAR_{i}", "value": "v" * 40} for i in range(40)],
    "envFrom": [{"configMapRef": {"name": "settings"}}],
    "ports": [{"containerPort": 8080, "name": "http"}],
    "volumeMounts": [{"name": f"vol-{i}", "mountPath": f"/mnt/{i}"} for i in range(10)],
    "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
    "readinessProbe": {"exec": {"command": ["true"]}},
    "securityContext": {"runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}},
}
BULKY_POD_SPEC = {
    "volumes": [{"name": f"vol-{i}", "configMap": {"name": f"cm-{i}"}} for i in range(10)],
    "serviceAccountName": "trainer", "securityContext": {"fsGroup": 1000}, "priorityClassName": "batch",
    "imagePullSecrets": [{"name": "registry"}], "terminationGracePeriodSeconds": 30,
}


def bulk_up(value: Any) -> Any:
    """Add what real objects carry and decisions never read, everywhere it can appear."""
    if isinstance(value, list):
        return [bulk_up(item) for item in value]
    if not isinstance(value, dict):
        return value
    out = {key: bulk_up(item) for key, item in value.items()}
    for field in ("containers", "initContainers"):
        if isinstance(out.get(field), list):
            out[field] = [{**copy.deepcopy(BULKY_CONTAINER), **c} for c in out[field]]
            for name, extra in BULKY_POD_SPEC.items():
                out.setdefault(name, copy.deepcopy(extra))
    return out


def as_returned(obj: Obj) -> Obj:
    """``obj`` as the apiserver returns it: server-side fields, kubectl's annotation, status, and pod templates
    with what real ones carry (images, env, commands, volumes, probes)."""
    full = bulk_up(obj)
    meta = full["metadata"]
    meta.setdefault("uid", f"uid-{meta['name']}")
    meta.update(resourceVersion="12345", generation=3, creationTimestamp="2026-11-25T10:00:00Z",
                finalizers=["example.com/cleanup"],
                managedFields=[{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1",
                                "fieldsV1": {"f:spec": {f"f:field{i}": {} for i in range(200)}}}])
    meta["annotations"] = {**meta.get("annotations", {}), "example.com/note": "n" * 100,
                           "kubectl.kubernetes.io/last-applied-configuration": json.dumps(obj)}
    meta.setdefault("labels", {})["app.kubernetes.io/part-of"] = "training"
    if "spec" in full:
        full["spec"].update(suspend=False, ttlSecondsAfterFinished=600, arguments=["a"] * 50)
    full["status"] = {"conditions": [{"type": "Created", "status": "True", "message": "m" * 200}] * 10}
    return full

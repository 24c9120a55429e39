"""Pods as each operator creates them, with the gang the documented contract expects of them (SCENARIOS)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from tests.support import operator_fixtures as f
from tests.support.contract import MIN_AVAILABLE
from tests.support.operator_fixtures import GI, MI, Obj

# A stage template with a native sidecar, an init container and a limits-only GPU.
STAGE_SPEC = f.pod_spec(
    {"name": "trainer", "image": "train:1", "resources": {"requests": {"cpu": "2", "memory": "4Gi"},
                                                          "limits": {"nvidia.com/gpu": "1"}}},
    initContainers=[{**f.container("proxy", cpu="500m", memory="256Mi"), "restartPolicy": "Always"},
                    f.container("fetch", cpu="3", memory="1Gi")],
    nodeSelector={"pool": "gpu"},
    tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])


# kube-scheduler: max(init peak, containers + sidecars); the fetch init runs next to the sidecar.
STAGE_REQUESTS = {"cpu": max(Fraction("0.5") + 3, 2 + Fraction("0.5")),  # 3.5
                  "memory": max(256 * MI + 1 * GI, 4 * GI + 256 * MI),  # 4352Mi
                  "nvidia.com/gpu": 1}  # a limit without a request defaults the request


def stage_member(rjob: Obj) -> Obj:
    """The announcement of a later replicated job of STAGE_SPEC pods: all its pods, and how many each child Job has."""
    return {"role": rjob["name"], "count": f.replicated_job_pods(rjob), "requests": STAGE_REQUESTS,
            "nodeSelector": {"pool": "gpu"}, "tolerations": STAGE_SPEC["tolerations"], "affinity": None,
            "perChild": f.job_pods(rjob["template"]["spec"])}


@dataclass
class Scenario:
    owners: list[Obj]  # stored in the stub apiserver
    pod: Obj  # the pod the operator creates
    root: Obj  # the root the owner annotations name
    group: str
    size: int
    expected: list[Obj] | None = None  # expected-members; None: the annotation must be absent


Builder = Callable[[str, Obj], Scenario]


def spark_driver(ns: str, ann: Obj) -> Scenario:
    app = f.spark_app(ns, "pi", annotations=ann)  # Scala, 3 executors × (2 cores, 4g)
    executors = f.spark_executors(app["spec"])
    # memory 4096Mi + max(384Mi, floor(0.1 × 4096Mi) = 409Mi)
    member = {"role": "executor", "count": executors, "requests": {"cpu": 2, "memory": (4096 + 409) * MI},
              "nodeSelector": {}, "tolerations": [], "affinity": None}
    return Scenario([app], f.spark_driver(app), app, "pi", 1 + executors, [member])


def spark_executor(ns: str, ann: Obj) -> Scenario:
    app = f.spark_app(ns, "pi", annotations=ann)
    driver = f.stored(f.spark_driver(app), ns)
    return Scenario([app, driver], f.spark_executor(app, driver, 2), app, "pi", 1 + f.spark_executors(app["spec"]))


def scheduled_spark_driver(ns: str, ann: Obj) -> Scenario:
    template = f.spark_spec(executor={"instances": 2, "cores": 1, "memory": "2g"})
    scheduled = f.scheduled_spark_app(ns, "nightly", template, annotations=ann)
    run = f.spark_run(scheduled, 1712345678)  # opt-in only on the schedule
    # memory 2048Mi + max(384Mi, 204Mi)
    member = {"role": "executor", "count": 2, "requests": {"cpu": 1, "memory": (2048 + 384) * MI},
              "nodeSelector": {}, "tolerations": [], "affinity": None}
    return Scenario([scheduled, run], f.spark_driver(run), scheduled, f.name_of(run),
                    1 + f.spark_executors(run["spec"]), [member])


def scheduled_spark_executor(ns: str, ann: Obj) -> Scenario:
    scheduled = f.scheduled_spark_app(ns, "nightly", annotations=ann)
    run = f.spark_run(scheduled, 1712345678)
    driver = f.stored(f.spark_driver(run), ns)
    return Scenario([scheduled, run, driver], f.spark_executor(run, driver, 1), scheduled, f.name_of(run),
                    1 + f.spark_executors(run["spec"]))


TRAINING = {  # kind: (replicas per type (None = field left out), the pod's replica type, index)
    "PyTorchJob": ({"Master": 1, "Worker": 3}, "Worker", 2),
    "TFJob": ({"Chief": None, "PS": 2, "Worker": 4}, "PS", 1),
    "XGBoostJob": ({"Master": 1, "Worker": 2}, "Master", 0),
    "PaddleJob": ({"Worker": 4}, "Worker", 3),
    "JAXJob": ({"Worker": 8}, "Worker", 0),
    "MPIJob": ({"Launcher": 1, "Worker": 2}, "Worker", 1),  # kubeflow.org/v1
}


def training(kind: str) -> Builder:
    replicas, replica_type, index = TRAINING[kind]

    def build(ns: str, ann: Obj) -> Scenario:
        job = f.training_job(kind, ns, "train", replicas, annotations=ann)
        size = f.training_size(job["spec"], f.REPLICA_FIELDS[kind])
        return Scenario([job], f.training_pod(job, replica_type, index), job, "train", size)

    return build


def pytorch_min_available(ns: str, ann: Obj) -> Scenario:
    job = f.training_job("PyTorchJob", ns, "elastic", {"Master": 1, "Worker": 5}, annotations=ann,
                         runPolicy={"schedulingPolicy": {"minAvailable": 3}})
    size = f.training_size(job["spec"], "pytorchReplicaSpecs")
    assert size == 3
    return Scenario([job], f.training_pod(job, "Worker", 4), job, "elastic", size)


LAUNCHER_SPEC = f.pod_spec(f.container("launcher", cpu="500m", memory="1Gi"), nodeSelector={"pool": "cpu"})


LAUNCHER = {"role": "launcher", "count": 1, "requests": {"cpu": Fraction(1, 2), "memory": GI},
            "nodeSelector": {"pool": "cpu"}, "tolerations": [], "affinity": None}


def mpi_v2(role: str, policy: str | None) -> Builder:
    def build(ns: str, ann: Obj) -> Scenario:
        job = f.mpijob_v2(ns, "allreduce", workers=4, policy=policy, annotations=ann, launcher_spec=LAUNCHER_SPEC)
        size = job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] + 1
        if role == "worker":
            expected = [LAUNCHER] if policy == "WaitForWorkersReady" else None
            return Scenario([job], f.mpi_worker(job, 3), job, "allreduce", size, expected)
        launcher_job = f.mpi_launcher_job(job)
        return Scenario([job, launcher_job], f.job_pod(launcher_job), job, "allreduce", size)

    return build


def jobset_plain(ns: str, ann: Obj) -> Scenario:
    js = f.jobset(ns, "llm", [f.replicated_job("workers", replicas=2, parallelism=4, completions=4),
                              f.replicated_job("ps")], annotations=ann)
    job = f.jobset_job(js, "workers", job_index=1)
    return Scenario([js, job], f.job_pod(job, completion_index=3), js, "llm", f.jobset_size(js["spec"]))


def jobset_depends_on(stage: str) -> Builder:
    def build(ns: str, ann: Obj) -> Scenario:
        js = f.jobset(ns, "mpi", [
            f.replicated_job("launcher"),
            f.replicated_job("workers", replicas=2, parallelism=4, completions=8, template_spec=STAGE_SPEC,
                             depends_on="launcher")], annotations=ann)
        job = f.jobset_job(js, stage)
        size = f.jobset_size(js["spec"])  # 1 + 2 × min(4, 8) = 9
        expected = [stage_member(js["spec"]["replicatedJobs"][1])] if stage == "launcher" else None
        return Scenario([js, job], f.job_pod(job, completion_index=0), js, "mpi", size, expected)

    return build


def jobset_in_order(stage: str) -> Builder:
    def build(ns: str, ann: Obj) -> Scenario:
        js = f.jobset(ns, "pipeline", [
            f.replicated_job("driver", parallelism=2, completions=3),
            f.replicated_job("workers", replicas=3, parallelism=2, completions=1, template_spec=STAGE_SPEC),
            f.replicated_job("evaluator", template_spec=STAGE_SPEC)], in_order=True, annotations=ann)
        job = f.jobset_job(js, stage)
        size = f.jobset_size(js["spec"])  # min(2, 3) + 3 × min(2, 1) + 1 = 6
        expected = [stage_member(r) for r in js["spec"]["replicatedJobs"][1:]]
        return Scenario([js, job], f.job_pod(job, completion_index=0), js, "pipeline", size,
                        expected if stage == "driver" else None)

    return build


def jobset_restarted(ns: str, ann: Obj) -> Scenario:
    js = f.jobset(ns, "llm", [f.replicated_job("workers", replicas=2, parallelism=2, completions=2)],
                  annotations=ann)
    job = f.jobset_job(js, "workers", job_index=0, restart_attempt=2)
    return Scenario([js, job], f.job_pod(job, completion_index=1), js, "llm-r2", f.jobset_size(js["spec"]))


def trainjob(stage: str) -> Builder:
    """TrainJob → JobSet of the same name (no annotations of its own) → Jobs → pods."""

    def build(ns: str, ann: Obj) -> Scenario:
        tj = f.trainjob(ns, "finetune", annotations=ann)
        js = f.jobset(ns, "finetune", [
            f.replicated_job("dataset-initializer"),
            f.replicated_job("node", parallelism=4, completions=4, template_spec=STAGE_SPEC,
                             depends_on="dataset-initializer")], owners=(f.ref(tj),))
        job = f.jobset_job(js, stage)
        expected = [stage_member(js["spec"]["replicatedJobs"][1])] if stage == "dataset-initializer" else None
        return Scenario([tj, js, job], f.job_pod(job, completion_index=0), tj, "finetune",
                        f.jobset_size(js["spec"]), expected)

    return build


def raycluster(node: str) -> Builder:
    def build(ns: str, ann: Obj) -> Scenario:
        spec = f.ray_cluster_spec(
            f.worker_group("multihost", replicas=3, min_replicas=1, max_replicas=5, hosts=2),  # 3 × 2
            f.worker_group("capped", replicas=10, max_replicas=4),  # 4
            f.worker_group("floor", replicas=0, min_replicas=2))  # 2
        cluster = f.ray_cluster(ns, "ray", spec, annotations=ann)
        size = f.ray_size(spec)
        assert size == 1 + 6 + 4 + 2
        return Scenario([cluster], f.ray_pod(cluster, None if node == "head" else "capped"), cluster, "ray", size)

    return build


def raycluster_autoscaling(ns: str, ann: Obj) -> Scenario:
    spec = f.ray_cluster_spec(f.worker_group("gpu", replicas=5, min_replicas=2, max_replicas=10), autoscaling=True)
    cluster = f.ray_cluster(ns, "elastic", spec, annotations=ann)
    return Scenario([cluster], f.ray_pod(cluster, "gpu"), cluster, "elastic", f.ray_size(spec))


def rayjob_cluster_pod(ns: str, ann: Obj) -> Scenario:
    spec = f.ray_cluster_spec(f.worker_group("cpu", replicas=2))
    rj = f.ray_job(ns, "batch-infer", spec, annotations=ann)
    cluster = f.cluster_of(rj, "batch-infer-x7k2p")
    return Scenario([rj, cluster], f.ray_pod(cluster, "cpu"), rj, "batch-infer", f.ray_size(spec))


def rayservice_pod(ns: str, ann: Obj) -> Scenario:
    spec = f.ray_cluster_spec(f.worker_group("serve", replicas=3, hosts=2))
    svc = f.ray_service(ns, "serve", spec, annotations=ann)
    cluster = f.cluster_of(svc, "serve-raycluster-q8wzt")
    return Scenario([svc, cluster], f.ray_pod(cluster), svc, f.name_of(cluster), f.ray_size(spec))


LWS_WORKER_SPEC = f.pod_spec(f.container("vllm", cpu="8", memory="64Gi"), nodeSelector={"accelerator": "h100"})


def lws(role: str, startup: str | None, revision: str | None = "7d9f8b6c5", index_labels: bool = True) -> Builder:
    def build(ns: str, ann: Obj) -> Scenario:
        lws_obj = f.lws(ns, "vllm", size=4, replicas=3, startup=startup, worker_spec=LWS_WORKER_SPEC,
                        annotations=ann)
        size = lws_obj["spec"]["leaderWorkerTemplate"]["size"]
        sts = f.lws_leader_sts(lws_obj)
        leader = f.lws_leader(lws_obj, sts, 1, revision=revision, index_labels=index_labels)
        group = "vllm-1" + (f"-{revision}" if revision else "")
        if role == "leader":
            member = {"role": "worker", "count": size - 1, "requests": {"cpu": 8, "memory": 64 * GI},
                      "nodeSelector": {"accelerator": "h100"}, "tolerations": [], "affinity": None}
            expected = [member] if startup == "LeaderReady" else None
            return Scenario([lws_obj, sts], leader, lws_obj, group, size, expected)
        leader = f.stored(leader, ns)
        worker_sts = f.lws_worker_sts(lws_obj, leader)
        worker = f.lws_worker(lws_obj, worker_sts, 1, 2, revision=revision, index_labels=index_labels)
        return Scenario([lws_obj, sts, leader, worker_sts], worker, lws_obj, group, size)

    return build


def batch_job(parallelism: int | None, completions: int | None, indexed: bool = False) -> Builder:
    def build(ns: str, ann: Obj) -> Scenario:
        job = f.batch_job(ns, "etl", f.job_spec(parallelism, completions), annotations=ann)
        pod = f.job_pod(job, completion_index=1 if indexed else None)
        return Scenario([job], pod, job, "etl", f.job_pods(job["spec"]))

    return build


def cronjob_run(ns: str, ann: Obj) -> Scenario:
    cron = f.cronjob(ns, "nightly", f.job_spec(parallelism=3, completions=6), annotations=ann)
    run = f.cron_run(cron, 28950000)
    return Scenario([cron, run], f.job_pod(run), cron, f.name_of(run), f.job_pods(run["spec"]))


def argo_with_size(ns: str, ann: Obj) -> Scenario:
    wf = f.workflow(ns, "wf-train", annotations={**ann, MIN_AVAILABLE: "3"})
    return Scenario([wf], f.argo_pod(wf, "train"), wf, "wf-train", 3)


SCENARIOS: dict[str, Builder] = {
    "spark-driver": spark_driver,
    "spark-executor": spark_executor,
    "scheduled-spark-driver": scheduled_spark_driver,
    "scheduled-spark-executor": scheduled_spark_executor,
    **{f"training-{kind}": training(kind) for kind in TRAINING},
    "pytorch-min-available": pytorch_min_available,
    "mpi-v2-worker": mpi_v2("worker", None),
    "mpi-v2-launcher": mpi_v2("launcher", None),
    "mpi-v2-wait-worker": mpi_v2("worker", "WaitForWorkersReady"),
    "mpi-v2-wait-launcher": mpi_v2("launcher", "WaitForWorkersReady"),
    "jobset": jobset_plain,
    "jobset-dependson-first": jobset_depends_on("launcher"),
    "jobset-dependson-later": jobset_depends_on("workers"),
    "jobset-inorder-first": jobset_in_order("driver"),
    "jobset-inorder-middle": jobset_in_order("workers"),
    "jobset-inorder-last": jobset_in_order("evaluator"),
    "jobset-restart-attempt": jobset_restarted,
    "trainjob-initializer": trainjob("dataset-initializer"),
    "trainjob-node": trainjob("node"),
    "raycluster-head": raycluster("head"),
    "raycluster-worker": raycluster("worker"),
    "raycluster-autoscaling": raycluster_autoscaling,
    "rayjob-cluster-pod": rayjob_cluster_pod,
    "rayservice-pod": rayservice_pod,
    "lws-leader": lws("leader", None),
    "lws-worker": lws("worker", None),
    "lws-leaderready-leader": lws("leader", "LeaderReady"),
    "lws-leaderready-worker": lws("worker", "LeaderReady"),
    "lws-leader-no-index-labels": lws("leader", "LeaderReady", index_labels=False),
    "lws-worker-no-index-labels": lws("worker", "LeaderReady", index_labels=False),
    "lws-no-revision": lws("worker", None, revision=None),
    "job": batch_job(4, 10),
    "job-indexed": batch_job(8, 2, indexed=True),
    "job-defaults": batch_job(None, None),
    "cronjob": cronjob_run,
    "argo-with-min-available": argo_with_size,
}

"""KubeRay (ray.io/v1): RayCluster, RayJob and RayService controllers of the kuberay-operator.

RayCluster: one head pod (``<cluster>-head-<random>``) and, per worker group, clamp(replicas, min,
max) x numOfHosts workers (``<cluster>-<group>-worker-<random>``; minReplicas when in-tree
autoscaling is on), all created together, owned by the RayCluster. State ``ready`` once every pod
runs. RayJob: a RayCluster ``<rayjob>-raycluster-<random>`` (name kept in status first), and once it
is ready the submitter Job ``<rayjob>`` (K8sJobMode). RayService: a RayCluster per config, promoted
from pending to active once ready. (Head Services and the Ray autoscaler are not emulated.)

Pods that go away are replaced (``reconcilePods``): a missing head is created again, and workers are created
until each group has its count of pods not being deleted; a pod that Failed or Succeeded (e.g. rejected by
its kubelet) is deleted first (``shouldDeletePod``) and then replaced. A RayJob whose submitter Job Failed is
Failed (``jobDeploymentStatus`` Failed, reason SubmissionFailed).
"""

from __future__ import annotations

from typing import cast

from cluster.operators.base import (
    JOBS,
    PODS,
    Operator,
    alive,
    labels,
    owner_ref,
    phase,
    pod_from_template,
    pod_ready,
    random_suffix,
)
from cluster.operators.job import job_finished
from cluster.store import Obj

RAYCLUSTERS = ("ray.io", "v1", "rayclusters")
RAYJOBS = ("ray.io", "v1", "rayjobs")
RAYSERVICES = ("ray.io", "v1", "rayservices")
IDENTITY = ("ray-system", "kuberay-operator")


def group_size(cluster_spec: Obj, group: Obj) -> int:
    low, high = group.get("minReplicas", 0), group.get("maxReplicas", 2**31 - 1)
    wanted = low if cluster_spec.get("enableInTreeAutoscaling") else group.get("replicas", 0)
    size: int = max(low, min(wanted, high)) * group.get("numOfHosts", 1)
    return size


def _cluster(root: Obj, name: str, spec: Obj) -> Obj:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "labels": {"ray.io/originated-from-crd": root["kind"],
                                                  "ray.io/originated-from-cr-name": root["metadata"]["name"],
                                                  "app.kubernetes.io/created-by": "kuberay-operator"},
                         "ownerReferences": [owner_ref(root)]},
            "spec": spec}


class RayClusterController(Operator):
    root = RAYCLUSTERS
    identity = IDENTITY

    def sync(self, cluster: Obj) -> None:
        spec = cluster.get("spec") or {}
        if spec.get("suspend"):
            return
        for pod in self.children(PODS, cluster):
            if phase(pod) in ("Failed", "Succeeded"):  # shouldDeletePod: it will not restart
                self.delete(PODS, pod)
        pods = [p for p in self.children(PODS, cluster) if alive(p) and phase(p) not in ("Failed", "Succeeded")]
        if not [p for p in pods if labels(p).get("ray.io/node-type") == "head"]:
            self.create(PODS, cluster, self._pod(cluster, spec.get("headGroupSpec") or {}, None))
        desired = 0
        for group in spec.get("workerGroupSpecs") or []:
            name = group.get("groupName", "")
            have = sum(labels(p).get("ray.io/node-type") == "worker" and labels(p).get("ray.io/group") == name
                       for p in pods)
            want = group_size(spec, group)
            desired += want
            for _ in range(want - have):
                self.create(PODS, cluster, self._pod(cluster, group, name))
        pods = [p for p in self.children(PODS, cluster) if alive(p)]
        workers = [p for p in pods if labels(p).get("ray.io/node-type") == "worker"]
        ready = len(pods) == desired + 1 and all(pod_ready(p) for p in pods)
        self.patch_status(RAYCLUSTERS, cluster, {
            "state": "ready" if ready else "", "desiredWorkerReplicas": desired,
            "readyWorkerReplicas": sum(pod_ready(p) for p in workers),
            "availableWorkerReplicas": sum(phase(p) == "Running" for p in workers)})

    @staticmethod
    def _pod(cluster: Obj, group: Obj, name: str | None) -> Obj:
        cluster_name = cluster["metadata"]["name"]
        kind = "head" if name is None else "worker"
        pod_labels = {"ray.io/cluster": cluster_name, "ray.io/node-type": kind, "ray.io/group": name or "headgroup",
                      "ray.io/identifier": f"{cluster_name}-{kind}", "ray.io/is-ray-node": "yes",
                      "app.kubernetes.io/name": "kuberay", "app.kubernetes.io/created-by": "kuberay-operator"}
        prefix = f"{cluster_name}-head-" if name is None else f"{cluster_name}-{name}-worker-"
        return pod_from_template(group.get("template") or {}, pod_labels, [owner_ref(cluster)], generate_name=prefix)


class RayJobController(Operator):
    root = RAYJOBS
    identity = IDENTITY

    def sync(self, rayjob: Obj) -> None:
        spec, status, meta = rayjob.get("spec") or {}, rayjob.get("status") or {}, rayjob["metadata"]
        if status.get("jobDeploymentStatus") in ("Complete", "Failed"):
            return
        name = status.get("rayClusterName")
        if not name:  # choose the name and record it before creating, so a retry reuses it
            name = f"{meta['name']}-raycluster-{random_suffix()}"
            self.patch_status(RAYJOBS, rayjob, {"rayClusterName": name, "jobDeploymentStatus": "Initializing",
                                                "jobId": f"{meta['name']}-{random_suffix()}"})
        cluster = self.get(RAYCLUSTERS, meta["namespace"], name)
        if cluster is None:
            self.create(RAYCLUSTERS, rayjob, _cluster(rayjob, name, spec.get("rayClusterSpec") or {}))
            return
        if (cluster.get("status") or {}).get("state") != "ready":
            return
        submitter = self.get(JOBS, meta["namespace"], meta["name"])
        if spec.get("submissionMode", "K8sJobMode") == "K8sJobMode" and submitter is None:
            self.create(JOBS, rayjob, self._submitter(rayjob, cluster))
        if submitter is not None and job_finished(submitter) == "Failed":
            self.patch_status(RAYJOBS, rayjob, {"jobDeploymentStatus": "Failed", "reason": "SubmissionFailed",
                                                "message": "submitter Job failed"})
            return
        self.patch_status(RAYJOBS, rayjob, {"jobDeploymentStatus": "Running"})

    @staticmethod
    def _submitter(rayjob: Obj, cluster: Obj) -> Obj:
        spec, name = rayjob["spec"], rayjob["metadata"]["name"]
        head = (((cluster["spec"].get("headGroupSpec") or {}).get("template") or {}).get("spec") or {})
        image = ((head.get("containers") or [{}])[0]).get("image", "rayproject/ray:2.41.0")
        template = spec.get("submitterPodTemplate") or {"spec": {"restartPolicy": "Never", "containers": [{
            "name": "ray-job-submitter", "image": image,
            "command": ["ray", "job", "submit", "--address",
                        f"http://{cluster['metadata']['name']}-head-svc:8265", "--", spec.get("entrypoint", "")],
            "resources": {"requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}}]}}
        job_labels = {"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": name,
                      "app.kubernetes.io/created-by": "kuberay-operator"}
        return {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "labels": job_labels, "ownerReferences": [owner_ref(rayjob)]},
                "spec": {"backoffLimit": (spec.get("submitterConfig") or {}).get("backoffLimit", 2),
                         "template": template}}


class RayServiceController(Operator):
    root = RAYSERVICES
    identity = IDENTITY

    def sync(self, service: Obj) -> None:
        status, meta = service.get("status") or {}, service["metadata"]
        pending = (status.get("pendingServiceStatus") or {}).get("rayClusterName")
        active = (status.get("activeServiceStatus") or {}).get("rayClusterName")
        if not pending and not active:
            pending = f"{meta['name']}-raycluster-{random_suffix()}"
            self.patch_status(RAYSERVICES, service, {"pendingServiceStatus": {"rayClusterName": pending}})
        name = cast(str, pending or active)  # one is set by now
        cluster = self.get(RAYCLUSTERS, meta["namespace"], name)
        if cluster is None:
            self.create(RAYCLUSTERS, service,
                        _cluster(service, name, (service.get("spec") or {}).get("rayClusterConfig") or {}))
        elif pending and (cluster.get("status") or {}).get("state") == "ready":
            self.patch_status(RAYSERVICES, service, {"activeServiceStatus": {"rayClusterName": pending},
                                                     "pendingServiceStatus": None, "serviceStatus": "Running"})


OPERATORS: dict[str, type[Operator]] = {
    "raycluster-controller": RayClusterController,
    "rayjob-controller": RayJobController,
    "rayservice-controller": RayServiceController,
}

"""Each kind's ``created`` (what ``kubenexus simulate`` admits for a submitted job: the pods, and the Jobs between
them and the root) against what the emulated operators create for the same object: the same names, owners, labels
and annotations the product reads, and the same placement as the planner sees it (requests as kube-scheduler counts
them, selectors, tolerations, affinity, scheduler, priority class, restart policy). No scheduler or kubelet runs:
the pods stay as created. Kinds whose ``created`` is None (not modelled) are not here.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cluster.controllers import Client, Loop
from cluster.crds import crd_manifests
from cluster.local import ADMIN, LocalCluster
from cluster.operators.table import start_operators
from gang.adapters.table import adapter_for
from gang.resources import pod_requests
from tests.support.polling import wait_for

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]
OPERATORS = ["job-controller", "pytorchjob-controller", "tfjob-controller", "jaxjob-controller",
             "xgboostjob-controller", "paddlejob-controller", "spark-operator", "raycluster-controller",
             "workflow-controller", "jobset-controller", "mpi-operator"]


def _template(cpu: str, gpus: int = 0, **spec: Any) -> Obj:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {"metadata": {"labels": {"team": "ml"}, "annotations": {"note": "x"}},
            "spec": {"containers": [{"name": "main", "image": "registry.example.com/train:1",
                                     "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}, "limits": limits}}],
                     **spec}}


ROOTS: dict[str, Obj] = {
    "pytorchjob": {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "resnet"},
                   "spec": {"pytorchReplicaSpecs": {
                       "Master": {"replicas": 1, "template": _template("2", 1)},
                       "Worker": {"replicas": 3, "restartPolicy": "ExitCode",
                                  "template": _template("4", 2, nodeSelector={"pool": "gpu"},
                                                        tolerations=[{"key": "gpu", "operator": "Exists"}])}}}},
    "tfjob": {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "mnist"},
              "spec": {"tfReplicaSpecs": {"PS": {"replicas": 1, "template": _template("1")},
                                          "Worker": {"replicas": 2, "template": _template("2")}}}},
    "jaxjob": {"apiVersion": "kubeflow.org/v1", "kind": "JAXJob", "metadata": {"name": "jax"},
               "spec": {"jaxReplicaSpecs": {"Worker": {"replicas": 2, "template": _template("1")}}}},
    "xgboostjob": {"apiVersion": "kubeflow.org/v1", "kind": "XGBoostJob", "metadata": {"name": "xgb"},
                   "spec": {"xgbReplicaSpecs": {"Master": {"replicas": 1, "template": _template("1")},
                                                "Worker": {"replicas": 1, "template": _template("1")}}}},
    # no restartPolicy: each side applies PaddleJob's default
    "paddlejob": {"apiVersion": "kubeflow.org/v1", "kind": "PaddleJob", "metadata": {"name": "paddle"},
                  "spec": {"paddleReplicaSpecs": {"Worker": {"replicas": 2, "template": _template("1")}}}},
    "raycluster": {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rc"},
                   "spec": {"headGroupSpec": {"template": _template("2")},
                            "workerGroupSpecs": [
                                {"groupName": "cpu", "replicas": 5, "minReplicas": 1, "maxReplicas": 3,
                                 "template": _template("1")},
                                {"groupName": "tpu", "replicas": 1, "numOfHosts": 2,
                                 "template": _template("1", nodeSelector={"pool": "tpu"})}]}},
    "workflow": {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "wf"},
                 "spec": {"entrypoint": "main", "nodeSelector": {"pool": "batch"},
                          "podMetadata": {"labels": {"team": "ml"}},
                          "templates": [
                              {"name": "main", "steps": [[{"name": "a", "template": "work"},
                                                          {"name": "b", "template": "gpu"}],
                                                         [{"name": "c", "template": "work"}]]},
                              {"name": "work", "container": {"image": "w:1", "resources": {"requests": {"cpu": "1"}}}},
                              {"name": "gpu", "metadata": {"labels": {"gpu": "yes"}},
                               "tolerations": [{"key": "gpu", "operator": "Exists"}],
                               "container": {"image": "g:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}}]}},
    "indexedjob": {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "shards"},
                   "spec": {"completionMode": "Indexed", "completions": 3, "parallelism": 2,
                            "template": _template("1", restartPolicy="Never",
                                                  initContainers=[{"name": "init", "image": "i:1"}])}},
    "jobset": {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"},
               "spec": {"replicatedJobs": [
                   {"name": "workers", "replicas": 2,
                    "template": {"spec": {"parallelism": 2, "completions": 2, "template": _template("2", 1)}}},
                   {"name": "eval", "dependsOn": [{"name": "workers", "status": "Complete"}],
                    "template": {"spec": {"template": _template("1", restartPolicy="Never")}}}]}},
    "mpijob": {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "mpi"},
               "spec": {"runPolicy": {"backoffLimit": 2},
                        "mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": _template("1")},
                                            "Worker": {"replicas": 3, "template": _template("4", 1)}}}},
    "job": {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "etl"},
            "spec": {"parallelism": 3, "completions": 5, "template": _template("500m", restartPolicy="Never")}},
    "sparkapplication": {
        "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
        "metadata": {"name": "pi", "labels": {"team": "data"}},
        "spec": {"type": "Python", "mode": "cluster", "image": "spark:3.5.3", "mainApplicationFile": "local:///pi.py",
                 "sparkVersion": "3.5.3", "nodeSelector": {"pool": "batch"},
                 "driver": {"cores": 2, "coreLimit": "3", "memory": "2g", "serviceAccount": "spark",
                            "labels": {"role": "d"}, "annotations": {"a": "b"},
                            "tolerations": [{"key": "spot", "operator": "Exists"}]},
                 "executor": {"instances": 4, "cores": 1, "memory": "4g"}}},
}
PLURALS = {"pytorchjob": "pytorchjobs", "tfjob": "tfjobs", "jaxjob": "jaxjobs", "xgboostjob": "xgboostjobs",
           "paddlejob": "paddlejobs", "raycluster": "rayclusters", "workflow": "workflows",
           "indexedjob": "jobs", "jobset": "jobsets", "mpijob": "mpijobs", "job": "jobs",
           "sparkapplication": "sparkapplications"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Client]]:
    local = LocalCluster(workdir=str(tmp_path_factory.mktemp("created")))
    admin = Client(local.api, ADMIN)
    for crd in crd_manifests():
        admin.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    loops: list[Loop] = start_operators(local.api, OPERATORS)
    yield local, admin
    for loop in loops:
        loop.stop()


def _placement(pod: Obj) -> Obj:
    """What planning reads of a pod's (or pod template's) spec, defaults applied as the apiserver applies them."""
    spec = pod["spec"]
    return {"requests": pod_requests(spec), "nodeSelector": spec.get("nodeSelector") or {},
            "tolerations": [t for t in spec.get("tolerations") or [] if t.get("key") == "gpu" or t.get("key")
                            == "spot"],
            "affinity": spec.get("affinity"), "priorityClassName": spec.get("priorityClassName"),
            "schedulerName": spec.get("schedulerName") or "default-scheduler",
            "restartPolicy": spec.get("restartPolicy") or "Always",
            "serviceAccountName": spec.get("serviceAccountName") or "default",
            "images": [c.get("image") for c in spec.get("containers") or []]}


@pytest.mark.parametrize("kind", sorted(ROOTS))
def test_created_agree_with_the_emulated_operator(cluster: tuple[LocalCluster, Client], kind: str) -> None:
    local, admin = cluster
    ns = f"t-{uuid.uuid4().hex[:8]}"
    admin.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    root = ROOTS[kind]
    group_version = root["apiVersion"]
    base = f"/apis/{group_version}" if "/" in group_version else f"/api/{group_version}"
    stored = admin.create(f"{base}/namespaces/{ns}/{PLURALS[kind]}", {**root, "metadata": {**root["metadata"]}})
    adapter = adapter_for(root["apiVersion"], root["kind"])
    assert adapter is not None
    ours = adapter.created(stored)
    assert ours, kind
    owners = [o for o in ours if o["kind"] != "Pod"]  # between the pods and the root: a JobSet's Jobs
    pods_resource, jobs_resource = local.registry.get("", "v1", "pods"), local.registry.get("batch", "v1", "jobs")
    assert pods_resource is not None and jobs_resource is not None

    def theirs() -> tuple[list[Obj], list[Obj]]:
        root_uid = stored["metadata"]["uid"]
        jobs = [j for j in local.store.list(jobs_resource, ns)[0] if owners and any(
            r.get("uid") == root_uid for r in j["metadata"].get("ownerReferences") or [])]
        uids = {root_uid, *(j["metadata"]["uid"] for j in jobs)}
        return jobs, [p for p in local.store.list(pods_resource, ns)[0]
                      if any(r.get("uid") in uids for r in p["metadata"].get("ownerReferences") or [])]

    wanted = (len(owners), len(ours) - len(owners))
    wait_for(lambda: all(len(found) >= n for found, n in zip(theirs(), wanted, strict=True)), 10,
             f"{kind}: the operator's objects")
    jobs, created = theirs()
    assert (len(jobs), len(created)) == wanted, kind
    # Our owners' uids are made up: the pods below them must name the operator's.
    by_name = {j["metadata"]["name"]: j for j in jobs}
    text = json.dumps(ours)
    for owner in owners:
        text = text.replace(owner["metadata"]["uid"], by_name[owner["metadata"]["name"]]["metadata"]["uid"])
    ours = json.loads(text)
    for mine in ours[:len(owners)]:
        operator = by_name[mine["metadata"]["name"]]
        _agree(mine, operator)
        defaults = {"completionMode": "NonIndexed", "suspend": False, "backoffLimit": 6}  # the apiserver's
        assert {f: mine["spec"].get(f, d) for f, d in defaults.items()} == {
            f: operator["spec"].get(f, d) for f, d in defaults.items()}  # how many pods: compared below
        assert _placement(mine["spec"]["template"]) == _placement(operator["spec"]["template"])
    ours = ours[len(owners):]
    named = {p["metadata"]["name"]: p for p in ours if p["metadata"].get("name")}
    pods = {p["metadata"]["name"]: p for p in created}
    assert set(named) <= set(pods), kind
    pairs = [(mine, pods[name]) for name, mine in named.items()]

    def prefix(pod: Obj) -> str:
        return str(pod["metadata"].get("generateName"))

    # generateName: the operator's random suffixes; pods of one prefix are alike
    generated = sorted((p for p in ours if not p["metadata"].get("name")), key=prefix)
    rest = sorted((p for name, p in pods.items() if name not in named), key=prefix)
    assert list(map(prefix, generated)) == list(map(prefix, rest)), kind
    pairs += zip(generated, rest, strict=True)
    for mine, operator in pairs:
        _agree(mine, operator)
        assert mine["metadata"].get("finalizers") == operator["metadata"].get("finalizers")
        assert _placement(mine) == _placement(operator), operator["metadata"]["name"]
        assert _index_env(mine) == _index_env(operator), operator["metadata"]["name"]


def _index_env(pod: Obj) -> list[list[Obj]]:
    """Each container's ``JOB_COMPLETION_INDEX`` (an Indexed Job's pods)."""
    return [[e for e in c.get("env") or [] if e.get("name") == "JOB_COMPLETION_INDEX"]
            for c in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]]


def _agree(mine: Obj, operator: Obj) -> None:
    """The same owner, and the operator's labels and annotations include ours."""
    name = operator["metadata"]["name"]
    assert mine["metadata"]["ownerReferences"] == operator["metadata"]["ownerReferences"], name
    assert mine["metadata"]["labels"].items() <= operator["metadata"]["labels"].items(), name
    assert (mine["metadata"].get("annotations") or {}).items() <= \
        (operator["metadata"].get("annotations") or {}).items(), name

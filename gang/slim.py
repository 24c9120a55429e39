"""Decode owner objects from the API's JSON keeping only the fields gang decisions read.

An owner as the apiserver returns it carries managedFields, status, kubectl's
last-applied-configuration and whole pod templates (images, env, commands, volumes, probes) that
no decision looks at; the owner cache holds thousands of them per process. msgspec decodes
straight into the shapes below and skips the rest while parsing, so neither the cache nor the
decode pays for it. The result is plain dicts and lists, the same shape ``json.loads`` gives with
the other keys left out.

What is kept, per kind, is exactly what reads it: the owner walk (``gang/owners.py``: names, uids,
ownerReferences), the opt-in rules (``gang/decide.py``: namespace labels, the root's
``kubenexus.io/*`` annotations), the adapters (``gang/adapters/``: the spec fields each one reads
and, through ``expected_from_template``, the pod template fields ``gang/resources.py`` counts) and
the controller (``controller/owners.py``: root annotations). tests/test_owner_slim.py runs every
operator scenario on full and on slim owners and compares the decisions. An adapter that reads a
new field must add it here.

Leaves are declared ``Any`` so an unexpected value reaches the adapter as it is; an object whose
*structure* differs from these shapes (a list where an object belongs) fails the typed decode and
is decoded in full instead: the adapters judge it, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

import msgspec

from gang import keys
from gang.adapters.table import ADAPTERS
from gang.kinds import INTERMEDIATE, NAMESPACE, Kind
from workloads.training.adapter import TrainingJobAdapter


class _OwnerReference(TypedDict, total=False):
    apiVersion: Any
    kind: Any
    name: Any
    uid: Any
    controller: Any


class _Meta(TypedDict, total=False):
    name: Any
    namespace: Any
    uid: Any
    labels: Any
    annotations: dict[str, Any]  # only kubenexus.io/* are kept (see decode)
    ownerReferences: list[_OwnerReference]


class _Container(TypedDict, total=False):
    resources: Any
    restartPolicy: Any


class _PodSpec(TypedDict, total=False):
    containers: list[_Container]
    initContainers: list[_Container]
    resources: Any
    overhead: Any
    nodeSelector: Any
    tolerations: Any
    affinity: Any


class _PodTemplate(TypedDict, total=False):
    spec: _PodSpec


class _Object(TypedDict, total=False):
    apiVersion: Any
    kind: Any
    metadata: _Meta


# --- spec shapes, per root kind ---------------------------------------------------------------


class _SparkExecutor(TypedDict, total=False):
    instances: Any
    cores: Any
    coreRequest: Any
    memory: Any
    memoryOverhead: Any
    gpu: Any
    nodeSelector: Any
    tolerations: Any
    affinity: Any


class _SparkSpec(TypedDict, total=False):
    type: Any
    batchScheduler: Any
    sparkConf: Any
    memoryOverheadFactor: Any
    nodeSelector: Any
    executor: _SparkExecutor
    dynamicAllocation: Any


class _ScheduledSparkSpec(TypedDict, total=False):
    template: _SparkSpec


class _RunPolicy(TypedDict, total=False):
    schedulingPolicy: Any


class _Replicas(TypedDict, total=False):
    replicas: Any


class _MPIReplicas(TypedDict, total=False):
    replicas: Any
    template: _PodTemplate  # MPIJob v2beta1's launcher is announced from its template


class _JobSpec(TypedDict, total=False):
    parallelism: Any
    completions: Any
    template: _PodTemplate


class _JobTemplate(TypedDict, total=False):
    spec: _JobSpec


class _ReplicatedJob(TypedDict, total=False):
    name: Any
    replicas: Any
    dependsOn: Any
    template: _JobTemplate


class _JobSetSpec(TypedDict, total=False):
    replicatedJobs: list[_ReplicatedJob]
    startupPolicy: Any


class _WorkerGroup(TypedDict, total=False):
    replicas: Any
    minReplicas: Any
    maxReplicas: Any
    numOfHosts: Any


class _RayClusterSpec(TypedDict, total=False):
    enableInTreeAutoscaling: Any
    workerGroupSpecs: list[_WorkerGroup]


class _RayJobSpec(TypedDict, total=False):
    rayClusterSpec: _RayClusterSpec


class _RayServiceSpec(TypedDict, total=False):
    rayClusterConfig: _RayClusterSpec


class _LeaderWorkerTemplate(TypedDict, total=False):
    size: Any
    workerTemplate: _PodTemplate


class _LeaderWorkerSetSpec(TypedDict, total=False):
    startupPolicy: Any
    leaderWorkerTemplate: _LeaderWorkerTemplate


class _CronJobSpec(TypedDict, total=False):
    jobTemplate: _JobTemplate


def _with_spec(name: str, spec: type) -> type:
    """An object type whose ``spec`` has the given shape."""
    shape: type = TypedDict(name, {"apiVersion": Any, "kind": Any, "metadata": _Meta,  # type: ignore[misc]
                                   "spec": spec}, total=False)
    return shape


def _training_spec(replica_field: str) -> type:
    """Kubeflow training jobs: ``runPolicy`` plus the kind's own replica-spec map."""
    shape: type = TypedDict(f"_{replica_field}Spec", {  # type: ignore[misc]
        "runPolicy": _RunPolicy, replica_field: dict[str, _Replicas]}, total=False)
    return shape


class _MPIJobSpec(TypedDict, total=False):
    """MPIJob kubeflow.org/v1 and v2beta1 (one kind, two adapters): the v2beta1 fields are a superset."""

    runPolicy: _RunPolicy
    mpiReplicaSpecs: dict[str, _MPIReplicas]
    launcherCreationPolicy: Any


# (group, kind) -> the shape of its objects. Kinds read only for their metadata (intermediate pods and
# StatefulSets, TrainJob, Workflow, Namespace) use _Object.
_SHAPES: dict[tuple[str, str], type] = {
    **{(k.group, k.kind): _Object for k in (*INTERMEDIATE.values(), NAMESPACE)},
    ("batch", "Job"): _with_spec("_Job", _JobSpec),
    ("batch", "CronJob"): _with_spec("_CronJob", _CronJobSpec),
    ("sparkoperator.k8s.io", "SparkApplication"): _with_spec("_Spark", _SparkSpec),
    ("sparkoperator.k8s.io", "ScheduledSparkApplication"): _with_spec("_ScheduledSpark", _ScheduledSparkSpec),
    **{(a.kind.group, a.kind.kind): _with_spec(f"_{a.kind.kind}", _training_spec(a.replica_field))
       for a in ADAPTERS if isinstance(a, TrainingJobAdapter)},
    ("kubeflow.org", "MPIJob"): _with_spec("_MPIJob", _MPIJobSpec),
    ("jobset.x-k8s.io", "JobSet"): _with_spec("_JobSet", _JobSetSpec),
    ("trainer.kubeflow.org", "TrainJob"): _Object,
    ("ray.io", "RayCluster"): _with_spec("_RayCluster", _RayClusterSpec),
    ("ray.io", "RayJob"): _with_spec("_RayJob", _RayJobSpec),
    ("ray.io", "RayService"): _with_spec("_RayService", _RayServiceSpec),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): _with_spec("_LeaderWorkerSet", _LeaderWorkerSetSpec),
    ("argoproj.io", "Workflow"): _Object,
}
_DECODERS: dict[tuple[str, str], Callable[[bytes], Any]] = {
    key: msgspec.json.Decoder(shape).decode for key, shape in _SHAPES.items()}
_FULL = msgspec.json.Decoder().decode


def shaped_kinds() -> set[tuple[str, str]]:
    """The (group, kind) pairs with a slim shape (a test checks every kind the walk reads has one)."""
    return set(_SHAPES)


def decode(kind: Kind, body: bytes) -> Any:
    """The object in ``body`` with only what decisions read; raises ``ValueError`` on invalid JSON."""
    slim = _DECODERS.get((kind.group, kind.kind))
    try:
        try:
            obj = slim(body) if slim else _FULL(body)
        except msgspec.ValidationError:  # valid JSON of an unexpected structure: keep all of it
            return _FULL(body)
    except msgspec.DecodeError as exc:
        raise ValueError(str(exc)) from exc
    meta = obj.get("metadata") if slim else None
    if meta and "annotations" in meta:
        ours = {k: v for k, v in meta["annotations"].items() if k.startswith(keys.PREFIX)}
        if ours:
            meta["annotations"] = ours
        else:
            del meta["annotations"]
    return obj

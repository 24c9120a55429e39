"""Minimal CustomResourceDefinitions for the operators' root kinds, as the emulator serves them.

Names, group and served version match each operator's own CRD (MPIJob as mpi-operator's
v2beta1); the schema preserves unknown fields, since the emulator does not validate custom
resources, and every kind has the status subresource its controller writes through.
"""

from __future__ import annotations

from typing import Any

# (group, version, kind, plural, short names, namespaced)
_KINDS: tuple[tuple[str, str, str, str, tuple[str, ...], bool], ...] = (
    ("sparkoperator.k8s.io", "v1beta2", "SparkApplication", "sparkapplications", ("sparkapp",), True),
    ("sparkoperator.k8s.io", "v1beta2", "ScheduledSparkApplication", "scheduledsparkapplications",
     ("scheduledsparkapp",), True),
    ("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs", (), True),
    ("kubeflow.org", "v1", "TFJob", "tfjobs", (), True),
    ("kubeflow.org", "v1", "XGBoostJob", "xgboostjobs", (), True),
    ("kubeflow.org", "v1", "PaddleJob", "paddlejobs", (), True),
    ("kubeflow.org", "v1", "JAXJob", "jaxjobs", (), True),
    ("kubeflow.org", "v2beta1", "MPIJob", "mpijobs", (), True),
    ("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets", (), True),
    ("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs", (), True),
    ("trainer.kubeflow.org", "v1alpha1", "TrainingRuntime", "trainingruntimes", (), True),
    ("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime", "clustertrainingruntimes", (), False),
    ("ray.io", "v1", "RayCluster", "rayclusters", (), True),
    ("ray.io", "v1", "RayJob", "rayjobs", (), True),
    ("ray.io", "v1", "RayService", "rayservices", (), True),
    ("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets", ("lws",), True),
    ("argoproj.io", "v1alpha1", "Workflow", "workflows", ("wf",), True),
)


def crd_manifest(group: str, version: str, kind: str, plural: str, short_names: tuple[str, ...] = (),
                 namespaced: bool = True) -> dict[str, Any]:
    names: dict[str, Any] = {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()}
    if short_names:
        names["shortNames"] = list(short_names)
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "names": names, "scope": "Namespaced" if namespaced else "Cluster",
                 "versions": [{"name": version, "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object",
                                                              "x-kubernetes-preserve-unknown-fields": True}},
                               "subresources": {"status": {}}}]},
    }


def crd_manifests() -> list[dict[str, Any]]:
    """One CRD per supported root kind (plus the trainer's runtimes, which TrainJobs reference)."""
    return [crd_manifest(*kind) for kind in _KINDS]

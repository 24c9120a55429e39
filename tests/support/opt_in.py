"""A pod, its PyTorchJob and a fresh namespace in the stub apiserver, for the opt-in and product-state tests."""

from __future__ import annotations

import uuid

from tests.support.contract import OPT_IN


def make_pod(labels=None, annotations=None, owners=(), **spec):
    meta = {"generateName": "p-"}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    if owners:
        meta["ownerReferences"] = list(owners)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}


def ref(obj, controller=True, uid=None):
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": uid or obj["metadata"]["uid"], "controller": controller, "blockOwnerDeletion": True}


def pytorchjob(ns, annotations=None, workers=3, name=None):
    """A PyTorchJob with 1 master + ``workers`` workers: a gang of workers + 1."""
    name = name or f"train-{uuid.uuid4().hex[:6]}"
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "annotations": annotations or {}},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": workers}}}}


def worker_pod(job, **spec):
    labels = {"training.kubeflow.org/job-name": job["metadata"]["name"],
              "training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": "0"}
    return make_pod(labels, owners=[ref(job)], **spec)


def fresh_namespace(apiserver, name=None, label=None):
    name = name or f"ns-{uuid.uuid4().hex[:10]}"
    meta = {"name": name, "uid": name}
    if label:
        meta["labels"] = {OPT_IN: label}
    apiserver.put({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
    return name

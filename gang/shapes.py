"""Shapes of the Kubernetes objects gang decisions read, for msgspec's typed decode (``gang/slim.py``).

Only the fields a reader uses are declared; msgspec skips the rest while parsing. Leaves are ``Any`` so that an
unexpected value reaches the reader as it is. Each root kind's ``spec`` shape is its adapter's
(``WorkloadAdapter.spec_shape``, in ``workloads/<kind>/adapter.py``); the pieces they share are here.
"""

from __future__ import annotations

from typing import Any, TypedDict


class OwnerReference(TypedDict, total=False):
    apiVersion: Any
    kind: Any
    name: Any
    uid: Any
    controller: Any


class Meta(TypedDict, total=False):
    name: Any
    namespace: Any
    uid: Any
    labels: Any
    annotations: dict[str, Any]  # only kubenexus.io/* are kept (gang/slim.py decode)
    ownerReferences: list[OwnerReference]


class Container(TypedDict, total=False):
    resources: Any
    restartPolicy: Any


class PodSpec(TypedDict, total=False):
    """What ``gang/resources.py`` counts and expected members carry."""

    containers: list[Container]
    initContainers: list[Container]
    resources: Any
    overhead: Any
    nodeSelector: Any
    tolerations: Any
    affinity: Any


class PodTemplate(TypedDict, total=False):
    spec: PodSpec


class Object(TypedDict, total=False):
    """An object read only for its metadata."""

    apiVersion: Any
    kind: Any
    metadata: Meta


class JobSpec(TypedDict, total=False):
    parallelism: Any
    completions: Any
    template: PodTemplate


class JobTemplate(TypedDict, total=False):
    spec: JobSpec


class PodGroupSpec(TypedDict, total=False):
    """What admission reads of a user-created PodGroup (``gang/decide.py``, ``gang/validate.py``)."""

    minMember: Any

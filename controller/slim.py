"""Decode pods and nodes from the API's JSON keeping only the fields the controller reads.

A pod as the apiserver lists it is ~9 KiB of JSON, most of it managedFields, env, volume mounts
and status the controller never looks at; 100,000 of them are ~1 GiB. ``json.loads`` builds every
one of those dicts and strings (16 s and several GiB for such a list). msgspec decodes straight
into the shapes below and skips everything else while parsing, so a rebuild costs a fraction of
the time and the memory. The result is plain dicts and lists, the same shape as ``json.loads``
would give with the other keys left out: ``members.pod_view`` and ``members.node_view`` read
them unchanged (tests/test_controller_slim.py proves both give the same views).

Fields are declared loosely (``Any`` for nested API structures the predicates walk) so that a
value of an unexpected type is kept for the predicates to judge rather than failing the decode.
"""

from __future__ import annotations

from typing import Any, TypedDict

import msgspec

from kube.informer import Decoder

Obj = dict[str, Any]


class _OwnerReference(TypedDict, total=False):
    apiVersion: Any  # with kind, name, uid and controller: the owner walk of pods that may have escaped admission
    kind: Any  # DaemonSet and Node owners make a pod permanent
    name: Any
    uid: Any
    controller: Any


class _Meta(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    resourceVersion: str
    creationTimestamp: Any
    deletionTimestamp: Any
    labels: dict[str, Any]
    annotations: dict[str, Any]
    ownerReferences: list[_OwnerReference]


# "continue" is a Python keyword: the functional form declares it.
_ListMeta = TypedDict("_ListMeta", {"resourceVersion": str, "continue": str}, total=False)


class _Port(TypedDict, total=False):
    containerPort: Any
    hostPort: Any
    hostIP: Any
    protocol: Any


class _Container(TypedDict, total=False):
    resources: Any
    ports: list[_Port]
    restartPolicy: Any


class _Volume(TypedDict, total=False):
    persistentVolumeClaim: Any
    ephemeral: Any


class _PodSpec(TypedDict, total=False):
    nodeName: Any
    schedulerName: Any
    priority: Any
    preemptionPolicy: Any  # Never: a gang that never preempts (controller/preemption.py)
    priorityClassName: Any  # recorded in a gang's PodGroup
    schedulingGates: list[Any]
    containers: list[_Container]
    initContainers: list[_Container]
    overhead: Any
    resources: Any
    nodeSelector: Any
    affinity: Any
    tolerations: Any
    topologySpreadConstraints: Any
    resourceClaims: Any
    volumes: list[_Volume]
    hostNetwork: Any


class _PodCondition(TypedDict, total=False):
    type: Any
    status: Any
    reason: Any


class _PodStatus(TypedDict, total=False):
    phase: Any
    reason: Any  # with message: a kubelet's rejection (OutOfcpu, ...)
    message: Any
    nominatedNodeName: Any
    conditions: list[_PodCondition]  # PodScheduled=False: the scheduler tried and found no node


class Pod(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: _Meta
    spec: _PodSpec
    status: _PodStatus


class _Condition(TypedDict, total=False):
    type: Any
    status: Any


class _NodeSpec(TypedDict, total=False):
    unschedulable: Any
    taints: Any


class _NodeStatus(TypedDict, total=False):
    allocatable: Any
    conditions: list[_Condition]


class Node(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: _Meta
    spec: _NodeSpec
    status: _NodeStatus


class _PodList(TypedDict, total=False):
    metadata: _ListMeta
    items: list[Pod]


class _NodeList(TypedDict, total=False):
    metadata: _ListMeta
    items: list[Node]


class _PodEvent(TypedDict, total=False):
    type: str
    object: Pod


class _NodeEvent(TypedDict, total=False):
    type: str
    object: Node


class _RootMeta(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    resourceVersion: str
    annotations: dict[str, Any]  # controller/roots.py keeps those the contract reads


class Root(TypedDict, total=False):
    """A root object (a PyTorchJob, a JobSet, ...): its identity and annotations, nothing of its spec."""

    apiVersion: str
    kind: str
    metadata: _RootMeta


class _RootList(TypedDict, total=False):
    metadata: _ListMeta
    items: list[Root]


class _RootEvent(TypedDict, total=False):
    type: str
    object: Root


def _decoder(list_type: type, event_type: type) -> Decoder:
    return Decoder(msgspec.json.Decoder(list_type).decode, msgspec.json.Decoder(event_type).decode)


PODS = _decoder(_PodList, _PodEvent)
NODES = _decoder(_NodeList, _NodeEvent)
ROOTS = _decoder(_RootList, _RootEvent)

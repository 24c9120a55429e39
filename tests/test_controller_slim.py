"""The slim decoders keep every field the controller reads: views from slim and full decodes are the same.

The corpus is every Pod and Node of the planner scenarios (gated gang members with expected members,
sidecars, overhead, host ports, affinity, taints, terminating and terminal pods, ...), each also given
the bulk the apiserver adds (managedFields, env, volume mounts, images) that the slim decoders drop.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller import slim
from controller.members import node_view, pod_view

pytestmark = pytest.mark.unit

SCENARIOS = Path(__file__).parent / "scenarios"
Obj = dict[str, Any]


@functools.cache
def corpus(kind: str) -> list[Obj]:
    objects = []
    for path in sorted(SCENARIOS.glob("*.yaml")):
        if path.name == "malformed.yaml":  # simulate's bad-input test: not a snapshot
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == kind:  # timestamps as the API sends them
                objects.append(json.loads(json.dumps(doc, default=lambda t: t.isoformat().replace("+00:00", "Z"))))
    assert objects, f"no {kind} in the scenarios"
    return objects


def with_bulk(obj: Obj) -> Obj:
    """What a real LIST adds that the controller never reads."""
    obj = copy.deepcopy(obj)
    meta = obj.setdefault("metadata", {})
    meta["managedFields"] = [{"manager": "kube-controller-manager", "operation": "Update",
                              "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}}]
    meta.setdefault("finalizers", ["example.com/keep"])
    spec = obj.setdefault("spec", {})
    for container in spec.get("containers") or []:
        container.setdefault("image", "app:1")
        container["env"] = [{"name": "A", "value": "1"}]
        container["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    obj.setdefault("status", {})["images"] = [{"names": ["x"], "sizeBytes": 1}] if obj.get("kind") == "Node" else []
    return obj


def decoded(decoder: slim.Decoder, obj: Obj) -> Obj:
    page = decoder.page(json.dumps({"metadata": {"resourceVersion": "1"}, "items": [obj]}).encode())
    return page["items"][0]


@pytest.mark.parametrize("index", range(len(corpus("Pod"))))
def test_pod_views_from_slim_and_full_decodes_are_the_same(index: int) -> None:
    full = with_bulk(corpus("Pod")[index])
    thin = decoded(slim.PODS, full)
    assert len(json.dumps(thin)) < len(json.dumps(full))
    want, got = pod_view(full), pod_view(thin)
    # The kept placement spec is what the predicates read; everything else of the view must be identical.
    assert dataclasses.replace(got, spec=None) == dataclasses.replace(want, spec=None)
    for field in ("nodeSelector", "affinity", "tolerations", "topologySpreadConstraints", "resourceClaims"):
        assert (got.spec or {}).get(field) == (want.spec or {}).get(field)


@pytest.mark.parametrize("index", range(len(corpus("Node"))))
def test_node_views_from_slim_and_full_decodes_are_the_same(index: int) -> None:
    full = with_bulk(corpus("Node")[index])
    assert node_view(decoded(slim.NODES, full)) == node_view(full)


def test_watch_events_decode_slim_and_malformed_input_is_a_value_error() -> None:
    pod = with_bulk(corpus("Pod")[0])
    event = slim.PODS.event(json.dumps({"type": "MODIFIED", "object": pod}).encode())
    assert event["type"] == "MODIFIED" and "managedFields" not in event["object"]["metadata"]
    assert pod_view(event["object"]).uid == pod_view(pod).uid
    with pytest.raises(ValueError):
        slim.PODS.event(b'{"type": "ADDED", "object": ')
    with pytest.raises(ValueError):
        slim.NODES.page(b'{"items": "not a list"}')

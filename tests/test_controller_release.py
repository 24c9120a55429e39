"""The release patch: gate removed, node pinned the way the apiserver allows on a gated pod, guarded by tests.

Every patch is applied with ``jsonpatch`` and the result checked with the emulator's port of the apiserver's
pod update validation (``cluster.validation``), and the pin is checked with the same node-affinity predicate the
planner uses: the pinned pod matches the planned node and no other.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import pytest

from cluster.validation.pod_update import validate_pod_update
from controller.predicates import NodeAffinity, NodeInfo, PodInfo, Unfit
from controller.release import release_patch
from tests.support.contract import GATE

pytestmark = pytest.mark.unit

PLANNED = "scheduling.kubenexus.io/planned-node"
RESERVED = "scheduling.kubenexus.io/reserved-nodes"
UNRESOLVED = "scheduling.kubenexus.io/unresolved"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def matches_selector_and_affinity(spec: dict[str, Any], obj: dict[str, Any]) -> Unfit | None:
    return NodeAffinity().filter(PodInfo.of(spec), NodeInfo.of(obj))


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}}, "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def gated_pod(affinity: dict[str, Any] | None = None, gates: tuple[str, ...] = (GATE,)) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "registry.example.com/train:1", "imagePullPolicy": "IfNotPresent",
                        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                        "resources": {"requests": {"cpu": "1"}}}],
        "schedulingGates": [{"name": g} for g in gates],
        "restartPolicy": "Never", "dnsPolicy": "ClusterFirst", "schedulerName": "kubenexus-scheduler",
        "terminationGracePeriodSeconds": 30, "securityContext": {},
    }
    if affinity is not None:
        spec["affinity"] = affinity
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "worker-0", "namespace": "ml", "uid": "uid-1", "resourceVersion": "7",
                         "annotations": {"scheduling.kubenexus.io/owner-uid": "root-1"}},
            "spec": spec, "status": {"phase": "Pending"}}


def released(pod: dict[str, Any], node_name: str, reserved: tuple[str, ...] = ()) -> dict[str, Any]:
    patch = release_patch(pod, node_name, reserved)
    result = jsonpatch.apply_patch(pod, patch)
    errors = validate_pod_update(pod, result)
    assert not errors, errors
    return result


def test_gate_removed_pinned_and_recorded():
    pod = gated_pod()
    after = released(pod, "node-b")
    assert "schedulingGates" not in after["spec"]
    assert after["metadata"]["annotations"][PLANNED] == "node-b"
    assert after["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b"]}]}]
    assert matches_selector_and_affinity(after["spec"], node("node-b")) is None
    assert matches_selector_and_affinity(after["spec"], node("node-a")) is not None
    assert pod == gated_pod(), "the patch is computed without modifying its input"


def test_other_gates_stay():
    after = released(gated_pod(gates=("example.com/quota", GATE)), "n1")
    assert after["spec"]["schedulingGates"] == [{"name": "example.com/quota"}]


def test_pin_is_anded_into_every_existing_term():
    """Terms are ORed: a new term would widen the set (and the apiserver forbids it on gated pods)."""
    terms = [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]},
             {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}],
              "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node-x"]}]}]
    affinity = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": copy.deepcopy(terms)}},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    after = released(gated_pod(affinity), "node-g")
    new_terms = after["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    assert len(new_terms) == 2
    for old, new in zip(terms, new_terms, strict=True):
        assert new["matchExpressions"] == old["matchExpressions"]
        assert new["matchFields"][-1] == {"key": "metadata.name", "operator": "In", "values": ["node-g"]}
    assert "podAntiAffinity" in after["spec"]["affinity"]
    assert matches_selector_and_affinity(after["spec"], node("node-g", pool="gpu")) is None
    assert matches_selector_and_affinity(after["spec"], node("node-h", pool="gpu")) is not None


def test_adding_a_new_term_instead_would_be_rejected_by_the_apiserver():
    """Documents the rule the pin follows: on a gated pod, required terms may only be narrowed."""
    affinity = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}]}}}
    pod = gated_pod(affinity)
    widened = copy.deepcopy(pod)
    widened["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"].append(
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]})
    assert validate_pod_update(pod, widened)


def test_reserved_nodes_are_recorded_for_expected_members():
    after = released(gated_pod(), "n1", ("n1", "n2", "n2"))
    assert json.loads(after["metadata"]["annotations"][RESERVED]) == ["n1", "n2", "n2"]


def test_unpinned_release_only_removes_the_gate():
    pod = gated_pod()
    pod["metadata"]["annotations"][UNRESOLVED] = "owner lookup failed"
    after = released(pod, "")
    assert "schedulingGates" not in after["spec"] and "affinity" not in after["spec"]
    assert UNRESOLVED not in after["metadata"]["annotations"] and PLANNED not in after["metadata"]["annotations"]


def test_pod_without_annotations_gets_the_map_created():
    pod = gated_pod()
    del pod["metadata"]["annotations"]
    after = released(pod, "n1")
    assert after["metadata"]["annotations"] == {PLANNED: "n1"}


@pytest.mark.parametrize("change", ["recreated", "gate-removed-by-someone"])
def test_a_changed_pod_fails_the_patch_instead_of_being_undone(change):
    pod = gated_pod(gates=("example.com/quota", GATE))
    patch = release_patch(pod, "n1")
    current = copy.deepcopy(pod)
    if change == "recreated":
        current["metadata"]["uid"] = "uid-2"
    else:
        current["spec"]["schedulingGates"] = [{"name": GATE}]
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(current, patch)


def test_without_pinning_the_planned_node_is_still_recorded():
    after = jsonpatch.apply_patch(gated_pod(), release_patch(gated_pod(), "n1", pin=False))
    assert "affinity" not in after["spec"] and "schedulingGates" not in after["spec"]
    assert after["metadata"]["annotations"][PLANNED] == "n1"

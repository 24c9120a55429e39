"""cluster.validation (and cluster.quantity) against documented apiserver behaviour.

Expected strings come from kubernetes/kubernetes source (pkg/apis/core/validation, apimachinery validation,
the pod binding storage and its TestEtcdCreateWithSchedulingGates) and the "Pod Scheduling Readiness" docs —
never from what our product happens to send.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cluster.quantity import QuantityError, parse_quantity
from cluster.validation.binding import validate_binding
from cluster.validation.decode import decode_errors
from cluster.validation.errors import invalid_message
from cluster.validation.meta import MAX_ANNOTATIONS_BYTES, validate_object_meta
from cluster.validation.pod import validate_pod_create
from cluster.validation.pod_update import validate_pod_update

pytestmark = pytest.mark.unit

GATE = "kubenexus.io/gang"
QNAME_MSG = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
             "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
             "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
NOT_UPDATABLE = ("spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
                 "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions "
                 "to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it "
                 "was previously negative)")
ZONE_A = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
GPU_B = {"key": "gpu", "operator": "Exists"}


def pod(**spec: Any) -> dict[str, Any]:
    """A pod as the apiserver stores it (namespace set, resourceVersion present), with ``spec`` overrides."""
    base = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "worker-0", "namespace": "team-a", "uid": "u-1", "resourceVersion": "7",
                     "labels": {"app": "trainer", "example.com/role": "worker"},
                     "annotations": {"Example.COM/Note": "any value, even with spaces"}},
        "spec": {"containers": [{"name": "main", "image": "trainer:1",
                                 "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                                               "limits": {"cpu": "1", "memory": "1Gi"}}}],
                 "schedulingGates": [{"name": GATE}]},
    }
    base["spec"].update(spec)
    return base


def gated(**spec: Any) -> dict[str, Any]:
    return pod(schedulingGates=[{"name": GATE}, {"name": "example.com/quota"}], **spec)


def ungated(**spec: Any) -> dict[str, Any]:
    return pod(schedulingGates=[], **spec)


def changed(old: dict[str, Any], **spec: Any) -> dict[str, Any]:
    new = copy.deepcopy(old)
    new["spec"].update(spec)
    return new


def required_affinity(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}}}


# --- create ---------------------------------------------------------------------------------------------


def test_valid_gated_pod_passes() -> None:
    assert validate_pod_create(pod()) == []
    assert validate_pod_create(ungated(nodeName="node-1")) == []


def test_generate_name_stands_in_for_name_and_one_of_them_is_required() -> None:
    unnamed = pod()
    del unnamed["metadata"]["name"]
    assert validate_pod_create(unnamed) == ["metadata.name: Required value: name or generateName is required"]
    unnamed["metadata"]["generateName"] = "worker-"
    assert validate_pod_create(unnamed) == []
    unnamed["metadata"]["generateName"] = "Worker-"
    assert [e.split(":")[0] for e in validate_pod_create(unnamed)] == ["metadata.generateName", "metadata.name"]


def test_name_rules_subdomain_by_default_label_for_namespaces() -> None:
    dotted = {"metadata": {"name": "team.a"}}
    assert validate_object_meta(dotted, False) == []
    assert validate_object_meta(dotted, False, dns_label_name=True) == [
        'metadata.name: Invalid value: "team.a": must not contain dots']
    upper = validate_object_meta({"metadata": {"name": "Worker", "namespace": "ns"}}, True)
    assert len(upper) == 1 and upper[0].startswith('metadata.name: Invalid value: "Worker": a lowercase RFC 1123 '
                                                   "subdomain must consist of lower case alphanumeric characters")
    assert validate_object_meta({"metadata": {"name": "n", "namespace": "ns"}}, False) == [
        "metadata.namespace: Forbidden: not allowed on this type"]
    assert validate_object_meta({"metadata": {"name": "n"}}, True) == ["metadata.namespace: Required value"]


def test_label_keys_and_values() -> None:
    bad = pod()
    bad["metadata"]["labels"] = {"a b": "x"}
    assert validate_pod_create(bad) == [f'metadata.labels: Invalid value: "a b": name part {QNAME_MSG}']
    bad["metadata"]["labels"] = {"k": "v" * 63}
    assert validate_pod_create(bad) == []
    bad["metadata"]["labels"] = {"k": "v" * 64}
    assert validate_pod_create(bad) == [
        f'metadata.labels: Invalid value: "{"v" * 64}": must be no more than 63 characters']
    bad["metadata"]["labels"] = {"k": "-v"}
    assert validate_pod_create(bad)[0].startswith('metadata.labels: Invalid value: "-v": a valid label must be')
    bad["metadata"]["labels"] = {"x" * 64: "v", "a" * 254 + "/k": "v", "/k": "v", "a/b/c": "v"}
    errors = validate_pod_create(bad)
    assert f'metadata.labels: Invalid value: "{"x" * 64}": name part must be no more than 63 characters' in errors
    assert any(e.startswith(f'metadata.labels: Invalid value: "{"a" * 254}/k": prefix part must be no more than '
                            "253 characters") for e in errors)
    assert 'metadata.labels: Invalid value: "/k": prefix part must be non-empty' in errors
    assert any(e.startswith('metadata.labels: Invalid value: "a/b/c": a qualified name must consist') for e in errors)


def test_annotation_keys_case_insensitive_and_total_size_limit() -> None:
    meta = {"name": "n", "annotations": {"Example.com/UPPER": "ok", "bad key": "x"}}
    assert validate_object_meta({"metadata": meta}, False) == [
        f'metadata.annotations: Invalid value: "bad key": name part {QNAME_MSG}']
    key = "k"
    meta["annotations"] = {key: "v" * (MAX_ANNOTATIONS_BYTES - len(key))}
    assert validate_object_meta({"metadata": meta}, False) == []
    meta["annotations"][key] += "v"
    assert validate_object_meta({"metadata": meta}, False) == [
        "metadata.annotations: Too long: must have at most 262144 bytes"]
    meta["annotations"] = {key: "é" * (MAX_ANNOTATIONS_BYTES // 2)}  # two bytes each in UTF-8
    assert validate_object_meta({"metadata": meta}, False) == [
        "metadata.annotations: Too long: must have at most 262144 bytes"]


def test_owner_references() -> None:
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j-1", "controller": True}
    meta = {"name": "n", "ownerReferences": [owner]}
    assert validate_object_meta({"metadata": meta}, False) == []
    meta["ownerReferences"] = [{"apiVersion": "batch/", "kind": "Job", "name": "", "uid": ""}]
    assert validate_object_meta({"metadata": meta}, False) == [
        'metadata.ownerReferences.apiVersion: Invalid value: "batch/": version must not be empty',
        'metadata.ownerReferences.name: Invalid value: "": must not be empty',
        'metadata.ownerReferences.uid: Invalid value: "": must not be empty']
    meta["ownerReferences"] = [owner, {**owner, "kind": "JobSet", "name": "js"}]
    errors = validate_object_meta({"metadata": meta}, False)
    assert len(errors) == 1 and errors[0].endswith(
        'Only one reference can have Controller set to true. Found "true" in references for Job/train and JobSet/js')


def test_containers() -> None:
    assert validate_pod_create(pod(containers=[])) == ["spec.containers: Required value"]
    errors = validate_pod_create(pod(containers=[{"name": "Main", "image": "x"}, {"name": "Main"}],
                                     initContainers=[{"name": "Main", "image": " x"}]))
    assert errors[0].startswith('spec.containers[0].name: Invalid value: "Main": a lowercase RFC 1123 label')
    assert "spec.containers[1].image: Required value" in errors
    assert 'spec.containers[1].name: Duplicate value: "Main"' in errors
    assert 'spec.initContainers[0].name: Duplicate value: "Main"' in errors
    assert 'spec.initContainers[0].image: Invalid value: " x": must not have leading or trailing whitespace' in errors
    assert validate_pod_create(pod(containers=[{"image": "x"}])) == ["spec.containers[0].name: Required value"]


def test_scheduling_gates_are_unique_qualified_names() -> None:
    assert validate_pod_create(pod(schedulingGates=[{"name": GATE}, {"name": "bad gate"}, {"name": GATE}])) == [
        f'spec.schedulingGates[1]: Invalid value: "bad gate": name part {QNAME_MSG}',
        f'spec.schedulingGates[2]: Duplicate value: "{GATE}"']


def test_node_name_with_scheduling_gates_is_forbidden_at_create() -> None:
    assert validate_pod_create(pod(nodeName="node-1")) == [
        "spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared"]


def test_scheduler_name_is_not_validated_upstream() -> None:
    """ValidatePodSpec has no schedulerName rule: any string is accepted."""
    assert validate_pod_create(pod(schedulerName="Not_A_DNS_Name")) == []


def test_requests_must_not_exceed_limits() -> None:
    def resources(requests: dict[str, Any], limits: dict[str, Any]) -> dict[str, Any]:
        return pod(containers=[{"name": "m", "image": "i", "resources": {"requests": requests, "limits": limits}}])

    assert validate_pod_create(resources({"cpu": "1000m", "memory": "1Gi"}, {"cpu": 1, "memory": "1024Mi"})) == []
    assert validate_pod_create(resources({"cpu": "2"}, {"cpu": "1500m"})) == [
        'spec.containers[0].resources.requests: Invalid value: "2": must be less than or equal to cpu limit of 1500m']
    assert validate_pod_create(resources({"memory": "-1Gi"}, {})) == [
        'spec.containers[0].resources.requests[memory]: Invalid value: "-1Gi": must be greater than or equal to 0']
    # extended resources cannot overcommit and count whole devices
    assert validate_pod_create(resources({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "2"})) == [
        'spec.containers[0].resources.requests: Invalid value: "1": must be equal to nvidia.com/gpu limit of 2']
    assert validate_pod_create(resources({"nvidia.com/gpu": "1"}, {})) == [
        "spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources"]
    assert validate_pod_create(resources({}, {"nvidia.com/gpu": "0.5"})) == [
        "spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: 500m: must be an integer"]
    assert validate_pod_create(resources({}, {"gpu": "1"})) == [
        'spec.containers[0].resources.limits[gpu]: Invalid value: "gpu": must be a standard resource type or fully '
        "qualified",
        'spec.containers[0].resources.limits[gpu]: Invalid value: "gpu": must be a standard resource for containers']


def test_unparsable_quantities_are_decode_errors_not_validation_errors() -> None:
    """The apiserver cannot decode such a body: 400 BadRequest, never 422 Invalid."""
    bad = pod(containers=[{"name": "m", "image": "i", "resources": {"limits": {"cpu": "lots", "memory": "1kk"}}}])
    assert decode_errors(bad) == [
        "spec.containers[0].resources.limits[cpu]: quantities must match the regular expression "
        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        "spec.containers[0].resources.limits[memory]: unable to parse quantity's suffix"]
    assert validate_pod_create(bad) == []
    assert decode_errors(pod()) == []


@pytest.mark.parametrize(("text", "canonical"), [
    ("1.5Gi", "1536Mi"), ("0.5", "500m"), ("1000", "1k"), ("2048Ki", "2Mi"), ("1e3", "1e3"), ("0.1m", "100u"),
    (".5", "500m"), ("1.", "1"), (2, "2"), (0.25, "250m"), ("0.0000000001", "1n"), ("+0", "0"),
])
def test_quantity_canonical_form(text: Any, canonical: str) -> None:
    assert str(parse_quantity(text)) == canonical


@pytest.mark.parametrize("text", ["", "abc", "1 Gi", "1e", "1Gi2", "1.2.3", True, None])
def test_quantity_rejects(text: Any) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_invalid_message_is_the_422_status_message() -> None:
    assert invalid_message("Pod", "p", ["a"]) == 'Pod "p" is invalid: a'
    assert invalid_message("Pod", "p", ["a", "b"]) == 'Pod "p" is invalid: [a, b]'


# --- update: scheduling gates ------------------------------------------------------------------------------


def test_gates_may_be_removed_in_any_order() -> None:
    old = gated()
    assert validate_pod_update(old, changed(old, schedulingGates=[{"name": "example.com/quota"}])) == []
    assert validate_pod_update(old, changed(old, schedulingGates=[])) == []
    released = changed(old)
    del released["spec"]["schedulingGates"]
    assert validate_pod_update(old, released) == []


def test_adding_a_gate_is_forbidden() -> None:
    old = gated()
    new = changed(old, schedulingGates=[{"name": GATE}, {"name": "example.com/quota"}, {"name": "x"}])
    assert validate_pod_update(old, new) == [
        "spec.schedulingGates[2].name: Forbidden: only deletion is allowed, but found new scheduling gate 'x'"]
    assert validate_pod_update(ungated(), changed(ungated(), schedulingGates=[{"name": GATE}])) == [
        f"spec.schedulingGates[0].name: Forbidden: only deletion is allowed, but found new scheduling gate '{GATE}'"]


# --- update: nodeSelector and node affinity while gated (KEP-3838) -----------------------------------------


def test_gated_pod_node_selector_may_only_gain_keys() -> None:
    old = gated(nodeSelector={"pool": "a100"})
    assert validate_pod_update(old, changed(old, nodeSelector={"pool": "a100", "zone": "z1"})) == []
    assert validate_pod_update(old, changed(old, nodeSelector={"pool": "h100", "zone": "z1"})) == [
        'spec.nodeSelector: Invalid value: {"pool":"h100","zone":"z1"}: only additions to spec.nodeSelector are '
        "allowed (no mutations or deletions)"]
    assert validate_pod_update(old, changed(old, nodeSelector={"zone": "z1"}))[0].startswith("spec.nodeSelector:")
    assert validate_pod_update(gated(), changed(gated(), nodeSelector={"zone": "z1"})) == []


def test_gated_pod_required_node_affinity_may_only_narrow() -> None:
    old = gated(affinity=required_affinity([ZONE_A]))
    assert validate_pod_update(old, changed(old, affinity=required_affinity([ZONE_A, GPU_B]))) == []
    changed_term = validate_pod_update(old, changed(old, affinity=required_affinity([GPU_B])))
    assert len(changed_term) == 1 and changed_term[0].startswith(
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]: "
        "Invalid value:") and changed_term[0].endswith("only additions are allowed (no mutations or deletions)")
    widened = validate_pod_update(old, changed(old, affinity=required_affinity([ZONE_A], [GPU_B])))
    assert len(widened) == 1 and widened[0].endswith(
        "no additions/deletions to non-empty NodeSelectorTerms list are allowed")
    dropped = validate_pod_update(old, changed(old, affinity=None))
    assert len(dropped) == 1 and "no additions/deletions" in dropped[0]


def test_gated_pod_without_required_affinity_may_set_any() -> None:
    old = gated()
    assert validate_pod_update(old, changed(old, affinity=required_affinity([ZONE_A], [GPU_B]))) == []
    with_preferred = required_affinity([ZONE_A])
    with_preferred["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = [
        {"weight": 10, "preference": {"matchExpressions": [ZONE_A]}}]
    assert validate_pod_update(changed(old, affinity=required_affinity([ZONE_A])),
                               changed(old, affinity=with_preferred)) == []


def test_an_empty_required_term_must_stay_empty() -> None:
    """validateNodeSelectorTermHasOnlyAdditions: an empty old term admits no additions."""
    old = gated(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{}]}}})
    errors = validate_pod_update(old, changed(old, affinity=required_affinity([ZONE_A])))
    assert len(errors) == 1 and errors[0].endswith("only additions are allowed (no mutations or deletions)")


def test_gated_pod_affinity_other_than_node_affinity_is_immutable() -> None:
    pod_affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "trainer"}}}]}}
    errors = validate_pod_update(gated(), changed(gated(), affinity=pod_affinity))
    assert len(errors) == 1 and errors[0].startswith(NOT_UPDATABLE)


def test_once_ungated_scheduling_directives_are_immutable() -> None:
    old = ungated(nodeSelector={"pool": "a100"}, affinity=required_affinity([ZONE_A]))
    for new in (changed(old, nodeSelector={"pool": "a100", "zone": "z1"}),
                changed(old, affinity=required_affinity([ZONE_A, GPU_B]))):
        errors = validate_pod_update(old, new)
        assert len(errors) == 1 and errors[0].startswith(NOT_UPDATABLE + "\n  spec.")


def test_last_gate_removed_with_narrowing_in_the_same_update() -> None:
    """Gatedness is judged on the stored pod, so a queue may narrow placement and release in one write."""
    old = gated()
    assert validate_pod_update(old, changed(old, schedulingGates=[], nodeSelector={"zone": "z1"})) == []


# --- update: everything else ---------------------------------------------------------------------------------


def test_node_name_cannot_change_by_update() -> None:
    errors = validate_pod_update(ungated(), changed(ungated(), nodeName="node-1"))
    assert errors == [NOT_UPDATABLE + '\n  spec.nodeName: null -> "node-1"']


def test_images_may_change_but_not_to_empty() -> None:
    old = ungated()
    new = changed(old)
    new["spec"]["containers"][0]["image"] = "trainer:2"
    assert validate_pod_update(old, new) == []
    new["spec"]["containers"][0]["image"] = ""
    assert validate_pod_update(old, new) == ["spec.containers[0].image: Required value"]
    more = changed(old, containers=[*old["spec"]["containers"], {"name": "side", "image": "s"}])
    assert validate_pod_update(old, more) == [
        "spec.containers: Forbidden: pod updates may not add or remove containers"]


def test_active_deadline_may_be_set_or_lowered_only() -> None:
    old = ungated(activeDeadlineSeconds=100)
    assert validate_pod_update(ungated(), old) == []
    assert validate_pod_update(old, changed(old, activeDeadlineSeconds=50)) == []
    assert validate_pod_update(old, changed(old, activeDeadlineSeconds=200)) == [
        "spec.activeDeadlineSeconds: Invalid value: 200: must be less than or equal to previous value"]
    assert validate_pod_update(old, changed(old, activeDeadlineSeconds=None)) == [
        "spec.activeDeadlineSeconds: Invalid value: null: must not update from a positive integer to nil value"]


def test_tolerations_may_only_be_added() -> None:
    toleration = {"key": "gpu", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}
    old = ungated(tolerations=[toleration])
    added = {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    assert validate_pod_update(old, changed(old, tolerations=[toleration, added])) == []
    assert validate_pod_update(old, changed(old, tolerations=[{**toleration, "tolerationSeconds": 5}])) == []
    assert validate_pod_update(old, changed(old, tolerations=[added])) == [
        "spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds"]


def test_termination_grace_period_only_from_negative_to_one() -> None:
    old = ungated(terminationGracePeriodSeconds=-1)
    assert validate_pod_update(old, changed(old, terminationGracePeriodSeconds=1)) == []
    old = ungated(terminationGracePeriodSeconds=30)
    assert validate_pod_update(old, changed(old, terminationGracePeriodSeconds=10))[0].startswith(NOT_UPDATABLE)


def test_semantically_equal_quantities_are_no_change() -> None:
    old = ungated()
    new = changed(old)
    new["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "1000m"
    assert validate_pod_update(old, new) == []


def test_metadata_on_update() -> None:
    old = ungated()
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["app"] = "other"
    del new["metadata"]["uid"]  # the store fills the stored uid in
    assert validate_pod_update(old, new) == []
    new["metadata"]["uid"] = "u-2"
    new["metadata"]["labels"]["bad key"] = "x"
    assert validate_pod_update(old, new) == [
        'metadata.uid: Invalid value: "u-2": field is immutable',
        f'metadata.labels: Invalid value: "bad key": name part {QNAME_MSG}']
    deleting = copy.deepcopy(old)
    deleting["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    more = copy.deepcopy(deleting)
    more["metadata"]["finalizers"] = ["example.com/keep"]
    assert validate_pod_update(deleting, more) == [
        "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new "
        'finalizers []string{"example.com/keep"}']


# --- binding ---------------------------------------------------------------------------------------------------


def test_binding_a_gated_pod_conflicts() -> None:
    assert validate_binding(pod()) == (
        409, 'Operation cannot be fulfilled on pods/binding "worker-0": pod worker-0 has non-empty '
             ".spec.schedulingGates")


def test_binding_a_bound_or_deleting_pod_conflicts() -> None:
    assert validate_binding(ungated(nodeName="node-1")) == (
        409, 'Operation cannot be fulfilled on pods/binding "worker-0": pod worker-0 is already assigned to node '
             '"node-1"')
    deleting = ungated()
    deleting["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    assert validate_binding(deleting) == (
        409, 'Operation cannot be fulfilled on pods/binding "worker-0": pod worker-0 is being deleted, cannot be '
             "assigned to a host")


def test_binding_an_ungated_unbound_pod_is_allowed() -> None:
    assert validate_binding(ungated()) is None

"""A user-created PodGroup is an explicit gang (issue 12): pods without a supported root that name it are its members,
sized by its ``spec.minMember``, with its owner keys; the pre-labelled path where no PodGroup exists; a failed
PodGroup read is left unresolved for the controller; the member pod and the PodGroup validated. In process, on the
pure core and the controller's resolver (the webhook over HTTPS and the local cluster: test_explicit_podgroup_e2e)."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import pytest

from controller.members import pod_view
from controller.owners import Step, resolve
from controller.state import ClusterState
from gang import slim
from gang.config import Config
from gang.decide import Action, decide
from gang.kinds import POD_GROUP, Kind
from gang.mutate import desired_pod, forged_state, json_patch
from gang.objects import Deadline, LookupFailed, MemorySource, Obj
from gang.validate import Refusal, validate
from kubenexus.explain import explain
from tests.support.contract import (
    CONTROLLER,
    GATE,
    GROUP,
    MIN,
    OPT_IN,
    OWNER,
    OWNER_UID,
    SCHEDULER,
    SIGS_GROUP,
    SIGS_MIN,
    UNRESOLVED,
)
from tests.support.operator_fixtures import as_returned
from tests.support.opt_in import make_pod, pytorchjob, ref, worker_pod

pytestmark = pytest.mark.unit

NS = "team-a"
API_VERSION = "scheduling.kubenexus.io/v1alpha1"  # the contract: deploy/base/podgroup-crd.yaml
MANAGED_BY = "app.kubernetes.io/managed-by"


def pod_group(name: str = "trainers", min_member: Any = 3, labels: dict[str, str] | None = None) -> Obj:
    meta: Obj = {"name": name, "namespace": NS, "uid": f"uid-pg-{name}"}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": API_VERSION, "kind": "PodGroup", "metadata": meta, "spec": {"minMember": min_member}}


def namespace(label: str | None = None) -> Obj:
    meta: Obj = {"name": NS}
    if label:
        meta["labels"] = {OPT_IN: label}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def owner_of(group: Obj) -> str:
    return f"{API_VERSION}/PodGroup/{group['metadata']['name']}"


class Failing:
    """A source whose PodGroup reads fail (timeout, 5xx); everything else from ``objects``. Records the deadlines."""

    def __init__(self, *objects: Obj) -> None:
        self.inner = MemorySource(objects)
        self.deadlines: list[Deadline | None] = []

    def get(self, kind: Kind, api_version: str, namespace: str | None, name: str, uid: str | None = None,
            deadline: Deadline | None = None) -> Obj | None:
        self.deadlines.append(deadline)
        if kind == POD_GROUP:
            raise LookupFailed(f"GET podgroups/{name}: HTTP 503")
        return self.inner.get(kind, api_version, namespace, name, uid, deadline)


def admitted(pod: Obj, source: Any, config: Config | None = None) -> tuple[Any, Obj]:
    config = config or Config()
    decision = decide(pod, NS, source, config)
    return decision, desired_pod(pod, decision, config)


def meta(pod: Obj, field: str) -> dict[str, Any]:
    return pod["metadata"].get(field) or {}


# --- membership ---------------------------------------------------------------------------------------------------

UNKNOWN_OWNER = {"apiVersion": "example.com/v1", "kind": "Trainer", "name": "t", "uid": "uid-t", "controller": True}
REPLICA_SET = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "uid-rs", "controller": True}


@pytest.mark.parametrize("owners", [(), (UNKNOWN_OWNER,), (REPLICA_SET,)], ids=["bare", "unknown-kind", "replicaset"])
def test_a_pod_without_a_supported_root_naming_a_podgroup_is_its_member(owners: tuple[Obj, ...]) -> None:
    group = pod_group()
    pod = make_pod({GROUP: "trainers", "app": "x"}, owners=owners)
    decision, after = admitted(pod, MemorySource([group, namespace()]))
    assert decision.action is Action.GANG and decision.denial is None
    assert (decision.group, decision.size, decision.pod_group) == ("trainers", 3, "trainers")
    assert decision.expected == ()
    assert meta(after, "labels") == {GROUP: "trainers", MIN: "3", "app": "x"}
    assert meta(after, "annotations") == {SIGS_GROUP: "trainers", SIGS_MIN: "3", OWNER: owner_of(group),
                                          OWNER_UID: "uid-pg-trainers"}
    assert after["spec"]["schedulingGates"] == [{"name": GATE}] and after["spec"]["schedulerName"] == SCHEDULER
    assert "member of PodGroup team-a/trainers (spec.minMember 3)" in decision.reasons
    # the gate controller's gang key: namespace, name, the PodGroup's uid
    assert pod_view({**after, "metadata": {**after["metadata"], "namespace": NS}}).gang == (
        NS, "trainers", "uid-pg-trainers")


def test_the_seed_era_name_annotation_names_the_podgroup_too() -> None:
    decision, after = admitted(make_pod(annotations={SIGS_GROUP: "trainers"}), MemorySource([pod_group()]))
    assert (decision.size, decision.pod_group) == (3, "trainers")
    assert meta(after, "labels") == {GROUP: "trainers", MIN: "3"}


def test_a_supported_root_wins_over_a_podgroup_of_the_same_name() -> None:
    job = pytorchjob(NS, {OPT_IN: "true"}, workers=3, name="trainers")
    pod = worker_pod(job)
    pod["metadata"]["labels"][GROUP] = "trainers"
    decision = decide(pod, NS, MemorySource([job, pod_group(min_member=7)]), Config())
    assert decision.action is Action.GANG and decision.pod_group == ""
    assert (decision.size, decision.owner) == (4, "kubeflow.org/v1/PyTorchJob/trainers")


def test_matching_min_available_on_the_pod_is_accepted() -> None:
    pod = make_pod({GROUP: "trainers", MIN: "3"}, annotations={SIGS_MIN: "03"})
    decision, after = admitted(pod, MemorySource([pod_group()]))
    assert decision.denial is None and meta(after, "labels")[MIN] == "3"


@pytest.mark.parametrize("labels, annotations, where, value", [
    ({MIN: "5"}, {}, f"metadata.labels[{MIN}]", "'5'"),
    ({}, {SIGS_MIN: "2"}, f"metadata.annotations[{SIGS_MIN}]", "'2'"),
    ({MIN: "three"}, {}, f"metadata.labels[{MIN}]", "'three'"),
])
def test_a_min_available_that_contradicts_the_podgroup_is_refused(labels: Obj, annotations: Obj, where: str,
                                                                 value: str) -> None:
    pod = make_pod({GROUP: "trainers", **labels}, annotations=annotations)
    decision = decide(pod, NS, MemorySource([pod_group()]), Config())
    assert decision.denial is not None and decision.denial.code is Refusal.INVALID
    assert decision.denial.message.startswith(f"{where}: {value} disagrees with spec.minMember 3 of PodGroup "
                                              "team-a/trainers"), decision.denial.message


# --- no PodGroup: the pre-labelled path, as before ----------------------------------------------------------------


def test_without_a_podgroup_a_labelled_pod_is_a_gang_of_one_with_a_warning_naming_it() -> None:
    decision, after = admitted(make_pod({GROUP: "trainers"}), MemorySource([namespace()]))
    assert (decision.action, decision.size, decision.owner, decision.pod_group) == (Action.GANG, 1, "", "")
    assert meta(after, "labels") == {GROUP: "trainers", MIN: "1"} and OWNER not in meta(after, "annotations")
    [warning] = decision.warnings
    assert "PodGroup team-a/trainers does not exist" in warning and "gang of 1" in warning


def test_a_bound_pod_naming_a_missing_podgroup_is_warned_about_once() -> None:
    decision = decide(make_pod({GROUP: "trainers"}, nodeName="n-1"), NS, MemorySource([]), Config())
    assert decision.action is Action.SKIP
    [warning] = decision.warnings
    assert "already bound to node n-1" in warning


def test_without_a_podgroup_the_pods_own_min_available_sizes_it_quietly() -> None:
    decision = decide(make_pod({GROUP: "trainers", MIN: "4"}), NS, MemorySource([]), Config())
    assert (decision.action, decision.size, decision.warnings) == (Action.GANG, 4, ())
    assert "no PodGroup team-a/trainers: sized by the pod's own labels" in decision.reasons


@pytest.mark.parametrize("min_member", [0, "3", True, None])
def test_a_podgroup_with_an_invalid_min_member_is_ignored_with_a_warning(min_member: Any) -> None:
    decision = decide(make_pod({GROUP: "trainers", MIN: "2"}), NS, MemorySource([pod_group(min_member=min_member)]),
                      Config())
    assert (decision.size, decision.owner, decision.denial) == (2, "", None)
    assert any("ignoring PodGroup team-a/trainers: spec.minMember" in w for w in decision.warnings)


def test_a_podgroup_of_the_gate_controller_does_not_take_pods_without_its_root() -> None:
    root = {"scheduling.kubenexus.io/root-kind": "pytorchjob", "scheduling.kubenexus.io/root-name": "trainers"}
    group = pod_group(min_member=5, labels={MANAGED_BY: "kubenexus-gate-controller", **root})
    decision = decide(make_pod({GROUP: "trainers"}), NS, MemorySource([group]), Config())
    assert (decision.size, decision.owner, decision.pod_group) == (1, "", "")
    [warning] = decision.warnings
    assert "PodGroup team-a/trainers is the gate controller's, for the gang of pytorchjob trainers" in warning
    # the controller's PodGroup of a gang of labelled pods: the pod joins that gang (its labels), quietly
    group = pod_group(min_member=5, labels={MANAGED_BY: "kubenexus-gate-controller"})
    decision = decide(make_pod({GROUP: "trainers", MIN: "2"}), NS, MemorySource([group]), Config())
    assert (decision.size, decision.owner, decision.warnings) == (2, "", ())


def test_a_disabled_namespace_wins_without_reading_the_podgroup() -> None:
    source = Failing(namespace("disabled"))
    decision = decide(make_pod({GROUP: "trainers"}), NS, source, Config())
    assert decision.action is Action.SKIP


# --- a failed read: unresolved, like a failed owner read -----------------------------------------------------------


def test_a_failed_podgroup_read_leaves_the_pod_unresolved_within_the_decisions_deadline() -> None:
    source = Failing(namespace())
    deadline = Deadline(2.0)
    decision = decide(make_pod({GROUP: "trainers"}), NS, source, Config(), deadline)
    assert decision.action is Action.UNRESOLVED
    assert decision.unresolved.startswith("reading PodGroup team-a/trainers: GET podgroups/trainers: HTTP 503")
    assert source.deadlines and all(d is deadline for d in source.deadlines)
    after = desired_pod(make_pod({GROUP: "trainers"}), decision, Config())
    assert meta(after, "annotations")[UNRESOLVED] == decision.unresolved
    assert after["spec"]["schedulingGates"] == [{"name": GATE}]


def test_reinvocation_keeps_the_gang_when_the_podgroup_read_fails_then() -> None:
    first, after = admitted(make_pod({GROUP: "trainers"}), MemorySource([pod_group()]))
    again = decide(after, NS, Failing(), Config())
    assert again.action is Action.GANG and again.kept and again.size == 3
    assert forged_state(after, again) is None
    assert json_patch(after, desired_pod(after, again, Config())) == []


def test_reinvocation_with_the_podgroup_read_is_a_no_op() -> None:
    _, after = admitted(make_pod({GROUP: "trainers"}), MemorySource([pod_group()]))
    again, desired = admitted(after, MemorySource([pod_group()]))
    assert forged_state(after, again) is None and again.denial is None
    assert json_patch(after, desired) == []


def test_forged_owner_keys_naming_a_podgroup_are_refused() -> None:
    pod = make_pod({GROUP: "trainers"}, annotations={OWNER: owner_of(pod_group()), OWNER_UID: "not-its-uid"})
    decision = decide(pod, NS, MemorySource([pod_group()]), Config())
    denial = forged_state(pod, decision)
    assert denial and denial.startswith(f"metadata.annotations[{OWNER_UID}]: 'not-its-uid' is not what")


# --- the controller: deciding an unresolved pod again --------------------------------------------------------------


def unresolved_pod(labels: dict[str, str]) -> Obj:
    pod = make_pod(labels, annotations={UNRESOLVED: "reading PodGroup team-a/trainers: HTTP 503"})
    pod["metadata"].update(name="p-0", namespace=NS, uid="uid-p-0")
    pod["spec"]["schedulingGates"] = [{"name": GATE}]
    return pod


def test_an_unresolved_labelled_pod_is_in_no_gang_until_the_controller_resolves_it() -> None:
    pod = unresolved_pod({GROUP: "trainers"})
    view = pod_view(pod)
    assert view.gang is None and view.unresolved
    state = ClusterState()
    state.upsert_pod(pod)
    assert view.uid in state.unresolved and not state.gangs


def test_the_controller_joins_an_unresolved_pod_to_its_podgroup() -> None:
    pod = unresolved_pod({GROUP: "trainers"})
    assert resolve(pod, Failing(), Config()).action is Step.RETRY
    resolution = resolve(pod, MemorySource([pod_group()]), Config())
    assert resolution.action is Step.JOIN and resolution.group == "trainers"
    joined = jsonpatch.apply_patch(pod, resolution.patch)
    assert meta(joined, "labels") == {GROUP: "trainers", MIN: "3"}
    annotations = meta(joined, "annotations")
    assert (annotations[OWNER], annotations[OWNER_UID]) == (owner_of(pod_group()), "uid-pg-trainers")
    assert UNRESOLVED not in annotations
    assert pod_view(joined).gang == (NS, "trainers", "uid-pg-trainers")


def test_the_controller_does_not_join_a_pod_that_contradicts_its_podgroup() -> None:
    resolution = resolve(unresolved_pod({GROUP: "trainers", MIN: "5"}), MemorySource([pod_group()]), Config())
    assert resolution.action is Step.RETRY and "disagrees with spec.minMember 3" in resolution.reason


# --- validation ---------------------------------------------------------------------------------------------------


def request(kind: Obj, operation: str, obj: Obj, old: Obj | None = None, user: str = "alice") -> Obj:
    return {"uid": "u", "kind": kind, "operation": operation, "namespace": NS, "object": obj, "oldObject": old,
            "userInfo": {"username": user}}


POD_KIND = {"group": "", "version": "v1", "kind": "Pod"}
POD_GROUP_KIND = {"group": "scheduling.kubenexus.io", "version": "v1alpha1", "kind": "PodGroup"}


def test_the_validating_webhook_checks_a_member_against_its_podgroup() -> None:
    group = pod_group()
    _, member = admitted(make_pod({GROUP: "trainers"}), MemorySource([group]))
    assert validate(request(POD_KIND, "CREATE", member), Config(), MemorySource([group])) is None
    contradicting = copy.deepcopy(member)
    contradicting["metadata"]["labels"][MIN] = contradicting["metadata"]["annotations"][SIGS_MIN] = "5"
    denial = validate(request(POD_KIND, "CREATE", contradicting), Config(), MemorySource([group]))
    assert denial is not None and denial.code is Refusal.INVALID
    assert denial.message.startswith(f"metadata.labels[{MIN}]: '5' disagrees with spec.minMember 3 of PodGroup "
                                     "team-a/trainers")
    # not judged without the PodGroup: no source, a failed read, or a PodGroup recreated since mutation
    assert validate(request(POD_KIND, "CREATE", contradicting), Config()) is None
    assert validate(request(POD_KIND, "CREATE", contradicting), Config(), Failing()) is None
    recreated = {**group, "metadata": {**group["metadata"], "uid": "uid-new"}}
    assert validate(request(POD_KIND, "CREATE", contradicting), Config(), MemorySource([recreated])) is None


def test_min_member_of_a_podgroup_is_immutable_except_to_the_gate_controller() -> None:
    old, resized = pod_group(), pod_group(min_member=4)
    denial = validate(request(POD_GROUP_KIND, "UPDATE", resized, old), Config())
    assert denial is not None and denial.code is Refusal.INVALID
    assert denial.message.startswith("spec.minMember: is immutable (was 3)")
    assert "delete the PodGroup and its pods" in denial.message
    assert validate(request(POD_GROUP_KIND, "UPDATE", resized, old, CONTROLLER), Config()) is None
    relabelled = {**old, "spec": {**old["spec"], "queue": "research"}}
    assert validate(request(POD_GROUP_KIND, "UPDATE", relabelled, old), Config()) is None
    assert validate(request(POD_GROUP_KIND, "CREATE", resized), Config()) is None
    assert validate(request(POD_GROUP_KIND, "DELETE", resized, old), Config()) is None


# --- slim decoding and explain -------------------------------------------------------------------------------------


def test_a_podgroup_decoded_slim_decides_the_same() -> None:
    full = as_returned(pod_group())
    full["status"] = {"phase": "Pending", "present": 2, "conditions": [{"type": "Schedulable", "status": "False"}]}
    full["spec"].update(scheduleTimeoutSeconds=600, queue="research", priorityClassName="high")
    thin = slim.decode(POD_GROUP, json.dumps(full).encode())
    assert thin["spec"] == {"minMember": 3} and "status" not in thin
    assert len(json.dumps(thin)) * 5 < len(json.dumps(full))
    assert (POD_GROUP.group, POD_GROUP.kind) in slim.shaped_kinds()
    for pod in (make_pod({GROUP: "trainers"}), make_pod({GROUP: "trainers", MIN: "5"})):
        assert decide(pod, NS, MemorySource([thin]), Config()) == decide(pod, NS, MemorySource([full]), Config())
    managed = as_returned(pod_group(labels={MANAGED_BY: "kubenexus-gate-controller"}))
    assert slim.decode(POD_GROUP, json.dumps(managed).encode())["metadata"]["labels"][MANAGED_BY] == (
        "kubenexus-gate-controller")


def test_explain_shows_the_podgroup_decision() -> None:
    result = explain(make_pod({GROUP: "trainers"}), [pod_group(), namespace()], NS)
    assert result["allowed"] and result["action"] == "gang"
    assert "member of PodGroup team-a/trainers (spec.minMember 3)" in result["reasons"]
    assert meta(result["pod"], "annotations")[OWNER] == owner_of(pod_group())
    refused = explain(make_pod({GROUP: "trainers", MIN: "5"}), [pod_group()], NS)
    assert not refused["allowed"] and "disagrees with spec.minMember 3" in refused["denial"]
    missing = explain(make_pod({GROUP: "trainers"}), [], NS)
    assert missing["allowed"] and any("does not exist" in w for w in missing["warnings"])


def test_a_pod_of_a_supported_root_never_reads_podgroups() -> None:
    job = pytorchjob(NS, {OPT_IN: "true"})
    pod = make_pod({GROUP: "custom"}, owners=[ref(job)])
    source = Failing(job, namespace())
    assert decide(pod, NS, source, Config()).action is Action.GANG

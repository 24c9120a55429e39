"""Only the product writes the product's state (issue 10), through a running webhook over HTTPS.

The state: ``owner``, ``owner-uid``, ``expected-members``, ``unresolved`` (written by admission at CREATE) and
``planned-node``, ``reserved-nodes`` (written by the gate controller when it releases a member). /validate refuses
the release state on a new pod and any change of the state after creation by anyone but the gate controller's own
identity (not every ``gateRemovers`` identity). /mutate sees the pod as its creator sent it and refuses values it
would not write itself; its own output, sent back by a reinvocation, passes. ``kubenexus explain`` shows the
refusal. The patches the controller sends are built by the controller's own code (controller/release.py,
controller/owners.py), not copied here.
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess

import jsonpatch
import pytest
import yaml

import tests.support.operator_fixtures as f
from cluster.stub import path_of
from controller.owners import resolve
from controller.release import release_patch
from gang.config import Config
from gang.objects import MemorySource
from kubenexus.local_webhook import KUBENEXUS
from tests.support.apiserver_rules import create_errors
from tests.support.contract import (
    CONTROLLER,
    EXPECTED,
    GATE,
    GROUP,
    MIN,
    OPT_IN,
    OWNER,
    OWNER_UID,
    PLANNED_NODE,
    RESERVED_NODES,
    SIGS_GROUP,
    SIGS_MIN,
    UNRESOLVED,
)
from tests.support.opt_in import fresh_namespace, make_pod, pytorchjob, worker_pod
from tests.support.webhook import pod_request

pytestmark = pytest.mark.e2e

USER = "alice@example.com"
ADMIN = "ops-admin@example.com"  # in gateRemovers below: may release a pod by hand, is not the controller
STAFF = [CONTROLLER, ADMIN]
OPTED_IN = {OPT_IN: "true"}


def admission(hook, pod, namespace):
    """/mutate for a pod CREATE: the response and the pod as the apiserver would store it (None when refused)."""
    response = hook.review("/mutate", pod_request(pod, namespace))
    if not response["allowed"]:
        return response, None
    after = pod
    if "patch" in response:
        after = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    assert create_errors(after, namespace) == []
    return response, after


def assert_refused(response, key, *words):
    assert response["allowed"] is False
    status = response["status"]
    assert status["code"] == 403 and status["reason"] == "Forbidden"
    assert status["message"].startswith(f"metadata.annotations[{key}]: "), status["message"]
    for word in words:
        assert word in status["message"], status["message"]


def validate(hook, pod, operation="CREATE", old=None, username=USER):
    return hook.review("/validate", pod_request(pod, "ns", operation=operation, old=old, username=username))


def gated_member(**annotations):
    """A PyTorchJob worker as admission leaves it: labelled, owned, gated."""
    notes = {SIGS_GROUP: "train", SIGS_MIN: "4", OWNER: "kubeflow.org/v1/PyTorchJob/train", OWNER_UID: "uid-train"}
    pod = make_pod({GROUP: "train", MIN: "4"}, {**notes, **annotations}, schedulingGates=[{"name": GATE}])
    pod["metadata"].update(name="train-worker-0", namespace="ns", uid="uid-pod-0")
    return pod


def patched(pod, ops):
    return jsonpatch.apply_patch(pod, ops)


@pytest.fixture(scope="module")
def staffed(start_webhook):
    """A webhook whose gateRemovers are the controller and an admin."""
    return start_webhook(gateRemovers=STAFF)


# --- /validate, CREATE: what only a release writes is never on a new pod ---------------------------------------


@pytest.mark.parametrize("key, value", [(PLANNED_NODE, "node-1"), (RESERVED_NODES, '["node-1","node-2"]')])
@pytest.mark.parametrize("shape", ["bare", "member"])
def test_a_new_pod_carrying_release_state_is_refused(webhook, key, value, shape):
    """The controller would hold the planned node's room for it (two such pods kept a gang gated for good)."""
    pod = make_pod(annotations={key: value}) if shape == "bare" else gated_member(**{key: value})
    for username in (USER, CONTROLLER):  # the controller never creates pods: nobody may
        assert_refused(validate(webhook, pod, username=username), key, "must not be set on a new pod",
                       "gate controller")


def test_a_new_pod_with_other_annotations_of_ours_is_left_to_mutation(webhook):
    """owner & co. are written by the mutating webhook, which runs first: validation cannot tell who wrote them."""
    assert validate(webhook, gated_member(**{EXPECTED: "[]", UNRESOLVED: "x"}))["allowed"] is True


# --- /validate, UPDATE: only the gate controller writes the state after creation -------------------------------


CHANGES = [
    (EXPECTED, '[{"role":"worker","count":8,"requests":{"cpu":"64"}}]'),
    (RESERVED_NODES, '["node-9"]'),
    (UNRESOLVED, "please decide again"),
    (PLANNED_NODE, "node-9"),
]


@pytest.mark.parametrize("key, value", CHANGES)
@pytest.mark.parametrize("edit", ["added", "changed", "removed"])
@pytest.mark.parametrize("username", [USER, ADMIN])
def test_editing_product_state_on_a_gated_member_is_refused(staffed, key, value, edit, username):
    old = gated_member() if edit == "added" else gated_member(**{key: "before"})
    new = copy.deepcopy(old)
    if edit == "removed":
        del new["metadata"]["annotations"][key]
    else:
        new["metadata"]["annotations"][key] = value
    response = validate(staffed, new, "UPDATE", old, username)
    assert_refused(response, key, f"cannot be {edit} by {username}", CONTROLLER)
    assert validate(staffed, new, "UPDATE", old, CONTROLLER)["allowed"] is True


def test_owner_keys_stay_immutable_for_the_controller_too(staffed):
    old = gated_member()
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][OWNER_UID] = "uid-other"
    response = validate(staffed, new, "UPDATE", old, CONTROLLER)
    assert response["allowed"] is False and response["status"]["code"] == 422
    assert "is immutable once set" in response["status"]["message"]


def test_the_controllers_release_patch_passes(staffed):
    """controller/release.py's PATCH: gate and ``unresolved`` removed, planned-node and reserved-nodes added,
    node affinity narrowed. Allowed to the controller only; an admin allowed to remove the gate may not write it."""
    plain = gated_member()
    staged = gated_member(**{EXPECTED: '[{"role":"executor","count":2}]'})
    for pod, reserved in ((plain, ()), (staged, ("node-2", "node-3"))):
        released = patched(pod, release_patch(pod, "node-1", reserved))
        assert released["metadata"]["annotations"][PLANNED_NODE] == "node-1"
        assert not released["spec"].get("schedulingGates")
        assert validate(staffed, released, "UPDATE", pod, CONTROLLER)["allowed"] is True
        refused = validate(staffed, released, "UPDATE", pod, ADMIN)
        assert_refused(refused, PLANNED_NODE, f"cannot be added by {ADMIN}")


def test_an_admin_in_gate_removers_may_remove_the_gate(staffed, webhook):
    old = gated_member()
    new = copy.deepcopy(old)
    new["spec"]["schedulingGates"] = []
    assert validate(staffed, new, "UPDATE", old, ADMIN)["allowed"] is True
    assert validate(webhook, new, "UPDATE", old, ADMIN)["allowed"] is False  # default gateRemovers: the controller


def test_the_controllers_resolve_and_join_patches_pass(staffed):
    """controller/owners.py ``resolve`` on a pod admission left unresolved: gang labels, owner, owner-uid and
    expected-members added, ``unresolved`` removed. The same shape joins a running pod that escaped admission."""
    app = f.spark_app("ns", "pi", annotations=OPTED_IN)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns", "uid": "ns"}}
    unresolved = f.spark_driver(app)
    unresolved["metadata"].update(uid="uid-driver", annotations={UNRESOLVED: "GET sparkapplications/pi: HTTP 503"})
    unresolved["spec"]["schedulingGates"] = [{"name": GATE}]
    resolution = resolve(unresolved, MemorySource([app, namespace]), Config())
    assert resolution.action == "join"
    joined = patched(unresolved, resolution.patch)
    notes = joined["metadata"]["annotations"]
    assert {OWNER, OWNER_UID, EXPECTED} <= set(notes) and UNRESOLVED not in notes
    assert validate(staffed, joined, "UPDATE", unresolved, CONTROLLER)["allowed"] is True
    assert validate(staffed, joined, "UPDATE", unresolved, ADMIN)["allowed"] is False
    # a running pod of an opted-in root that escaped admission: joined, not gated (gates cannot be added)
    running = f.spark_driver(app)
    running["spec"]["nodeName"] = "node-1"
    escaped = copy.deepcopy(running)
    escaped["metadata"]["labels"].update({GROUP: "pi", MIN: "4"})
    escaped["metadata"]["annotations"] = {SIGS_GROUP: "pi", SIGS_MIN: "4", OWNER: notes[OWNER],
                                          OWNER_UID: app["metadata"]["uid"]}
    assert validate(staffed, escaped, "UPDATE", running, CONTROLLER)["allowed"] is True
    assert_refused(validate(staffed, escaped, "UPDATE", running, ADMIN), OWNER, f"cannot be added by {ADMIN}")


# --- /mutate, CREATE: admission's own state, as the creator sent it ---------------------------------------------


@pytest.fixture
def job(apiserver):
    """An opted-in PyTorchJob (1 master + 3 workers) in a fresh namespace."""
    ns = fresh_namespace(apiserver)
    job = pytorchjob(ns, OPTED_IN)
    apiserver.put(job)
    return job


def ns_of(obj):
    return obj["metadata"]["namespace"]


@pytest.mark.parametrize("key, value, words", [
    (OWNER_UID, "uid-of-another-gang", ["is not what KubeNexus admission writes", "'uid-"]),
    (OWNER, "kubeflow.org/v1/PyTorchJob/other", ["kubeflow.org/v1/PyTorchJob/train-"]),
    (EXPECTED, '[{"role":"worker","count":100,"requests":{"cpu":"64"}}]', ["none (no members of its gang"]),
])
def test_a_member_with_forged_owner_keys_is_refused(webhook, job, key, value, words):
    pod = worker_pod(job)
    pod["metadata"]["annotations"] = {key: value}
    response, after = admission(webhook, pod, ns_of(job))
    assert after is None
    assert_refused(response, key, repr(value), "create the pod without it", *words)


def test_values_admission_writes_pass(webhook, job):
    """A creator (or an earlier pass) sending exactly what admission writes is not refused."""
    _, first = admission(webhook, worker_pod(job), ns_of(job))
    pod = worker_pod(job)
    pod["metadata"]["annotations"] = {k: first["metadata"]["annotations"][k] for k in (OWNER, OWNER_UID)}
    response, after = admission(webhook, pod, ns_of(job))
    assert response["allowed"] and after["metadata"]["annotations"][OWNER_UID] == job["metadata"]["uid"]


def test_a_pod_without_root_cannot_claim_a_gang(webhook, apiserver):
    """Explicit gang labels on a bare pod make a gang of its own: an owner-uid would put it into another's."""
    ns = fresh_namespace(apiserver)
    pod = make_pod({GROUP: "train", MIN: "4"}, {OWNER_UID: "uid-of-the-victim", OWNER: "kubeflow.org/v1/PyTorchJob/x"})
    response, after = admission(webhook, pod, ns)
    assert after is None
    assert_refused(response, OWNER, "none (the pod has no root object)")


def test_a_pod_without_root_cannot_claim_a_gang_while_its_namespace_cannot_be_read(start_webhook, apiserver):
    """The namespace read fails (the pass is UNRESOLVED): a pod without owner references never had a member pass
    that wrote owner keys, so they are refused even in the shape such a pass leaves."""
    ns = fresh_namespace(apiserver)
    apiserver.fail({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, 503)
    pod = make_pod({GROUP: "train", MIN: "4"}, {OWNER: "kubeflow.org/v1/PyTorchJob/x", OWNER_UID: "uid-of-the-victim"})
    response, after = admission(start_webhook(apiTimeoutSeconds=1.5), pod, ns)
    assert after is None
    assert_refused(response, OWNER, "cannot be verified now")


@pytest.mark.parametrize("key", [OWNER, OWNER_UID, EXPECTED])
def test_a_pod_left_alone_cannot_carry_state(webhook, apiserver, key):
    ns = fresh_namespace(apiserver)
    job = pytorchjob(ns)  # not opted in
    apiserver.put(job)
    pod = worker_pod(job)
    pod["metadata"]["annotations"] = {key: "x"}
    response, after = admission(webhook, pod, ns)
    assert after is None
    assert_refused(response, key, "not gang-scheduled by KubeNexus", "is not opted in")


def test_a_creators_unresolved_marker_is_dropped_by_a_pass_that_reads_the_owner(webhook, job):
    pod = worker_pod(job)
    pod["metadata"]["annotations"] = {UNRESOLVED: "made up"}
    response, after = admission(webhook, pod, ns_of(job))
    assert response["allowed"] and UNRESOLVED not in after["metadata"]["annotations"]
    assert after["metadata"]["annotations"][OWNER_UID] == job["metadata"]["uid"]


# --- /mutate, reinvocation: our own output comes back ----------------------------------------------------------


def test_reinvocation_after_a_pass_that_could_not_read_the_owner(webhook, apiserver, job):
    """First pass: the owner read fails, the pod is gated as unresolved. The apiserver reinvokes us (another
    webhook changed the pod) and the read succeeds: the pod becomes a member, the marker goes, nothing is refused,
    and the result passes validation (which runs last)."""
    apiserver.fail(job, 503)
    response, first = admission(webhook, worker_pod(job), ns_of(job))
    assert response["allowed"] and UNRESOLVED in first["metadata"]["annotations"]
    apiserver.failures.pop(path_of(job))
    first["metadata"]["labels"]["example.com/injected"] = "by-another-webhook"
    response, again = admission(webhook, first, ns_of(job))
    assert response["allowed"]
    notes = again["metadata"]["annotations"]
    assert UNRESOLVED not in notes and notes[OWNER_UID] == job["metadata"]["uid"]
    assert again["metadata"]["labels"][GROUP] == job["metadata"]["name"]
    assert again["spec"]["schedulingGates"] == [{"name": GATE}]
    assert validate(webhook, again)["allowed"] is True
    assert admission(webhook, again, ns_of(job))[0].get("patch") is None  # and nothing more to do


def test_reinvocation_after_a_member_pass_whose_owner_read_fails(webhook, start_webhook, apiserver):
    """A staged Spark driver (expected-members) admitted, then reinvoked on a replica with a cold cache whose reads
    fail: its gang keys are kept, nothing refused. The same keys without the gang label are not what a member pass
    leaves: refused."""
    ns = fresh_namespace(apiserver)
    app = f.spark_app(ns, "pi", annotations=OPTED_IN)
    apiserver.put(app)
    _, first = admission(webhook, f.spark_driver(app), ns)
    assert EXPECTED in first["metadata"]["annotations"]
    cold = start_webhook(apiTimeoutSeconds=1.5)  # another replica: its owner cache is cold
    apiserver.fail(app, 503)
    response, again = admission(cold, first, ns)
    assert response["allowed"] and again == first
    forged = copy.deepcopy(first)
    del forged["metadata"]["labels"][GROUP]
    response, after = admission(cold, forged, ns)
    assert after is None
    assert_refused(response, OWNER, "cannot be verified now")


def test_reinvocation_after_a_member_pass_whose_namespace_read_fails(webhook, start_webhook, apiserver, job):
    """The owner is read, the namespace is not: the pass is UNRESOLVED, and keeps what the earlier pass wrote."""
    _, first = admission(webhook, worker_pod(job), ns_of(job))
    cold = start_webhook(apiTimeoutSeconds=1.5)
    apiserver.fail({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns_of(job)}}, 503)
    response, again = admission(cold, first, ns_of(job))
    assert response["allowed"] and again["metadata"]["annotations"][OWNER_UID] == job["metadata"]["uid"]
    assert "namespace" in again["metadata"]["annotations"][UNRESOLVED]


# --- kubenexus explain -------------------------------------------------------------------------------------------


def test_explain_shows_the_refusal(tmp_path):
    job = pytorchjob("team-a", OPTED_IN, name="train")
    pod = worker_pod(job)
    pod["metadata"]["annotations"] = {OWNER_UID: "uid-of-another-gang"}
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(pod))
    (tmp_path / "objects.yaml").write_text(yaml.safe_dump(job))
    command = [KUBENEXUS, "explain", "--pod", str(tmp_path / "pod.yaml"),
               "--objects", str(tmp_path / "objects.yaml"), "--namespace", "team-a"]
    text = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout
    assert "decision: gang (allowed: false)" in text
    assert f"denied: metadata.annotations[{OWNER_UID}]: 'uid-of-another-gang' is not what KubeNexus admission " \
           "writes for this pod: 'uid-train'" in text
    assert "pod after admission: (none: the apiserver refuses the create)" in text
    result = json.loads(subprocess.run([*command, "--output", "json"], capture_output=True, text=True, timeout=60,
                                       check=True).stdout)
    assert result["allowed"] is False and result["denial"].startswith(f"metadata.annotations[{OWNER_UID}]")
    assert result["patch"] == []

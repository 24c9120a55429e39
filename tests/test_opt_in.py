"""Opt-in rules through a running webhook: explicit labels, namespace label, autoInject, the
config switches, what happens when the owner walk cannot finish, and ``kubenexus explain``."""

from __future__ import annotations

import base64
import json
import subprocess
import time

import jsonpatch
import pytest
import yaml

from kubenexus.local_webhook import KUBENEXUS
from tests.support.contract import (
    CONTROLLER,
    GATE,
    GROUP,
    MIN,
    OPT_IN,
    OWNER,
    OWNER_UID,
    SIGS_GROUP,
    SIGS_MIN,
    UNRESOLVED,
)
from tests.support.opt_in import fresh_namespace, make_pod, pytorchjob, ref, worker_pod
from tests.support.webhook import pod_request

pytestmark = pytest.mark.e2e


def label_namespace(apiserver, ns, value):
    apiserver.put({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": ns, "uid": ns, "labels": {OPT_IN: value}}})


def meta(pod, field):
    return pod["metadata"].get(field) or {}


def gates(pod):
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def assert_unchanged(response, before, after):
    assert "patch" not in response
    assert after == before


def assert_member(pod, group, size):
    assert meta(pod, "labels")[GROUP] == group
    assert meta(pod, "labels")[MIN] == size
    assert meta(pod, "annotations")[SIGS_GROUP] == group
    assert meta(pod, "annotations")[SIGS_MIN] == size
    assert gates(pod) == [GATE]
    assert pod["spec"]["schedulerName"] == "kubenexus-scheduler"


# --- explicit labels --------------------------------------------------------------------


def test_plain_pod_with_group_label_becomes_member_of_one(webhook, namespace):
    pod = make_pod({GROUP: "my-gang"})
    _, after = webhook.admit(pod, namespace)
    assert_member(after, "my-gang", "1")
    assert OWNER not in meta(after, "annotations")


def test_plain_pod_keeps_the_users_min_available(webhook, namespace):
    pod = make_pod({GROUP: "my-gang", MIN: "3", "app": "x"})
    _, after = webhook.admit(pod, namespace)
    assert_member(after, "my-gang", "3")
    assert meta(after, "labels")["app"] == "x"


def test_seed_era_annotation_alone_opts_in(webhook, namespace):
    pod = make_pod(annotations={SIGS_GROUP: "legacy", SIGS_MIN: "2"})
    _, after = webhook.admit(pod, namespace)
    assert_member(after, "legacy", "2")


def test_seed_era_name_annotation_gets_default_min(webhook, namespace):
    _, after = webhook.admit(make_pod(annotations={SIGS_GROUP: "legacy"}), namespace)
    assert_member(after, "legacy", "1")


def test_explicit_label_overrides_the_roots_group_name(webhook, apiserver, namespace):
    job = pytorchjob(namespace, {OPT_IN: "true", "kubenexus.io/group-name": "from-root"})
    apiserver.put(job)
    pod = worker_pod(job)
    pod["metadata"]["labels"][GROUP] = "custom"
    _, after = webhook.admit(pod, namespace)
    assert_member(after, "custom", "4")
    assert meta(after, "annotations")[OWNER] == f"kubeflow.org/v1/PyTorchJob/{job['metadata']['name']}"
    assert meta(after, "annotations")[OWNER_UID] == job["metadata"]["uid"]


def test_root_group_name_annotation_names_the_gang(webhook, apiserver, namespace):
    job = pytorchjob(namespace, {OPT_IN: "true", "kubenexus.io/group-name": "from-root"})
    apiserver.put(job)
    _, after = webhook.admit(worker_pod(job), namespace)
    assert_member(after, "from-root", "4")


# --- namespace label and root annotation -------------------------------------------------


def test_enabled_namespace_gangs_unannotated_pytorchjob(webhook, apiserver, namespace):
    label_namespace(apiserver, namespace, "enabled")
    job = pytorchjob(namespace, workers=2)
    apiserver.put(job)
    _, after = webhook.admit(worker_pod(job), namespace)
    assert_member(after, job["metadata"]["name"], "3")
    assert meta(after, "annotations")[OWNER_UID] == job["metadata"]["uid"]


def test_unlabelled_namespace_leaves_unannotated_job_alone(webhook, apiserver, namespace):
    job = pytorchjob(namespace)
    apiserver.put(job)
    pod = worker_pod(job)
    response, after = webhook.admit(pod, namespace)
    assert_unchanged(response, pod, after)
    assert "warnings" not in response


def test_root_false_opts_out_in_enabled_namespace(webhook, apiserver, namespace):
    label_namespace(apiserver, namespace, "enabled")
    job = pytorchjob(namespace, {OPT_IN: "false"})
    apiserver.put(job)
    pod = worker_pod(job)
    response, after = webhook.admit(pod, namespace)
    assert_unchanged(response, pod, after)


@pytest.mark.parametrize("auto_inject", ["namespaces", "all"])
def test_disabled_namespace_beats_root_true_and_explicit_labels(start_webhook, apiserver, auto_inject):
    hook = start_webhook(autoInject="all") if auto_inject == "all" else start_webhook()
    ns = fresh_namespace(apiserver, label="disabled")
    job = pytorchjob(ns, {OPT_IN: "true"})
    apiserver.put(job)
    for pod in (worker_pod(job), make_pod({GROUP: "explicit"}), make_pod(annotations={SIGS_GROUP: "legacy"})):
        response, after = hook.admit(pod, ns)
        assert_unchanged(response, pod, after)


# --- autoInject: all ----------------------------------------------------------------------


def test_auto_inject_all_gangs_unannotated_job_in_plain_namespace(start_webhook, apiserver):
    hook = start_webhook(autoInject="all")
    ns = fresh_namespace(apiserver)
    job = pytorchjob(ns, workers=5)
    apiserver.put(job)
    _, after = hook.admit(worker_pod(job), ns)
    assert_member(after, job["metadata"]["name"], "6")


def test_auto_inject_all_still_honours_root_false(start_webhook, apiserver):
    hook = start_webhook(autoInject="all")
    ns = fresh_namespace(apiserver)
    job = pytorchjob(ns, {OPT_IN: "false"})
    apiserver.put(job)
    pod = worker_pod(job)
    response, after = hook.admit(pod, ns)
    assert_unchanged(response, pod, after)


@pytest.mark.parametrize("excluded", ["kube-system", "kubenexus-system"])
def test_auto_inject_all_skips_excluded_namespaces(start_webhook, apiserver, excluded):
    hook = start_webhook(autoInject="all")
    fresh_namespace(apiserver, name=excluded)
    job = pytorchjob(excluded, {OPT_IN: "true"})
    apiserver.put(job)
    for pod in (worker_pod(job), make_pod({GROUP: "explicit"})):
        response, after = hook.admit(pod, excluded)
        assert_unchanged(response, pod, after)


# --- config switches ----------------------------------------------------------------------


def test_scheduler_name_keep_leaves_scheduler_alone(start_webhook, namespace):
    hook = start_webhook(schedulerName="keep")
    _, after = hook.admit(make_pod({GROUP: "g"}, schedulerName="my-scheduler"), namespace)
    assert meta(after, "labels")[GROUP] == "g" and gates(after) == [GATE]
    assert after["spec"]["schedulerName"] == "my-scheduler"
    _, after = hook.admit(make_pod({GROUP: "g"}), namespace)
    assert gates(after) == [GATE] and "schedulerName" not in after["spec"]


def test_default_config_points_member_at_the_gang_scheduler(webhook, namespace):
    _, after = webhook.admit(make_pod({GROUP: "g"}, schedulerName="default-scheduler"), namespace)
    assert after["spec"]["schedulerName"] == "kubenexus-scheduler"


def test_cosched_annotations_off_omits_sigs_annotations(start_webhook, namespace):
    hook = start_webhook(coschedulingAnnotations=False)
    _, after = hook.admit(make_pod({GROUP: "g", MIN: "2"}), namespace)
    assert meta(after, "labels")[GROUP] == "g" and meta(after, "labels")[MIN] == "2"
    assert SIGS_GROUP not in meta(after, "annotations") and SIGS_MIN not in meta(after, "annotations")
    assert gates(after) == [GATE]


# --- the owner walk cannot finish ----------------------------------------------------------


def assert_unresolved(after, *words):
    assert gates(after) == [GATE]
    reason = meta(after, "annotations")[UNRESOLVED]
    for word in words:
        assert word in reason
    assert GROUP not in meta(after, "labels") and MIN not in meta(after, "labels")
    assert SIGS_GROUP not in meta(after, "annotations")


def test_owner_lookup_500_gates_pod_as_unresolved(webhook, apiserver, namespace):
    label_namespace(apiserver, namespace, "enabled")
    job = pytorchjob(namespace)
    apiserver.put(job)
    apiserver.fail(job, 500)
    response, after = webhook.admit(worker_pod(job), namespace)
    assert response["allowed"] is True
    assert_unresolved(after, job["metadata"]["name"], "500")


def test_owner_lookup_timeout_gates_pod_as_unresolved(start_webhook, apiserver):
    hook = start_webhook(apiTimeoutSeconds=0.5)
    ns = fresh_namespace(apiserver, label="enabled")
    job = pytorchjob(ns)
    apiserver.put(job)
    apiserver.fail(job, 200, delay=5)
    started = time.monotonic()
    response, after = hook.admit(worker_pod(job), ns)
    assert time.monotonic() - started < 4, "the webhook waited for the slow apiserver"
    assert response["allowed"] is True
    assert_unresolved(after, job["metadata"]["name"])


def test_owner_lookup_failure_does_not_gate_a_bound_pod(webhook, apiserver, namespace):
    # A gate on a pod with spec.nodeName makes the apiserver reject the pod (admit checks that).
    job = pytorchjob(namespace)
    apiserver.put(job)
    apiserver.fail(job, 500)
    pod = worker_pod(job, nodeName="node-1")
    response, after = webhook.admit(pod, namespace)
    assert_unchanged(response, pod, after)
    assert any("node-1" in w for w in response["warnings"])


@pytest.mark.parametrize("uid", [None, "uid-of-the-deleted-one"], ids=["404", "uid-mismatch"])
def test_missing_owner_admits_unchanged_with_warning(webhook, apiserver, namespace, uid):
    label_namespace(apiserver, namespace, "enabled")
    job = pytorchjob(namespace)
    if uid:  # the owner was recreated under the same name: the pod's reference is stale
        apiserver.put(job)
    pod = make_pod({"training.kubeflow.org/job-name": "x"}, owners=[ref(job, uid=uid)])
    response, after = webhook.admit(pod, namespace)
    assert_unchanged(response, pod, after)
    assert any(job["metadata"]["name"] in w for w in response["warnings"])


def test_unknown_owner_kind_admits_unchanged_with_warning(webhook, apiserver, namespace):
    label_namespace(apiserver, namespace, "enabled")
    owner = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1", "uid": "u1"}}
    pod = make_pod(owners=[ref(owner)])
    response, after = webhook.admit(pod, namespace)
    assert_unchanged(response, pod, after)
    assert any("Widget" in w for w in response["warnings"])


@pytest.mark.parametrize("kind", ["ReplicaSet", "DaemonSet"])
def test_long_running_owners_are_left_alone_quietly(webhook, apiserver, namespace, kind):
    label_namespace(apiserver, namespace, "enabled")
    owner = {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "web", "uid": "u1"}}
    pod = make_pod({"app": "web"}, owners=[ref(owner)])
    response, after = webhook.admit(pod, namespace)
    assert_unchanged(response, pod, after)
    assert "warnings" not in response


def test_owner_reference_cycle_admits_unchanged_with_warning(webhook, apiserver, namespace):
    label_namespace(apiserver, namespace, "enabled")
    a = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "loop-a", "namespace": namespace, "uid": "ua"}}
    b = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "loop-b", "namespace": namespace, "uid": "ub"}}
    a["metadata"]["ownerReferences"] = [ref(b)]
    b["metadata"]["ownerReferences"] = [ref(a)]
    apiserver.put(a, b)
    pod = make_pod(owners=[ref(a)])
    response, after = webhook.admit(pod, namespace)
    assert_unchanged(response, pod, after)
    assert any("loop-a" in w or "loop-b" in w for w in response["warnings"])


def test_min_available_too_long_for_a_label_admits_unchanged_with_warning(webhook, namespace):
    # A valid annotation, but the label it would be copied to holds at most 63 characters.
    pod = make_pod(annotations={SIGS_GROUP: "legacy", SIGS_MIN: "9" * 64})
    response, after = webhook.admit(pod, namespace)
    assert_unchanged(response, pod, after)
    assert any("63" in w for w in response["warnings"])


def test_bound_pod_in_opted_in_gang_admits_unchanged_with_warning(webhook, apiserver, namespace):
    job = pytorchjob(namespace, {OPT_IN: "true"})
    apiserver.put(job)
    pod = worker_pod(job, nodeName="node-7")
    response, after = webhook.admit(pod, namespace)
    assert_unchanged(response, pod, after)
    assert any("node-7" in w for w in response["warnings"])


# --- requests /mutate leaves alone ----------------------------------------------------------


def test_update_and_delete_of_member_pods_are_not_patched(webhook, namespace):
    pod = make_pod({GROUP: "g"})
    for operation in ("UPDATE", "DELETE"):
        request = pod_request(pod, namespace, operation=operation, old=pod, username=CONTROLLER)
        response = webhook.review("/mutate", request)
        assert response["allowed"] is True and "patch" not in response


def test_non_pod_requests_are_not_patched(webhook, apiserver, namespace):
    job = pytorchjob(namespace, {OPT_IN: "true"})
    request = pod_request(job, namespace)
    request["kind"] = {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"}
    request["resource"] = {"group": "kubeflow.org", "version": "v1", "resource": "pytorchjobs"}
    response = webhook.review("/mutate", request)
    assert response["allowed"] is True and "patch" not in response


def test_pod_subresource_create_is_not_patched(webhook, namespace):
    request = pod_request(make_pod({GROUP: "g"}), namespace)
    request["subResource"] = "ephemeralcontainers"
    response = webhook.review("/mutate", request)
    assert response["allowed"] is True and "patch" not in response


# --- kubenexus explain ----------------------------------------------------------------------


def explain(tmp_path, pod, objects, *args):
    pod_file, objects_file = tmp_path / "pod.yaml", tmp_path / "objects.yaml"
    pod_file.write_text(yaml.safe_dump(pod))
    objects_file.write_text(yaml.safe_dump_all(objects))
    return subprocess.run([KUBENEXUS, "explain", "--pod", str(pod_file), "--objects", str(objects_file), *args],
                          capture_output=True, text=True, timeout=60)


def mutate_patch(webhook, pod, ns):
    response = webhook.review("/mutate", pod_request(pod, ns))
    patch = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    return response, patch


def test_explain_json_matches_mutate(webhook, apiserver, namespace, tmp_path):
    ns_obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": {OPT_IN: "enabled"}}}
    apiserver.put(ns_obj)
    job = pytorchjob(namespace, workers=1)
    apiserver.put(job)
    pod = worker_pod(job)
    run = explain(tmp_path, pod, [ns_obj, job], "--output", "json", "--namespace", namespace)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert {"allowed", "patch", "pod", "warnings", "reasons"} <= set(result)
    assert result["allowed"] is True and result["warnings"] == []
    _, patch = mutate_patch(webhook, pod, namespace)
    assert patch and result["patch"] == patch
    assert result["pod"] == jsonpatch.apply_patch(pod, patch)
    assert_member(result["pod"], job["metadata"]["name"], "2")
    assert any("enabled" in r for r in result["reasons"])


def test_explain_shows_warnings_and_reasons_like_mutate(webhook, apiserver, namespace, tmp_path):
    job = pytorchjob(namespace, {OPT_IN: "true"})  # not in the stub nor in --objects: a 404
    pod = make_pod(owners=[ref(job)])
    run = explain(tmp_path, pod, [], "--output", "json", "--namespace", namespace)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    response, patch = mutate_patch(webhook, pod, namespace)
    assert result["patch"] == patch == []
    assert result["warnings"] == response["warnings"]
    assert any(job["metadata"]["name"] in w for w in result["warnings"])
    assert any("does not exist" in r for r in result["reasons"])
    text = explain(tmp_path, pod, [], "--namespace", namespace)
    assert text.returncode == 0, text.stderr
    assert "warnings:" in text.stdout and job["metadata"]["name"] in text.stdout


def test_explain_text_shows_the_reasons(tmp_path):
    run = explain(tmp_path, make_pod({GROUP: "g"}), [])
    assert run.returncode == 0, run.stderr
    assert "explicit pod-group labels" in run.stdout and GATE in run.stdout


@pytest.mark.parametrize("pod_text", [
    "metadata: {name: [unclosed\n",  # bad YAML
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",  # not a Pod
    "- just\n- a list\n",
    "apiVersion: v1\nkind: 5\n",
    "apiVersion: v1\nkind: Pod\nmetadata: 5\n",
], ids=["bad-yaml", "configmap", "list", "numeric-kind", "scalar-metadata"])
def test_explain_bad_pod_file_exits_2(tmp_path, pod_text):
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(pod_text)
    run = subprocess.run([KUBENEXUS, "explain", "--pod", str(pod_file)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert run.stderr.startswith("kubenexus explain: ") and "Traceback" not in run.stderr


def test_explain_missing_files_exit_2(tmp_path):
    missing = str(tmp_path / "nope.yaml")
    run = subprocess.run([KUBENEXUS, "explain", "--pod", missing], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and run.stderr.startswith("kubenexus explain: ") and "nope.yaml" in run.stderr
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(yaml.safe_dump(make_pod()))
    run = subprocess.run([KUBENEXUS, "explain", "--pod", str(pod_file), "--objects", missing],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and run.stderr.startswith("kubenexus explain: ") and "nope.yaml" in run.stderr


@pytest.mark.parametrize("objects_text", [
    "a: [b\n",
    "apiVersion: v1\nkind: List\nitems: 5\n",
    "apiVersion: v1\nkind: List\nitems: [7]\n",
    "just a string\n",
], ids=["bad-yaml", "scalar-items", "scalar-item", "scalar"])
def test_explain_bad_objects_file_exits_2(tmp_path, objects_text):
    pod_file, objects_file = tmp_path / "pod.yaml", tmp_path / "objects.yaml"
    pod_file.write_text(yaml.safe_dump(make_pod()))
    objects_file.write_text(objects_text)
    run = subprocess.run([KUBENEXUS, "explain", "--pod", str(pod_file), "--objects", str(objects_file)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert run.stderr.startswith("kubenexus explain: ") and "Traceback" not in run.stderr

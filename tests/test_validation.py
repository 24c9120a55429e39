"""Every /validate rule through a running webhook, allowed and denied; denials name the field."""

from __future__ import annotations

import copy
import uuid

import pytest

from tests.support.contract import CONTROLLER, GATE, GROUP, MIN, OPT_IN, OWNER, OWNER_UID, SIGS_GROUP, SIGS_MIN
from tests.support.webhook import pod_request

pytestmark = pytest.mark.e2e

USER = "alice@example.com"


def make_pod(labels=None, annotations=None, gated=False):
    spec = {"containers": [{"name": "c", "image": "busybox"}]}
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": dict(labels or {}), "annotations": dict(annotations or {})},
            "spec": spec}


def member():
    """A pod as the mutating webhook leaves a PyTorchJob worker: labelled, owned, gated."""
    return make_pod({GROUP: "train", MIN: "4", "app": "train"},
                    {SIGS_GROUP: "train", SIGS_MIN: "4", OWNER: "kubeflow.org/v1/PyTorchJob/train",
                     OWNER_UID: "uid-1"}, gated=True)


def check(webhook, request):
    return webhook.review("/validate", request)


def assert_denied(response, field, code=None):
    assert response["allowed"] is False
    assert field in response["status"]["message"]
    if code is not None:
        assert response["status"]["code"] == code


# --- pod CREATE ---------------------------------------------------------------------------


@pytest.mark.parametrize("labels, annotations", [
    ({}, {}),
    ({GROUP: "my-gang"}, {}),
    ({GROUP: "my-gang", MIN: "3"}, {SIGS_GROUP: "my-gang", SIGS_MIN: "3"}),
    ({}, {SIGS_GROUP: "legacy.v2_a", SIGS_MIN: "12"}),
    ({GROUP: "a" * 63}, {}),
    ({GROUP: "g", MIN: "5"}, {SIGS_GROUP: "g", SIGS_MIN: "05"}),  # the same number
])
def test_pod_create_with_valid_gang_labels_is_allowed(webhook, labels, annotations):
    assert check(webhook, pod_request(make_pod(labels, annotations), "ns"))["allowed"] is True


@pytest.mark.parametrize("labels, annotations, field", [
    ({GROUP: "bad name"}, {}, f"metadata.labels[{GROUP}]"),
    ({GROUP: "-dash"}, {}, f"metadata.labels[{GROUP}]"),
    ({GROUP: "a" * 64}, {}, f"metadata.labels[{GROUP}]"),
    ({}, {SIGS_GROUP: "team/job"}, f"metadata.annotations[{SIGS_GROUP}]"),
    ({}, {SIGS_GROUP: ""}, f"metadata.annotations[{SIGS_GROUP}]"),
    ({GROUP: "g", MIN: "0"}, {}, f"metadata.labels[{MIN}]"),
    ({GROUP: "g", MIN: "abc"}, {}, f"metadata.labels[{MIN}]"),
    ({GROUP: "g", MIN: "-2"}, {}, f"metadata.labels[{MIN}]"),
    ({}, {SIGS_GROUP: "g", SIGS_MIN: "0"}, f"metadata.annotations[{SIGS_MIN}]"),
    ({}, {SIGS_GROUP: "g", SIGS_MIN: "1.5"}, f"metadata.annotations[{SIGS_MIN}]"),
    ({}, {SIGS_GROUP: "g", SIGS_MIN: "²"}, f"metadata.annotations[{SIGS_MIN}]"),  # isdigit(), but no integer
    ({GROUP: "g", MIN: "٣"}, {}, f"metadata.labels[{MIN}]"),  # Arabic-Indic 3: not an integer to Go's Atoi
    ({GROUP: "a"}, {SIGS_GROUP: "b"}, f"metadata.annotations[{SIGS_GROUP}]"),
    ({GROUP: "g", MIN: "2"}, {SIGS_GROUP: "g", SIGS_MIN: "3"}, f"metadata.annotations[{SIGS_MIN}]"),
    ({GROUP: "5"}, {SIGS_GROUP: "05"}, f"metadata.annotations[{SIGS_GROUP}]"),  # names are compared as text
    ({MIN: "2"}, {}, f"metadata.labels[{GROUP}]"),
    ({}, {SIGS_MIN: "2"}, f"metadata.labels[{GROUP}]"),
])
def test_pod_create_with_invalid_gang_labels_is_denied(webhook, labels, annotations, field):
    response = check(webhook, pod_request(make_pod(labels, annotations), "ns"))
    assert_denied(response, field, 422)


def test_min_without_name_says_the_name_is_required(webhook):
    response = check(webhook, pod_request(make_pod({MIN: "2"}), "ns"))
    assert_denied(response, "required")


# --- pod UPDATE ---------------------------------------------------------------------------


def update(old, new, username=USER):
    return pod_request(new, "ns", operation="UPDATE", old=old, username=username)


@pytest.mark.parametrize("field, key, value", [
    ("labels", GROUP, "other"),
    ("labels", GROUP, None),
    ("labels", MIN, "5"),
    ("labels", MIN, None),
    ("annotations", SIGS_GROUP, "other"),
    ("annotations", SIGS_MIN, None),
    ("annotations", OWNER, "kubeflow.org/v1/PyTorchJob/other"),
    ("annotations", OWNER, None),
    ("annotations", OWNER_UID, "uid-2"),
    ("annotations", OWNER_UID, None),
])
@pytest.mark.parametrize("username", [USER, CONTROLLER])
def test_changing_or_removing_gang_identity_is_denied(webhook, field, key, value, username):
    old = member()
    new = copy.deepcopy(old)
    if value is None:
        del new["metadata"][field][key]
    else:
        new["metadata"][field][key] = value
    assert_denied(check(webhook, update(old, new, username)), f"metadata.{field}[{key}]", 422)


def test_user_removing_the_gate_is_forbidden(webhook):
    old = member()
    new = copy.deepcopy(old)
    new["spec"]["schedulingGates"] = []
    response = check(webhook, update(old, new))
    assert_denied(response, f"spec.schedulingGates[{GATE}]", 403)
    assert USER in response["status"]["message"]


def test_controller_removing_the_gate_is_allowed(webhook):
    old = member()
    new = copy.deepcopy(old)
    new["spec"]["schedulingGates"] = []
    assert check(webhook, update(old, new, CONTROLLER))["allowed"] is True


def test_user_removing_another_gate_is_allowed(webhook):
    old = member()
    old["spec"]["schedulingGates"].append({"name": "example.com/other"})
    new = copy.deepcopy(old)
    new["spec"]["schedulingGates"] = [{"name": GATE}]
    assert check(webhook, update(old, new))["allowed"] is True


def test_gate_removers_setting_replaces_the_default_identity(start_webhook):
    hook = start_webhook(gateRemovers=["system:serviceaccount:ops:my-controller"])
    old = member()
    new = copy.deepcopy(old)
    new["spec"]["schedulingGates"] = []
    assert hook.review("/validate", update(old, new, "system:serviceaccount:ops:my-controller"))["allowed"]
    assert_denied(hook.review("/validate", update(old, new, CONTROLLER)), "spec.schedulingGates", 403)


def test_unrelated_label_and_annotation_changes_are_allowed(webhook):
    old = member()
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["app"] = "renamed"
    new["metadata"]["labels"]["extra"] = "yes"
    new["metadata"]["annotations"]["note"] = "hello"
    new["metadata"]["finalizers"] = []
    assert check(webhook, update(old, new))["allowed"] is True


def test_user_adding_gang_labels_after_creation_is_forbidden(webhook):
    old = make_pod({"app": "x"})
    new = copy.deepcopy(old)
    new["metadata"]["labels"][GROUP] = "late"
    assert_denied(check(webhook, update(old, new)), f"metadata.labels[{GROUP}]", 403)
    assert check(webhook, update(old, new, CONTROLLER))["allowed"] is True


def test_controller_adding_an_invalid_gang_label_is_denied(webhook):
    old = make_pod({"app": "x"})
    new = copy.deepcopy(old)
    new["metadata"]["labels"].update({GROUP: "late", MIN: "0"})
    assert_denied(check(webhook, update(old, new, CONTROLLER)), f"metadata.labels[{MIN}]", 422)


def test_status_subresource_update_is_allowed(webhook):
    old = member()
    new = copy.deepcopy(old)
    new["spec"]["schedulingGates"] = []
    new["metadata"]["labels"][GROUP] = "other"
    new["status"] = {"phase": "Running"}
    request = update(old, new)
    request["subResource"] = "status"
    assert check(webhook, request)["allowed"] is True


def test_update_leaving_a_preexisting_bad_annotation_alone_is_allowed(webhook):
    # A seed-era pod whose annotation was never a valid label value: removing its finalizer
    # (or any unrelated change) must not be blocked, or the pod can never be deleted.
    old = make_pod({"app": "x"}, {SIGS_GROUP: "team/job"})
    old["metadata"]["finalizers"] = ["example.com/cleanup"]
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = []
    assert check(webhook, update(old, new))["allowed"] is True


def test_pod_delete_is_allowed(webhook):
    request = pod_request(member(), "ns", operation="DELETE", old=member(), username=USER)
    request["object"] = None
    assert check(webhook, request)["allowed"] is True


# --- root objects -------------------------------------------------------------------------


def spark(annotations, executors=2):
    """1 driver + ``executors`` executors."""
    return {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
            "metadata": {"name": "pi", "annotations": annotations},
            "spec": {"type": "Scala", "driver": {"cores": 1}, "executor": {"instances": executors, "cores": 1}}}


def pytorch(annotations, workers=3):
    """1 master + ``workers`` workers."""
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "train", "annotations": annotations},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {}},
                                             "Worker": {"replicas": workers, "template": {}}}}}


def jobset(annotations, replicas=2, parallelism=4):
    """``replicas`` Jobs of ``parallelism`` pods each."""
    job = {"parallelism": parallelism, "completions": parallelism, "template": {}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "js", "annotations": annotations},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": replicas, "template": {"spec": job}}]}}


ROOTS = {"SparkApplication": (spark, 3), "PyTorchJob": (pytorch, 4), "JobSet": (jobset, 8)}


def root_request(obj, operation="CREATE", old=None):
    group, _, version = obj["apiVersion"].rpartition("/")
    kind = obj["kind"]
    gvk = {"group": group, "version": version, "kind": kind}
    return {"uid": str(uuid.uuid4()), "kind": gvk, "requestKind": gvk,
            "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
            "name": obj["metadata"]["name"], "namespace": "ns", "operation": operation,
            "userInfo": {"username": USER}, "object": obj, "oldObject": old}


def valid_annotations(size):
    return {"kubenexus.io/gang-scheduling": "true", "kubenexus.io/min-available": str(size),
            "kubenexus.io/group-name": "my.gang-1", "kubenexus.io/schedule-timeout-seconds": "300",
            "kubenexus.io/queue": "team-a.research"}


@pytest.mark.parametrize("kind", ROOTS)
def test_root_with_valid_annotations_is_allowed(webhook, kind):
    build, size = ROOTS[kind]
    for notes in ({}, {"kubenexus.io/gang-scheduling": "false"}, {"other.io/x": "y"}, valid_annotations(size)):
        assert check(webhook, root_request(build(notes)))["allowed"] is True, notes


BAD_ROOT_ANNOTATIONS = [
    ("kubenexus.io/gang-scheduling", "yes"),
    ("kubenexus.io/gang-scheduling", "True"),
    ("kubenexus.io/gang-scheduling", ""),
    ("kubenexus.io/min-available", "abc"),
    ("kubenexus.io/min-available", "0"),
    ("kubenexus.io/min-available", "-1"),
    ("kubenexus.io/min-available", "²"),
    ("kubenexus.io/schedule-timeout-seconds", "0"),
    ("kubenexus.io/schedule-timeout-seconds", "-30"),
    ("kubenexus.io/schedule-timeout-seconds", "5m"),
    ("kubenexus.io/group-name", "bad name"),
    ("kubenexus.io/group-name", ""),
    ("kubenexus.io/group-name", "x" * 64),
    ("kubenexus.io/topology-required", "not a label key"),
    ("kubenexus.io/topology-preferred", ""),
    ("kubenexus.io/queue", "Team-A"),
    ("kubenexus.io/queue", ""),
    ("kubenexus.io/queue", "team_a"),
]


@pytest.mark.parametrize("kind", ROOTS)
@pytest.mark.parametrize("key, value", BAD_ROOT_ANNOTATIONS)
def test_root_with_bad_annotation_is_denied_on_create(webhook, kind, key, value):
    build, _ = ROOTS[kind]
    response = check(webhook, root_request(build({key: value})))
    assert_denied(response, f"metadata.annotations[{key}]", 422)


@pytest.mark.parametrize("kind", ROOTS)
def test_min_available_larger_than_the_pods_the_spec_creates_is_denied(webhook, kind):
    build, size = ROOTS[kind]
    assert check(webhook, root_request(build({"kubenexus.io/min-available": str(size)})))["allowed"] is True
    response = check(webhook, root_request(build({"kubenexus.io/min-available": str(size + 1)})))
    assert_denied(response, "metadata.annotations[kubenexus.io/min-available]", 422)
    assert f"{size} pod" in response["status"]["message"]


def test_shrinking_the_spec_below_min_available_is_denied(webhook):
    old = pytorch({"kubenexus.io/min-available": "4"}, workers=3)
    new = pytorch({"kubenexus.io/min-available": "4"}, workers=1)
    assert_denied(check(webhook, root_request(new, "UPDATE", old)), "kubenexus.io/min-available", 422)


@pytest.mark.parametrize("key, hint", [
    ("kubenexus.io/min-availabe", "did you mean kubenexus.io/min-available?"),
    ("kubenexus.io/gang-schedulng", "did you mean kubenexus.io/gang-scheduling?"),
    ("kubenexus.io/schedule-timeout", "did you mean kubenexus.io/schedule-timeout-seconds?"),
])
@pytest.mark.parametrize("kind", ROOTS)
def test_unknown_kubenexus_annotation_suggests_the_right_one(webhook, kind, key, hint):
    build, _ = ROOTS[kind]
    response = check(webhook, root_request(build({key: "true"})))
    assert_denied(response, f"metadata.annotations[{key}]", 422)
    assert hint in response["status"]["message"]


def test_unknown_kubenexus_annotation_without_a_close_match_lists_the_known_ones(webhook):
    response = check(webhook, root_request(pytorch({"kubenexus.io/zzzzzzzzzz": "1"})))
    assert_denied(response, "metadata.annotations[kubenexus.io/zzzzzzzzzz]", 422)
    assert "kubenexus.io/gang-scheduling" in response["status"]["message"]


@pytest.mark.parametrize("kind", ROOTS)
def test_update_introducing_a_bad_annotation_is_denied(webhook, kind):
    build, _ = ROOTS[kind]
    old = build({"kubenexus.io/gang-scheduling": "true"})
    new = build({"kubenexus.io/gang-scheduling": "maybe"})
    response = check(webhook, root_request(new, "UPDATE", old))
    assert_denied(response, "metadata.annotations[kubenexus.io/gang-scheduling]", 422)


@pytest.mark.parametrize("kind", ROOTS)
def test_update_with_unchanged_bad_annotations_is_allowed(webhook, kind):
    build, _ = ROOTS[kind]
    old = build({"kubenexus.io/gang-scheduling": "maybe", "kubenexus.io/min-availabe": "x"})
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"touched-by": "operator"}
    new["status"] = {"state": "Running"}
    assert check(webhook, root_request(new, "UPDATE", old))["allowed"] is True


@pytest.mark.parametrize("api_version, kind", [
    ("apps/v1", "Deployment"), ("example.com/v1", "Widget"), ("v1", "ConfigMap"),
])
def test_unknown_kinds_are_allowed_whatever_their_annotations(webhook, api_version, kind):
    obj = {"apiVersion": api_version, "kind": kind,
           "metadata": {"name": "x", "annotations": {"kubenexus.io/gang-scheduling": "maybe",
                                                     "kubenexus.io/min-availabe": "abc"}}}
    for operation in ("CREATE", "UPDATE"):
        assert check(webhook, root_request(obj, operation, obj if operation == "UPDATE" else None))["allowed"]


def test_root_delete_is_allowed(webhook):
    bad = pytorch({"kubenexus.io/gang-scheduling": "maybe"})
    request = root_request(bad, "DELETE", bad)
    request["object"] = None
    assert check(webhook, request)["allowed"] is True


# --- Namespaces: the opt-in label's value ---------------------------------------------------------------------


def namespace_request(labels: dict, operation: str = "CREATE", old_labels: dict | None = None) -> dict:
    """A Namespace write as the apiserver sends it: cluster-scoped, so without request.namespace."""
    def namespace(values: dict) -> dict:
        return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "labels": values}}

    return {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Namespace"},
            "resource": {"group": "", "version": "v1", "resource": "namespaces"}, "name": "team-a",
            "operation": operation, "userInfo": {"username": USER}, "object": namespace(labels),
            "oldObject": namespace(old_labels) if old_labels is not None else None}


@pytest.mark.parametrize("value", ["yes", "true", "Enabled", "", "on"])
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_a_namespace_label_value_that_means_nothing_is_allowed_with_a_warning(webhook, value, operation):
    response = check(webhook, namespace_request({OPT_IN: value}, operation, {} if operation == "UPDATE" else None))
    assert response["allowed"] is True
    [warning] = response["warnings"]
    assert f"namespace team-a: label {OPT_IN}={value!r} is ignored" in warning
    assert '"enabled"' in warning and '"disabled"' in warning


@pytest.mark.parametrize("labels, old", [({OPT_IN: "enabled"}, {OPT_IN: "yes"}), ({OPT_IN: "disabled"}, None),
                                         ({}, {OPT_IN: "yes"}), ({"team": "a"}, None)])
def test_a_valid_or_absent_namespace_label_passes_without_a_word(webhook, labels, old):
    response = check(webhook, namespace_request(labels, "UPDATE" if old is not None else "CREATE", old))
    assert response["allowed"] is True and not response.get("warnings")


@pytest.mark.parametrize("labels, annotations, warned", [
    ({"kubenexus.io/gang-sheduling": "enabled"}, {}, "label kubenexus.io/gang-sheduling means nothing to KubeNexus; "
                                                     "did you mean kubenexus.io/gang-scheduling?"),
    ({}, {OPT_IN: "enabled"}, f"annotation {OPT_IN} is ignored: KubeNexus reads the namespace's label {OPT_IN} "
                              f"(kubectl label namespace team-a {OPT_IN}=enabled)"),
])
def test_kubenexus_keys_a_namespace_has_where_they_mean_nothing_get_a_warning(webhook, labels, annotations, warned):
    request = namespace_request(labels)
    request["object"]["metadata"]["annotations"] = annotations
    response = check(webhook, request)
    assert response["allowed"] is True and response["warnings"] == [f"kubenexus: namespace team-a: {warned}"]


# --- roots: what an edit of a job whose pods exist does, and labels that mean nothing --------------------------------


@pytest.mark.parametrize("before, after, warned", [
    ({OPT_IN: "true"}, {OPT_IN: "false"}, "the gate controller releases this PyTorchJob's gated pods to ordinary "
                                          "scheduling now; pods created from now on are not gang-scheduled"),
    ({}, {OPT_IN: "true"}, "pods created from now on are decided with it; pods that exist are left as they are: "
                           "delete and resubmit the PyTorchJob to gang-schedule all of its pods"),
    ({OPT_IN: "true", "kubenexus.io/min-available": "4"}, {OPT_IN: "true", "kubenexus.io/min-available": "2"},
     "kubenexus.io/min-available changed: it applies to pods created from now on; its pods that exist keep the gang "
     "they were admitted to (each member carries its gang's name and size): delete and resubmit the PyTorchJob"),
    ({OPT_IN: "true"}, {OPT_IN: "true", "kubenexus.io/topology-required": "example.com/rack"},
     "kubenexus.io/topology-required changed: it applies at once while its gang waits; a gang already released "
     "keeps the placement it was released on"),
])
def test_an_edit_of_a_root_says_what_it_does_to_the_pods_that_exist(webhook, before, after, warned):
    response = check(webhook, root_request(pytorch(after), "UPDATE", pytorch(before)))
    assert response["allowed"] is True
    [warning] = response["warnings"]
    assert warning.startswith("kubenexus: ") and warned in warning, warning


OPTED_OUT_NOW = (f"{OPT_IN} removed: that is no opt-out: this PyTorchJob's gated pods stay gated until their gang, "
                 "as admitted, is whole and fits; pods created from now on are gang members only if their namespace "
                 f"is labelled {OPT_IN}=enabled (or autoInject is all), else admitted unchanged, outside the gang "
                 f'its gated pods wait for; set {OPT_IN}="false" instead to release its gated pods to ordinary '
                 "scheduling now")
NEW_PODS = ("applies to pods created from now on; its pods that exist keep the gang they were admitted to (each "
            "member carries its gang's name and size): delete and resubmit the {kind} to change that")
WHILE_WAITING = "applies at once while its gang waits; a gang already released keeps the placement it was released on"
QUEUE = "kubenexus.io/queue"
MOVED = ("applies at once: from the gate controller's next pass, its gang is in {queue}: while it waits, it waits "
         "for that Queue's quota and turn; once released, the move does not stop it: its usage counts against that "
         "Queue from then on, no longer against the one it was in")


@pytest.mark.parametrize("make, before, after, warned", [
    (pytorch, {OPT_IN: "true"}, {}, OPTED_OUT_NOW),
    (pytorch, {OPT_IN: "false"}, {}, f"{OPT_IN} removed: pods created from now on are gang members only if their "
     f"namespace is labelled {OPT_IN}=enabled (or autoInject is all), else admitted unchanged; pods that exist are "
     "not gated again, and those its opt-out released stay ordinary pods"),
    (pytorch, {OPT_IN: "false"}, {OPT_IN: "true"}, f"{OPT_IN} changed: pods created from now on are decided with it; "
     "pods that exist are left as they are: delete and resubmit the PyTorchJob to gang-schedule all of its pods"),
    (pytorch, {"kubenexus.io/group-name": "a"}, {"kubenexus.io/group-name": "b"},
     f"kubenexus.io/group-name changed: it {NEW_PODS.format(kind='PyTorchJob')}"),
    (pytorch, {}, {"kubenexus.io/schedule-timeout-seconds": "60"},
     f"kubenexus.io/schedule-timeout-seconds changed: it {WHILE_WAITING}"),
    (pytorch, {"kubenexus.io/best-effort-placement": "false"}, {"kubenexus.io/best-effort-placement": "true"},
     f"kubenexus.io/best-effort-placement changed: it {WHILE_WAITING}"),
    (pytorch, {"kubenexus.io/topology-preferred": "example.com/rack"}, {},
     f"kubenexus.io/topology-preferred changed: it {WHILE_WAITING}"),
    (pytorch, {}, {"kubenexus.io/topology-required.worker": "example.com/rack"},
     f"kubenexus.io/topology-required.worker changed: it {WHILE_WAITING}"),
    (jobset, {}, {"alpha.jobset.sigs.k8s.io/exclusive-topology": "example.com/rack"},
     f"alpha.jobset.sigs.k8s.io/exclusive-topology changed: it {WHILE_WAITING}"),
    (pytorch, {}, {QUEUE: "team-b"}, f"{QUEUE} added: it {MOVED.format(queue='Queue team-b')}"),
    (pytorch, {QUEUE: "team-a"}, {QUEUE: "team-b"}, f"{QUEUE} changed: it {MOVED.format(queue='Queue team-b')}"),
    (pytorch, {QUEUE: "team-a"}, {}, f"{QUEUE} removed: it "
     + MOVED.format(queue="the Queue that selects its namespace, if one does, else in none")),
])
def test_an_edit_of_each_annotation_of_a_root_gets_its_own_warning(webhook, make, before, after, warned):
    """Every key ``root_warnings`` tells about, each way it may change; a removed opt-in is told apart from an opt-out,
    which it is not (the gated pods stay gated: only "false" releases them), and a Queue edit says what moves."""
    response = check(webhook, root_request(make(after), "UPDATE", make(before)))
    assert response["allowed"] is True
    ours = [w for w in response["warnings"] if not w.startswith("kubenexus: if gang-scheduled")]  # queue_warnings'
    assert ours == [f"kubenexus: {warned}"]


def test_an_unchanged_root_and_a_new_one_get_no_warning(webhook):
    annotations = {OPT_IN: "true", "kubenexus.io/min-available": "2"}
    assert not check(webhook, root_request(pytorch(annotations), "UPDATE", pytorch(annotations))).get("warnings")
    assert not check(webhook, root_request(pytorch(annotations))).get("warnings")


def test_a_kubenexus_label_on_a_root_is_a_warning_naming_the_annotation(webhook):
    job = pytorch({})
    job["metadata"]["labels"] = {OPT_IN: "true", "kubenexus.io/min-availble": "2"}
    response = check(webhook, root_request(job))
    assert response["allowed"] is True
    assert response["warnings"] == [
        f"kubenexus: metadata.labels[{OPT_IN}]: a label is ignored; KubeNexus reads {OPT_IN} as an annotation: "
        f"kubectl annotate pytorchjob NAME {OPT_IN}=VALUE",
        "kubenexus: metadata.labels[kubenexus.io/min-availble]: a label is ignored; did you mean "
        "kubenexus.io/min-available?"]

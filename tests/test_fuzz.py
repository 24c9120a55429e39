"""Property-based fuzzing of /mutate and /validate of a running webhook over HTTPS.

Whatever arrives: never a 5xx and never a dropped connection; a 200 is a well-formed
AdmissionReview echoing the uid, never answered through the internal-error path (which admits the object unchanged
with the warning ``INTERNAL_ERROR``: whatever is malformed is a 400); a patch applies and keeps a valid pod valid.
"""

from __future__ import annotations

import base64
import json
import uuid

import jsonpatch
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from tests.support.apiserver_rules import create_errors
from tests.support.contract import CONTROLLER, GATE, GROUP, MIN, OWNER_UID, SIGS_GROUP, SIGS_MIN
from tests.support.fuzz import json_values
from tests.support.webhook import pod_request

pytestmark = pytest.mark.e2e

NS = f"fuzz-{uuid.uuid4().hex[:8]}"
#: How the answers of the internal-error path start (webhook/app.py, webhook/review.py ``admit_pod``).
INTERNAL_ERROR = "kubenexus: internal error"
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def obj(api_version, kind, name, owner=None, annotations=None, spec=None, labels=None):
    meta = {"name": name, "namespace": NS, "uid": f"uid-{name}", "annotations": annotations or {},
            "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [ref(owner)]
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec or {}}


def ref(owner, controller=True, uid=None):
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
            "uid": uid or owner["metadata"]["uid"], "controller": controller}


PYTORCH = obj("kubeflow.org/v1", "PyTorchJob", "pt", spec={"pytorchReplicaSpecs": {"Worker": {"replicas": 3}}})
OPTED_OUT = obj("kubeflow.org/v1", "PyTorchJob", "out", annotations={"kubenexus.io/gang-scheduling": "false"})
BROKEN = obj("kubeflow.org/v1", "PyTorchJob", "broken")  # the stub answers 500 for it
SPARK = obj("sparkoperator.k8s.io/v1beta2", "SparkApplication", "spark",
            spec={"executor": {"instances": 2, "cores": 1, "memory": "1g"}})
DRIVER = obj("v1", "Pod", "spark-driver", owner=SPARK, labels={"spark-role": "driver"})
JOBSET = obj("jobset.x-k8s.io/v1alpha2", "JobSet", "js", annotations={"kubenexus.io/min-available": "2"},
             spec={"replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": {"parallelism": 2}}},
                                      {"name": "later", "dependsOn": [{"name": "w"}], "template": {}}]})
JOB = obj("batch/v1", "Job", "js-w-0", owner=JOBSET, labels={"jobset.sigs.k8s.io/replicatedjob-name": "w"})
LOOP_A = obj("batch/v1", "Job", "loop-a")
LOOP_B = obj("batch/v1", "Job", "loop-b", owner=LOOP_A)
LOOP_A["metadata"]["ownerReferences"] = [ref(LOOP_B)]
OBJECTS = [PYTORCH, OPTED_OUT, BROKEN, SPARK, DRIVER, JOBSET, JOB, LOOP_A, LOOP_B]
FOREIGN = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs", "uid": "uid-rs"}}
UNKNOWN = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "uid": "uid-w"}}


@pytest.fixture(scope="module", autouse=True)
def fuzz_objects(apiserver):
    apiserver.put({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": NS, "uid": NS, "labels": {"kubenexus.io/gang-scheduling": "enabled"}}},
                  *OBJECTS)
    apiserver.fail(BROKEN, 500)


# --- strategies ---------------------------------------------------------------------------

TRICKY = ["", "g", "gang-1", "a b", "05", "0", "-1", "3", "²", "٣", "1" * 70, "x" * 64, "driver", "executor",
          "w", "later", "true", "false", "team/job", "a\n", "kubenexus-scheduler", "volcano", "node-1"]
strings = st.sampled_from(TRICKY) | st.text(max_size=30)
KEYS = [GROUP, MIN, SIGS_GROUP, SIGS_MIN, "scheduling.kubenexus.io/owner", "scheduling.kubenexus.io/owner-uid",
        "scheduling.kubenexus.io/unresolved", "scheduling.kubenexus.io/expected-members", "spark-role",
        "jobset.sigs.k8s.io/replicatedjob-name", "jobset.sigs.k8s.io/restart-attempt",
        "scheduling.k8s.io/group-name", "kubenexus.io/gang-scheduling", "app"]
keys_ = st.sampled_from(KEYS) | st.text(max_size=20)
string_maps = st.dictionaries(keys_, strings, max_size=5)
maps = string_maps | st.dictionaries(keys_, json_values, max_size=3) | json_values

known_refs = st.sampled_from(
    [ref(o) for o in OBJECTS] + [ref(PYTORCH, controller=False), ref(PYTORCH, uid="stale"), ref(FOREIGN),
                                 ref(UNKNOWN), {**ref(PYTORCH), "name": "absent"}])
random_refs = st.fixed_dictionaries({}, optional={
    "apiVersion": st.sampled_from(["v1", "batch/v1", "kubeflow.org/v1", "apps/v1"]) | json_values,
    "kind": st.sampled_from(["Pod", "Job", "PyTorchJob", "SparkApplication", "ReplicaSet"]) | json_values,
    "name": strings | json_values, "uid": strings | json_values, "controller": st.booleans() | json_values})
owner_refs = st.lists(known_refs | random_refs | json_values, max_size=3) | json_values

gates = st.lists(st.fixed_dictionaries({"name": st.sampled_from([GATE, "example.com/other"])}), max_size=2)
specs = st.fixed_dictionaries({"containers": st.just([{"name": "c", "image": "busybox"}])}, optional={
    "nodeName": strings | json_values,
    "schedulerName": st.sampled_from(["default-scheduler", "kubenexus-scheduler", "volcano", "my-sched"])
    | json_values,
    "schedulingGates": gates | json_values,
})
metadata = st.fixed_dictionaries({}, optional={
    "name": strings, "generateName": strings, "namespace": strings | json_values,
    "labels": maps, "annotations": maps, "ownerReferences": owner_refs})
pods = st.fixed_dictionaries({"apiVersion": st.just("v1"), "kind": st.just("Pod")}, optional={
    "metadata": metadata | json_values, "spec": specs | json_values})
# Pods that opt in explicitly, with awkward values in the gang keys: most reach the mutation.
gang_maps = st.fixed_dictionaries({}, optional={k: st.sampled_from(TRICKY) for k in (GROUP, MIN, SIGS_GROUP, SIGS_MIN)})
gang_metadata = st.fixed_dictionaries({"labels": gang_maps, "annotations": gang_maps},
                                      optional={"ownerReferences": st.lists(known_refs, max_size=2)})
gang_pods = st.fixed_dictionaries({"apiVersion": st.just("v1"), "kind": st.just("Pod"), "metadata": gang_metadata,
                                   "spec": specs})
any_pods = pods | gang_pods
usernames = st.sampled_from(["alice", CONTROLLER, ""]) | st.text(max_size=10)
REQUEST_FIELDS = ["uid", "kind", "resource", "operation", "namespace", "object", "oldObject", "subResource",
                  "userInfo", "name", "requestKind", "dryRun", "options"]


# --- checks -------------------------------------------------------------------------------


def post(webhook, endpoint, body: bytes):
    """POST and check the transport-level promises; the parsed response for a 200, else None."""
    status, data = webhook.request("POST", endpoint, body)  # a dropped connection raises here
    assert status in (200, 400), (status, data[:300])
    if status != 200:
        assert "error" in json.loads(data)
        return None
    sent = json.loads(body)
    review = json.loads(data)
    assert review["apiVersion"] == "admission.k8s.io/v1" and review["kind"] == "AdmissionReview"
    response = review["response"]
    assert response["uid"] == sent["request"]["uid"]
    assert isinstance(response["allowed"], bool)
    assert all(isinstance(w, str) for w in response.get("warnings", []))
    assert not [w for w in response.get("warnings", []) if w.startswith(INTERNAL_ERROR)], (sent, response)
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        assert isinstance(json.loads(base64.b64decode(response["patch"], validate=True)), list)
    if not response["allowed"]:
        assert isinstance(response["status"]["code"], int) and response["status"]["message"]
    return response


def passes_pod_rules(pod, namespace=NS) -> bool:
    """create_errors(pod, namespace) == [], for pods whose shape the rules can read at all (else the apiserver's
    schema validation rejects them before any webhook)."""
    try:
        return create_errors(pod, namespace) == []
    except (AttributeError, TypeError):
        return False


def request_for(pod, namespace=NS, **kwargs):
    """pod_request for any JSON value as the pod (pod_request reads the pod's metadata.name)."""
    request = pod_request({}, namespace, **kwargs)
    request["object"] = pod
    return request


def envelope(request):
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


def mutate(webhook, pod, namespace=NS):
    """/mutate a pod CREATE: the response and the pod after its patch."""
    response = post(webhook, "/mutate", envelope(request_for(pod, namespace)))
    if response is None:
        return None, pod
    if not response["allowed"]:  # only for product state admission does not write (gang/mutate.py forged_state)
        assert response["status"]["message"].startswith("metadata.annotations[scheduling.kubenexus.io/"), response
        assert "patch" not in response
        return response, pod
    if "patch" not in response:
        return response, pod
    return response, jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))


# --- properties ---------------------------------------------------------------------------


@FUZZ
@given(body=st.binary(max_size=400))
@example(body=b"[" * 100_000 + b"]" * 100_000)
@example(body=b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": '
         + b'{"a": ' * 50_000 + b"1" + b"}" * 50_001)
@example(body=b"\xff\xfe{")
def test_random_bytes(webhook, body):
    for endpoint in ("/mutate", "/validate"):
        post(webhook, endpoint, body)


@FUZZ
@given(value=json_values)
def test_random_json(webhook, value):
    for endpoint in ("/mutate", "/validate"):
        post(webhook, endpoint, json.dumps(value).encode())


@FUZZ
@given(uid=st.uuids().map(str), request_overrides=st.dictionaries(st.sampled_from(REQUEST_FIELDS), json_values),
       top_overrides=st.dictionaries(st.sampled_from(["apiVersion", "kind", "request"]), json_values, max_size=1),
       kind=st.sampled_from([("", "v1", "Pod"), ("kubeflow.org", "v1", "PyTorchJob"),
                             ("sparkoperator.k8s.io", "v1beta2", "SparkApplication"), ("apps", "v1", "Deployment")]),
       operation=st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"]))
def test_plausible_reviews_with_wrong_types(webhook, uid, request_overrides, top_overrides, kind, operation):
    group, version, name = kind
    request = pod_request({"metadata": {"name": "x"}, "spec": {}}, NS, operation=operation, old={"metadata": {}})
    request.update(uid=uid, kind={"group": group, "version": version, "kind": name})
    request.update(request_overrides)
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request, **top_overrides}
    for endpoint in ("/mutate", "/validate"):
        post(webhook, endpoint, json.dumps(review).encode())


def legacy_pod(min_available):
    """A pod opting in with the seed-era annotations only."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"annotations": {SIGS_GROUP: "g", SIGS_MIN: min_available}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def claiming_pod(owner_uid):
    """A pod of the opted-in PyTorchJob that claims an owner-uid (its own root's, or another gang's)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"ownerReferences": [ref(PYTORCH)],
                                                            "annotations": {OWNER_UID: owner_uid}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


@FUZZ
@example(pod=legacy_pod("1" * 70), namespace=NS)  # a valid annotation, but too long for the label it is copied to
@example(pod=claiming_pod("uid-pt"), namespace=NS)  # what admission writes itself: passes
@example(pod=claiming_pod("uid-out"), namespace=NS)  # another gang's: refused
@given(pod=any_pods, namespace=st.sampled_from([NS, NS, NS, "kube-system"]) | st.text(max_size=12))
def test_mutate_random_pods(webhook, pod, namespace):
    response, after = mutate(webhook, pod, namespace)
    event("patched" if after is not pod else "unchanged" if response else "400")
    if response is None or not passes_pod_rules(pod, namespace):
        return
    assert create_errors(after, namespace) == [], response
    if after is not pod:  # reinvocation (reinvocationPolicy: IfNeeded) must not change it again
        again, _ = mutate(webhook, after, namespace)
        assert "patch" not in again, (after, again)


@FUZZ
@example(pod=legacy_pod("05"))  # the label must not end up disagreeing with the annotation
@example(pod={"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "c", "image": "busybox"}]},
              "metadata": {"name": "g", "ownerReferences": {}}})  # not as an apiserver sends it: a 400, checked by post
@given(pod=any_pods)
def test_mutated_pods_pass_our_own_validation(webhook, pod):
    """What the mutating webhook writes, the validating webhook (which runs after it) accepts."""
    if not passes_pod_rules(pod):
        return
    before = post(webhook, "/validate", envelope(request_for(pod)))
    if before is None or not before["allowed"]:
        return
    response, after = mutate(webhook, pod)
    verdict = post(webhook, "/validate", envelope(request_for(after)))
    assert verdict["allowed"], (pod, after, verdict)


@FUZZ
@given(old=any_pods, new=any_pods, username=usernames, subresource=st.sampled_from([None, "status", "binding"]))
def test_validate_random_pod_updates(webhook, old, new, username, subresource):
    request = request_for(new, operation="UPDATE", old=old, username=username)
    if subresource:
        request["subResource"] = subresource
    post(webhook, "/validate", envelope(request))


@FUZZ
@given(annotations=st.dictionaries(st.sampled_from(["kubenexus.io/gang-scheduling", "kubenexus.io/min-available",
                                                    "kubenexus.io/group-name", "kubenexus.io/schedule-timeout-seconds",
                                                    "kubenexus.io/min-availabe"]) | keys_, strings | json_values),
       spec=json_values | st.fixed_dictionaries({"pytorchReplicaSpecs": json_values}),
       old=st.none() | json_values)
def test_validate_random_roots(webhook, annotations, spec, old):
    root = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "r", "annotations": annotations}, "spec": spec}
    request = pod_request(root, NS, operation="UPDATE" if old is not None else "CREATE")
    request.update(kind={"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"}, oldObject=old)
    post(webhook, "/validate", envelope(request))


def test_webhook_survived_the_fuzzing(webhook):
    assert webhook.process.poll() is None
    assert webhook.request("GET", "/healthz")[0] == 200
    assert webhook.request("GET", "/readyz")[0] == 200

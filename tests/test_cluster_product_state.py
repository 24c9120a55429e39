"""Only the product writes the product's state, and the failure policy per scope, end to end on the local cluster.

The real ``kubenexus webhook`` runs behind the webhook configurations of ``kubectl kustomize deploy/base`` (by URL:
the emulator does not route Services), so the shipped matchConditions, namespaceSelectors and failure policies
decide what reaches it. Users are separate identities (``LocalCluster.add_user``): ``alice`` (a user), an admin
the webhook's ``gateRemovers`` names next to the controller, and the gate controller's ServiceAccount, which
sends the patches built by the controller's own code (controller/release.py, controller/owners.py).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client import ApiException

from cluster.local import LocalCluster
from controller.owners import resolve
from controller.release import release_patch
from gang.config import Config
from gang.objects import MemorySource
from kubenexus.local_webhook import LocalWebhook
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
    UNRESOLVED,
)
from tests.support.deploy import register_shipped
from tests.support.kube import WEBHOOK_IDENTITY, Kube, pods_resource
from tests.support.roots import batch_job

pytestmark = pytest.mark.e2e

ALICE = "alice@example.com"
ADMIN = "ops-admin@example.com"
ENABLED = {OPT_IN: "enabled"}
Obj = dict[str, Any]


@dataclass
class Setup:
    cluster: LocalCluster
    admin: Kube  # the cluster's admin (kubernetes-admin), who creates the roots
    users: dict[str, client.CoreV1Api]  # alice, the gateRemovers admin, the controller
    hook: LocalWebhook
    configurations: list[Obj]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, tls: Any) -> Iterator[Setup]:
    workdir: Path = tmp_path_factory.mktemp("product-state")
    with LocalCluster(workdir=str(workdir / "cluster")) as cluster:
        hook = LocalWebhook(workdir, tls, cluster.add_user(WEBHOOK_IDENTITY), {"gateRemovers": [CONTROLLER, ADMIN]})
        try:
            hook.wait_ready()
            admin = Kube(config.new_client_from_config(cluster.kubeconfig))
            configurations = register_shipped(admin.api_client, hook.url, tls.ca_bundle_b64())
            users = {user: client.CoreV1Api(config.new_client_from_config(cluster.add_user(user)))
                     for user in (ALICE, ADMIN, CONTROLLER)}
            yield Setup(cluster, admin, users, hook, configurations)
        finally:
            hook.stop()


def refused(call: Any, *args: Any) -> dict[str, Any]:
    """The Status of a request the apiserver refused."""
    with pytest.raises(ApiException) as failed:
        call(*args)
    return {"code": failed.value.status, **json.loads(failed.value.body)}


def bare_pod(name: str, annotations: Obj | None = None, labels: Obj | None = None) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36",
                                     "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}}}]}}


def job_pod(job: Obj, index: int) -> Obj:
    """A pod as the Job controller creates it: owned by the Job."""
    name = job["metadata"]["name"]
    pod = bare_pod(f"{name}-{index}", labels={"batch.kubernetes.io/job-name": name})
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                           "uid": job["metadata"]["uid"], "controller": True,
                                           "blockOwnerDeletion": True}]
    return pod


def as_dict(core: client.CoreV1Api, obj: Any) -> Obj:
    return core.api_client.sanitize_for_serialization(obj)


def gated_member(setup: Setup, ns: str) -> Obj:
    """A member of an opted-in Job's gang, created through admission (by the Job controller's stand-in, alice)."""
    job = setup.admin.create(ns, batch_job(f"train-{uuid.uuid4().hex[:6]}", {OPT_IN: "true"}, parallelism=2,
                                           completions=2))
    pod = as_dict(setup.users[ALICE], setup.users[ALICE].create_namespaced_pod(ns, job_pod(job, 0)))
    assert [g["name"] for g in pod["spec"]["schedulingGates"]] == [GATE]
    assert pod["metadata"]["annotations"][OWNER_UID] == job["metadata"]["uid"]
    return pod


def annotate(user: client.CoreV1Api, pod: Obj, annotations: dict[str, str | None]) -> Any:
    return user.patch_namespaced_pod(pod["metadata"]["name"], pod["metadata"]["namespace"],
                                     {"metadata": {"annotations": annotations}})


def json_patch(user: client.CoreV1Api, pod: Obj, ops: list[Obj]) -> Obj:
    return as_dict(user, user.patch_namespaced_pod(pod["metadata"]["name"], pod["metadata"]["namespace"], ops))


# --- forged state is refused -------------------------------------------------------------------------------------


@pytest.mark.parametrize("labels", [ENABLED, {}], ids=["enabled", "unlabelled"])
@pytest.mark.parametrize("key, value", [(PLANNED_NODE, "node-1"), (RESERVED_NODES, '["node-1"]'),
                                        (OWNER_UID, "uid-of-a-gang"), (EXPECTED, '[{"role":"w","count":9}]'),
                                        (OWNER, "batch/v1/Job/other")])
def test_a_user_cannot_create_a_bare_pod_carrying_product_state(setup: Setup, labels: Obj, key: str,
                                                                value: str) -> None:
    """A bare pod (no owner, no gang labels) used to reach no webhook at all; the controller then held the planned
    node's room for it. Whatever the namespace's scope, it is refused, by the webhook that knows who writes it."""
    ns = setup.admin.namespace(labels)
    alice = setup.users[ALICE]
    status = refused(alice.create_namespaced_pod, ns, bare_pod("forged", {key: value}))
    assert status["code"] == 403, status
    scope = "-enabled" if labels else ""
    endpoint = "validate" if key in (PLANNED_NODE, RESERVED_NODES) else "mutate"
    assert status["message"].startswith(
        f'admission webhook "{endpoint}{scope}.kubenexus.io" denied the request: metadata.annotations[{key}]: '), status
    assert alice.list_namespaced_pod(ns).items == []


@pytest.mark.parametrize("key, value", [(EXPECTED, '[{"role":"worker","count":64,"requests":{"cpu":"32"}}]'),
                                        (RESERVED_NODES, '["node-9"]'), (UNRESOLVED, "decide again"),
                                        (PLANNED_NODE, "node-9")])
def test_a_user_cannot_edit_product_state_on_a_gated_member(setup: Setup, key: str, value: str) -> None:
    ns = setup.admin.namespace(ENABLED)
    member = gated_member(setup, ns)
    status = refused(annotate, setup.users[ALICE], member, {key: value})
    assert status["code"] == 403
    assert f"metadata.annotations[{key}]: cannot be added by {ALICE}" in status["message"], status
    status = refused(annotate, setup.users[ALICE], member, {OWNER_UID: "uid-of-another-gang"})
    assert "is immutable once set" in status["message"], status


# --- the controller's writes pass; an admin who may remove the gate is not the controller -------------------------


def test_the_controllers_release_passes_and_its_planned_node_is_its_own(setup: Setup) -> None:
    ns = setup.admin.namespace(ENABLED)
    member = gated_member(setup, ns)
    ops = release_patch(member, "node-1", ("node-2",))
    status = refused(json_patch, setup.users[ADMIN], member, ops)  # may remove the gate, may not write the plan
    assert status["code"] == 403, status
    assert f"metadata.annotations[{PLANNED_NODE}]: cannot be added by {ADMIN}" in status["message"], status
    released = json_patch(setup.users[CONTROLLER], member, ops)
    assert "schedulingGates" not in released["spec"] and released["metadata"]["annotations"][PLANNED_NODE] == "node-1"
    for edit in ({PLANNED_NODE: "node-9"}, {RESERVED_NODES: None}):
        status = refused(annotate, setup.users[ALICE], released, edit)
        assert status["code"] == 403 and f"by {ALICE}" in status["message"], status


def test_an_admin_in_gate_removers_may_remove_the_gate(setup: Setup) -> None:
    ns = setup.admin.namespace(ENABLED)
    member = gated_member(setup, ns)
    status = refused(json_patch, setup.users[ALICE], member, [{"op": "remove", "path": "/spec/schedulingGates"}])
    assert status["code"] == 403 and "only the KubeNexus gate controller may remove the gang gate" in status["message"]
    released = json_patch(setup.users[ADMIN], member, [{"op": "remove", "path": "/spec/schedulingGates"}])
    assert "schedulingGates" not in released["spec"]


def test_the_controllers_resolve_and_join_pass(setup: Setup) -> None:
    """resolve (controller/owners.py) on a pod admission left unresolved, and the same join on a running pod that
    escaped admission (its root opted in later): allowed to the controller, refused to the admin."""
    ns = setup.admin.namespace()
    job = setup.admin.create(ns, batch_job("etl", {}, parallelism=2, completions=2))  # not opted in yet
    escaped = as_dict(setup.users[ALICE], setup.users[ALICE].create_namespaced_pod(ns, job_pod(job, 0)))
    assert not escaped["spec"].get("schedulingGates") and GROUP not in escaped["metadata"]["labels"]
    # as admission stores a pod whose owner read failed (the emulator cannot fail a read): stored directly
    unresolved = job_pod(job, 1)
    unresolved["metadata"]["annotations"] = {UNRESOLVED: "GET jobs/etl: HTTP 503"}
    unresolved["spec"]["schedulingGates"] = [{"name": GATE}]
    unresolved = setup.cluster.store.create(pods_resource(setup.cluster), unresolved, ns)
    job = setup.admin.api_client.sanitize_for_serialization(setup.admin.batch.patch_namespaced_job(
        "etl", ns, {"metadata": {"annotations": {OPT_IN: "true"}}}))
    namespace = setup.admin.api_client.sanitize_for_serialization(setup.admin.core.read_namespace(ns))
    source = MemorySource([job, namespace])
    resolution = resolve(unresolved, source, Config())
    assert resolution.action == "join"
    assert refused(json_patch, setup.users[ADMIN], unresolved, resolution.patch)["code"] == 403
    joined = json_patch(setup.users[CONTROLLER], unresolved, resolution.patch)
    assert joined["metadata"]["annotations"][OWNER_UID] == job["metadata"]["uid"]
    assert UNRESOLVED not in joined["metadata"]["annotations"] and joined["metadata"]["labels"][GROUP] == "etl"
    # the running escaped pod: the same labels and owner annotations, no gate (a gate cannot be added)
    join = [{"op": "add", "path": "/metadata/labels/" + key.replace("/", "~1"), "value": value}
            for key, value in ((GROUP, "etl"), (MIN, "2"))]
    join += [{"op": "add", "path": "/metadata/annotations", "value": {
        OWNER: joined["metadata"]["annotations"][OWNER], OWNER_UID: job["metadata"]["uid"]}}]
    status = refused(json_patch, setup.users[ADMIN], escaped, join)
    assert status["code"] == 403 and f"metadata.annotations[{OWNER}]: cannot be added by {ADMIN}" in status["message"]
    assert json_patch(setup.users[CONTROLLER], escaped, join)["metadata"]["labels"][GROUP] == "etl"


# --- failure policy per scope -----------------------------------------------------------------------------------


def test_while_the_webhook_is_down_enabled_namespaces_refuse_and_others_admit(setup: Setup) -> None:
    """Fail where the namespace is labelled enabled: a gang pod's create is refused (its operator retries) rather
    than admitted ungated. Ignore elsewhere: admitted unchanged. Pods the conditions do not select never wait."""
    enabled, unlabelled = setup.admin.namespace(ENABLED), setup.admin.namespace()
    jobs = {ns: setup.admin.create(ns, batch_job("down", {OPT_IN: "true"}, parallelism=2, completions=2))
            for ns in (enabled, unlabelled)}
    admission = client.AdmissionregistrationV1Api(setup.admin.api_client)
    dead = "https://127.0.0.1:9"  # nothing listens: every call fails
    paths = {}
    for obj in setup.configurations:
        kind = obj["kind"]
        read = (admission.read_mutating_webhook_configuration if kind.startswith("Mutating")
                else admission.read_validating_webhook_configuration)
        stored = setup.admin.api_client.sanitize_for_serialization(read(obj["metadata"]["name"]))
        paths[kind] = [entry["clientConfig"]["url"] for entry in stored["webhooks"]]
        ops = [{"op": "replace", "path": f"/webhooks/{i}/clientConfig/url", "value": dead + "/x"}
               for i in range(len(stored["webhooks"]))]
        (admission.patch_mutating_webhook_configuration if kind.startswith("Mutating")
         else admission.patch_validating_webhook_configuration)(obj["metadata"]["name"], ops)
    try:
        alice = setup.users[ALICE]
        status = refused(alice.create_namespaced_pod, enabled, job_pod(jobs[enabled], 0))
        assert status["code"] == 500 and 'failed calling webhook "mutate-enabled.kubenexus.io"' in status["message"]
        admitted = alice.create_namespaced_pod(unlabelled, job_pod(jobs[unlabelled], 0))
        assert not admitted.spec.scheduling_gates, "Ignore: admitted unchanged"
        assert alice.create_namespaced_pod(enabled, bare_pod("plain")).metadata.name == "plain"
    finally:
        for obj in setup.configurations:
            kind = obj["kind"]
            ops = [{"op": "replace", "path": f"/webhooks/{i}/clientConfig/url", "value": url}
                   for i, url in enumerate(paths[kind])]
            (admission.patch_mutating_webhook_configuration if kind.startswith("Mutating")
             else admission.patch_validating_webhook_configuration)(obj["metadata"]["name"], ops)
    assert setup.users[ALICE].create_namespaced_pod(enabled, job_pod(jobs[enabled], 1)).spec.scheduling_gates

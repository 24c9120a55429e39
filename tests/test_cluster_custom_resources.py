"""Custom resources on the local cluster: the ``status`` subresource, the schema, garbage collection by owner
reference, and a CRD's deletion.

The PodGroup CRD of deploy/base (``status`` subresource) and the SparkApplication CRD the operators install, created
through the API. Expectations are the apiextensions-apiserver's custom resource strategies
(``customResourceStrategy``, ``statusStrategy``: create cannot set status; a write of the main resource keeps the
stored status, one of ``/status`` everything but the status; ``metadata.generation`` counts changes of anything
but metadata and, with the subresource, status) and kube-controller-manager's garbage collector (a dependent whose
owners are all gone is deleted; foreground and orphan deletion). A write that changes nothing is no write: the
resourceVersion stays (etcd3's GuaranteedUpdate). Fields the schema does not specify are pruned, and what it
refuses is 422 Invalid (cluster/validation/schema.py); a CRD's deletion deletes its objects first
(cluster/crd_finalizer.py).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from cluster.crds import crd_manifests
from cluster.local import LocalCluster
from tests.support.polling import stays, wait_for

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
PG = ("scheduling.kubenexus.io", "v1alpha1", "podgroups")
SPARK = ("sparkoperator.k8s.io", "v1beta2", "sparkapplications")
MERGE = "application/merge-patch+json"


@pytest.fixture(scope="module")
def api() -> Iterator[client.ApiClient]:
    with LocalCluster() as local:
        api_client = config.new_client_from_config(local.kubeconfig)
        extensions = client.ApiextensionsV1Api(api_client)
        spark = next(c for c in crd_manifests() if c["spec"]["names"]["kind"] == "SparkApplication")
        for crd in (yaml.safe_load((ROOT / "deploy" / "base" / "podgroup-crd.yaml").read_text()), spark):
            extensions.create_custom_resource_definition(crd)
            name = crd["metadata"]["name"]
            wait_for(lambda name=name: established(extensions, name), what=f"{name} Established")
        yield api_client
        api_client.close()


def established(extensions: client.ApiextensionsV1Api, name: str) -> bool:
    conditions = extensions.read_custom_resource_definition(name).status.conditions or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


@pytest.fixture
def ns(api: client.ApiClient) -> str:
    name = f"cr-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    return name


@pytest.fixture
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def rv(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


def podgroup(name: str = "gang", owner: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                    "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                    "controller": True, "blockOwnerDeletion": True}]
    fields = {"minMember": 3, **spec}
    return {"apiVersion": "scheduling.kubenexus.io/v1alpha1", "kind": "PodGroup", "metadata": meta,
            "spec": {k: v for k, v in fields.items() if v is not None}}


# --- the status subresource -------------------------------------------------------------------------------------


def test_create_cannot_set_status(custom: client.CustomObjectsApi, ns: str) -> None:
    created = custom.create_namespaced_custom_object(*PG[:2], ns, PG[2], {**podgroup(), "status": {"phase": "Running"}})
    assert "status" not in created and created["metadata"]["generation"] == 1


def test_a_status_write_through_the_main_resource_is_ignored(custom: client.CustomObjectsApi, ns: str) -> None:
    created = custom.create_namespaced_custom_object(*PG[:2], ns, PG[2], podgroup())
    ignored = custom.patch_namespaced_custom_object(*PG[:2], ns, PG[2], "gang", {"status": {"phase": "Running"}},
                                                    _content_type=MERGE)
    assert "status" not in ignored and rv(ignored) == rv(created) and ignored["metadata"]["generation"] == 1

    both = custom.patch_namespaced_custom_object(*PG[:2], ns, PG[2], "gang", {
        "spec": {"minMember": 5}, "status": {"phase": "Running"}}, _content_type=MERGE)
    assert both["spec"]["minMember"] == 5 and "status" not in both
    assert both["metadata"]["generation"] == 2 and rv(both) > rv(created)

    replaced = custom.replace_namespaced_custom_object(*PG[:2], ns, PG[2], "gang", {
        **both, "status": {"phase": "Failed"}, "metadata": {**both["metadata"], "labels": {"a": "b"}}})
    assert "status" not in replaced and replaced["metadata"]["labels"] == {"a": "b"}
    assert replaced["metadata"]["generation"] == 2 and rv(replaced) > rv(both)


def test_a_spec_write_through_status_is_ignored(custom: client.CustomObjectsApi, ns: str) -> None:
    created = custom.create_namespaced_custom_object(*PG[:2], ns, PG[2], podgroup())
    written = custom.patch_namespaced_custom_object_status(*PG[:2], ns, PG[2], "gang", {
        "spec": {"minMember": 9}, "metadata": {"labels": {"x": "y"}},
        "status": {"phase": "Pending", "present": 2, "waitingFor": "1 member"}}, _content_type=MERGE)
    assert written["status"] == {"phase": "Pending", "present": 2, "waitingFor": "1 member"}
    assert written["spec"] == {"minMember": 3} and "labels" not in written["metadata"]
    assert written["metadata"]["generation"] == 1 and rv(written) > rv(created)
    assert custom.get_namespaced_custom_object(*PG[:2], ns, PG[2], "gang")["status"]["present"] == 2

    same = custom.patch_namespaced_custom_object_status(*PG[:2], ns, PG[2], "gang", {"status": {"present": 2}},
                                                        _content_type=MERGE)
    assert rv(same) == rv(written)  # nothing changed: nothing written

    # A PUT of /status without a status removes it (statusStrategy keeps only the request's status).
    current = custom.get_namespaced_custom_object(*PG[:2], ns, PG[2], "gang")
    cleared = custom.replace_namespaced_custom_object_status(*PG[:2], ns, PG[2], "gang",
                                                             {k: v for k, v in current.items() if k != "status"})
    assert "status" not in cleared and cleared["metadata"]["generation"] == 1


def test_status_writes_are_resource_version_checked(custom: client.CustomObjectsApi, ns: str) -> None:
    created = custom.create_namespaced_custom_object(*PG[:2], ns, PG[2], podgroup())
    custom.patch_namespaced_custom_object_status(*PG[:2], ns, PG[2], "gang", {"status": {"phase": "Pending"}},
                                                 _content_type=MERGE)
    with pytest.raises(client.ApiException) as info:
        custom.replace_namespaced_custom_object_status(*PG[:2], ns, PG[2], "gang",
                                                       {**created, "status": {"phase": "Running"}})
    assert info.value.status == 409


def test_without_a_status_subresource_status_is_part_of_the_object(custom: client.CustomObjectsApi, api:
                                                                    client.ApiClient) -> None:
    group = f"{uuid.uuid4().hex[:8]}.example.com"
    client.ApiextensionsV1Api(api).create_custom_resource_definition({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {"group": group, "scope": "Cluster", "names": {"plural": "widgets", "singular": "widget",
                                                               "kind": "Widget"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}})
    wait_for(lambda: established(client.ApiextensionsV1Api(api), f"widgets.{group}"), what="Established")
    created = custom.create_cluster_custom_object(group, "v1", "widgets", {
        "apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w"}, "status": {"ok": False}})
    assert created["status"] == {"ok": False}
    patched = custom.patch_cluster_custom_object(group, "v1", "widgets", "w", {"status": {"ok": True}},
                                                 _content_type=MERGE)
    assert patched["status"] == {"ok": True} and patched["metadata"]["generation"] == 2


# --- garbage collection -----------------------------------------------------------------------------------------


def spark_application(custom: client.CustomObjectsApi, ns: str, name: str = "pi") -> dict[str, Any]:
    return custom.create_namespaced_custom_object(*SPARK[:2], ns, SPARK[2], {
        "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication", "metadata": {"name": name},
        "spec": {"type": "Scala", "mode": "cluster"}})


def gone(custom: client.CustomObjectsApi, ns: str, name: str) -> bool:
    try:
        custom.get_namespaced_custom_object(*PG[:2], ns, PG[2], name)
    except client.ApiException as exc:
        return exc.status == 404
    return False


def test_a_podgroup_goes_with_its_spark_application(custom: client.CustomObjectsApi, ns: str) -> None:
    app = spark_application(custom, ns)
    custom.create_namespaced_custom_object(*PG[:2], ns, PG[2], podgroup("pi", owner=app))
    custom.create_namespaced_custom_object(*PG[:2], ns, PG[2], podgroup("unowned"))
    stays(lambda: not gone(custom, ns, "pi"), "a PodGroup whose owner exists is kept")
    custom.delete_namespaced_custom_object(*SPARK[:2], ns, SPARK[2], "pi")
    wait_for(lambda: gone(custom, ns, "pi"), what="the PodGroup collected with its SparkApplication")
    assert not gone(custom, ns, "unowned")


def test_a_podgroup_of_a_replaced_owner_is_collected(custom: client.CustomObjectsApi, ns: str) -> None:
    """Owner references are by uid: a new SparkApplication of the same name does not own the old PodGroup."""
    app = spark_application(custom, ns)
    custom.delete_namespaced_custom_object(*SPARK[:2], ns, SPARK[2], "pi")
    spark_application(custom, ns)
    custom.create_namespaced_custom_object(*PG[:2], ns, PG[2], podgroup("pi", owner=app))
    wait_for(lambda: gone(custom, ns, "pi"), what="the PodGroup of the former SparkApplication collected")


def test_foreground_deletion_waits_for_the_podgroup(custom: client.CustomObjectsApi, ns: str) -> None:
    app = spark_application(custom, ns)
    custom.create_namespaced_custom_object(*PG[:2], ns, PG[2], {
        **podgroup("pi", owner=app), "metadata": {**podgroup("pi", owner=app)["metadata"],
                                                  "finalizers": ["example.com/hold"]}})
    custom.delete_namespaced_custom_object(*SPARK[:2], ns, SPARK[2], "pi", propagation_policy="Foreground")
    held = wait_for(lambda: custom.get_namespaced_custom_object(*PG[:2], ns, PG[2], "pi")["metadata"].get(
        "deletionTimestamp"), what="the PodGroup being deleted")
    assert held
    owner = custom.get_namespaced_custom_object(*SPARK[:2], ns, SPARK[2], "pi")
    assert owner["metadata"]["deletionTimestamp"] and "foregroundDeletion" in owner["metadata"]["finalizers"]
    custom.patch_namespaced_custom_object(*PG[:2], ns, PG[2], "pi", {"metadata": {"finalizers": None}},
                                          _content_type=MERGE)
    wait_for(lambda: gone(custom, ns, "pi"), what="the PodGroup gone")

    def owner_gone() -> bool:
        try:
            custom.get_namespaced_custom_object(*SPARK[:2], ns, SPARK[2], "pi")
        except client.ApiException as exc:
            return exc.status == 404
        return False

    wait_for(owner_gone, what="the SparkApplication gone once its blocking dependent is")


def test_orphan_deletion_keeps_the_podgroup(custom: client.CustomObjectsApi, ns: str) -> None:
    app = spark_application(custom, ns)
    custom.create_namespaced_custom_object(*PG[:2], ns, PG[2], podgroup("pi", owner=app))
    custom.delete_namespaced_custom_object(*SPARK[:2], ns, SPARK[2], "pi", propagation_policy="Orphan")
    wait_for(lambda: not custom.get_namespaced_custom_object(*PG[:2], ns, PG[2], "pi")["metadata"].get(
        "ownerReferences"), what="the owner reference removed")
    stays(lambda: not gone(custom, ns, "pi"), "an orphaned PodGroup is kept")


# --- the schema: pruning and validation -------------------------------------------------------------------------


def test_unknown_fields_are_pruned(custom: client.CustomObjectsApi, ns: str) -> None:
    created = custom.create_namespaced_custom_object(*PG[:2], ns, PG[2], {
        **podgroup(extra="dropped"), "unknown": {"a": 1}})
    assert created["spec"] == {"minMember": 3} and "unknown" not in created
    written = custom.patch_namespaced_custom_object_status(*PG[:2], ns, PG[2], "gang", {"status": {
        "phase": "Pending", "present": 2, "notInTheSchema": 7, "shadowPlan": {"nodes": ["a"], "free": {"x": 1}}}},
        _content_type=MERGE)
    assert written["status"] == {"phase": "Pending", "present": 2, "shadowPlan": {"nodes": ["a"], "free": {"x": 1}}}


@pytest.mark.parametrize(("status", "error"), [
    ({"phase": "Queued"}, 'status.phase: Unsupported value: "Queued": supported values: "Pending", "Waiting", '
                          '"Releasing", "Running", "Succeeded", "Failed", "NeverFits", "NotCertifiable"'),
    ({"present": "2"}, 'status.present: Invalid value: "2": status.present in body must be of type integer: '
                       '"string"'),
    ({"releasedAt": "yesterday"}, 'status.releasedAt: Invalid value: "yesterday": status.releasedAt in body must '
                                  'be of type date-time: "yesterday"'),
    ({"conditions": [{"type": "Released", "status": "True"}]}, "status.conditions[0].lastTransitionTime: Required "
                                                                "value"),
    ({"conditions": [{"type": "Released", "status": "True", "reason": "not a reason", "message": "m",
                      "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
     "status.conditions[0].reason: Invalid value: \"not a reason\": status.conditions[0].reason in body should "
     "match '^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$'"),
    ({"conditions": [{"type": "Ready", "status": "True", "reason": "R", "message": "m",
                      "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
     'status.conditions[0].type: Unsupported value: "Ready"'),
])
def test_a_status_the_schema_refuses(custom: client.CustomObjectsApi, ns: str, status: dict[str, Any],
                                     error: str) -> None:
    custom.create_namespaced_custom_object(*PG[:2], ns, PG[2], podgroup())
    with pytest.raises(client.ApiException) as info:
        custom.patch_namespaced_custom_object_status(*PG[:2], ns, PG[2], "gang", {"status": status},
                                                     _content_type=MERGE)
    message = json.loads(info.value.body)["message"]
    assert info.value.status == 422 and message.startswith('PodGroup.scheduling.kubenexus.io "gang" is invalid: ')
    assert error in message


def test_a_spec_the_schema_refuses(custom: client.CustomObjectsApi, ns: str) -> None:
    for spec, error in (({"minMember": 0}, "spec.minMember: Invalid value: 0: spec.minMember in body should be "
                                           "greater than or equal to 1"),
                        ({"queue": "Team A"}, 'spec.queue: Invalid value: "Team A": spec.queue in body should '
                                              "match"),
                        ({"minMember": None}, "spec.minMember: Required value")):
        body = podgroup(**spec)
        with pytest.raises(client.ApiException) as info:
            custom.create_namespaced_custom_object(*PG[:2], ns, PG[2], body)
        assert info.value.status == 422 and error in json.loads(info.value.body)["message"], spec


# --- deleting the CRD -------------------------------------------------------------------------------------------


def test_deleting_a_crd_deletes_its_objects(api: client.ApiClient, custom: client.CustomObjectsApi, ns: str) -> None:
    extensions = client.ApiextensionsV1Api(api)
    group = f"{uuid.uuid4().hex[:8]}.example.com"
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": f"gizmos.{group}"},
           "spec": {"group": group, "scope": "Namespaced", "names": {"plural": "gizmos", "singular": "gizmo",
                                                                    "kind": "Gizmo"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                        "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}
    extensions.create_custom_resource_definition(crd)
    wait_for(lambda: established(extensions, f"gizmos.{group}"), what="Established")
    for name, finalizers in (("free", []), ("held", ["example.com/hold"])):
        custom.create_namespaced_custom_object(group, "v1", ns, "gizmos", {
            "apiVersion": f"{group}/v1", "kind": "Gizmo", "metadata": {"name": name, "finalizers": finalizers}})

    extensions.delete_custom_resource_definition(f"gizmos.{group}")
    marked = extensions.read_custom_resource_definition(f"gizmos.{group}")
    assert marked.metadata.deletion_timestamp and "customresourcecleanup.apiextensions.k8s.io" in \
        marked.metadata.finalizers
    assert [(c.reason, c.status) for c in marked.status.conditions if c.type == "Terminating"] == [
        ("InstanceDeletionPending", "True")]
    with pytest.raises(client.ApiException) as info:
        custom.create_namespaced_custom_object(group, "v1", ns, "gizmos", {
            "apiVersion": f"{group}/v1", "kind": "Gizmo", "metadata": {"name": "late"}})
    assert info.value.status == 405 and "terminating" in json.loads(info.value.body)["message"]

    def names() -> list[str]:
        return [o["metadata"]["name"] for o in custom.list_namespaced_custom_object(group, "v1", ns, "gizmos")["items"]]

    wait_for(lambda: names() == ["held"], what="the free Gizmo deleted, the held one marked")
    stays(lambda: names() == ["held"], "a Gizmo's finalizer holds it, and so the CRD")
    custom.patch_namespaced_custom_object(group, "v1", ns, "gizmos", "held", {"metadata": {"finalizers": None}},
                                          _content_type=MERGE)

    def crd_gone() -> bool:
        try:
            extensions.read_custom_resource_definition(f"gizmos.{group}")
        except client.ApiException as exc:
            return exc.status == 404
        return False

    wait_for(crd_gone, what="the CRD removed once empty")
    extensions.create_custom_resource_definition(crd)  # created again: nothing of the former objects comes back
    wait_for(lambda: established(extensions, f"gizmos.{group}"), what="Established again")
    assert names() == []

"""PATCH semantics against the Kubernetes documentation.

Expected objects are written by hand from "Update API Objects in Place Using kubectl patch" (kubernetes.io
tasks), the strategic-merge-patch and preserve-order design docs (kubernetes/community), RFC 6902 and
RFC 7386, and the apiserver's documented status codes, never from this implementation's output.
List order follows the documented rule: patch items keep the patch order, items only on the server keep
theirs, and a new item goes ahead of server-only items (the task page shows the added container first).
"""

from __future__ import annotations

import copy
import json

import pytest

from cluster.patches import PatchError, apply_patch, server_side_apply, strategic_merge

pytestmark = pytest.mark.unit

SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def pod(**spec: object) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web", "tier": "fe"}},
        "spec": {"containers": [{"name": "main", "image": "nginx"}], **spec},
    }


def patch(obj: dict, content_type: str, body: object) -> dict:
    return apply_patch(obj, content_type, json.dumps(body).encode())


def error(obj: dict, content_type: str, body: bytes) -> PatchError:
    with pytest.raises(PatchError) as info:
        apply_patch(obj, content_type, body)
    return info.value


# --- JSON patch (RFC 6902) --------------------------------------------------------------------------------


def test_json_patch_add_replace_remove_test() -> None:
    ops = [
        {"op": "test", "path": "/spec/containers/0/image", "value": "nginx"},
        {"op": "replace", "path": "/spec/containers/0/image", "value": "nginx:1.27"},
        {"op": "add", "path": "/metadata/labels/gang", "value": "g1"},
        {"op": "remove", "path": "/metadata/labels/tier"},
        {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": "kubenexus.io/gang"}]},
    ]
    out = patch(pod(), JSON_PATCH, ops)
    assert out["spec"]["containers"] == [{"name": "main", "image": "nginx:1.27"}]
    assert out["metadata"]["labels"] == {"app": "web", "gang": "g1"}
    assert out["spec"]["schedulingGates"] == [{"name": "kubenexus.io/gang"}]


def test_json_patch_remove_array_element_by_index() -> None:
    obj = pod(schedulingGates=[{"name": "a"}, {"name": "b"}])
    out = patch(obj, JSON_PATCH, [{"op": "remove", "path": "/spec/schedulingGates/0"}])
    assert out["spec"]["schedulingGates"] == [{"name": "b"}]


def test_json_patch_failing_test_is_422_and_nothing_applies() -> None:
    obj = pod()
    ops = [
        {"op": "replace", "path": "/metadata/labels/app", "value": "x"},
        {"op": "test", "path": "/spec/nodeName", "value": "n1"},
    ]
    err = error(obj, JSON_PATCH, json.dumps(ops).encode())
    assert (err.status, err.reason) == (422, "Invalid")
    assert obj == pod()


@pytest.mark.parametrize(
    "op",
    [
        {"op": "remove", "path": "/metadata/annotations"},
        {"op": "replace", "path": "/spec/nodeName", "value": "n1"},
        {"op": "add", "path": "/spec/missing/child", "value": 1},
        {"op": "remove", "path": "/spec/containers/5"},
    ],
)
def test_json_patch_path_that_does_not_exist_is_422(op: dict) -> None:
    err = error(pod(), JSON_PATCH, json.dumps([op]).encode())
    assert (err.status, err.reason) == (422, "Invalid")


@pytest.mark.parametrize("body", [b"not json", b'{"op": "add"}', b'["add"]', b'[{"op": 1, "path": "/a"}]'])
def test_malformed_json_patch_document_is_400(body: bytes) -> None:
    err = error(pod(), JSON_PATCH, body)
    assert (err.status, err.reason) == (400, "BadRequest")


# --- JSON merge patch (RFC 7386) ----------------------------------------------------------------------------


def test_merge_patch_null_deletes_and_objects_merge() -> None:
    out = patch(pod(), MERGE, {"metadata": {"labels": {"tier": None, "gang": "g1"}, "annotations": {"a": "b"}}})
    assert out["metadata"] == {
        "name": "p",
        "namespace": "ns",
        "labels": {"app": "web", "gang": "g1"},
        "annotations": {"a": "b"},
    }


def test_merge_patch_replaces_arrays() -> None:
    # The task page: a JSON merge patch on containers leaves only the patch's container.
    obj = pod()
    obj["spec"]["containers"].append({"name": "sidecar", "image": "busybox"})
    out = patch(obj, MERGE, {"spec": {"containers": [{"name": "patch-demo-ctr-3", "image": "node-hello:1.0"}]}})
    assert out["spec"]["containers"] == [{"name": "patch-demo-ctr-3", "image": "node-hello:1.0"}]


def test_merge_patch_nested_nulls_in_new_object_are_dropped() -> None:
    out = patch(pod(), MERGE, {"spec": {"nodeSelector": {"zone": "a", "gone": None}}})
    assert out["spec"]["nodeSelector"] == {"zone": "a"}


@pytest.mark.parametrize("body", [b"[1]", b'"x"', b"null", b"{"])
def test_merge_patch_must_be_a_json_object(body: bytes) -> None:
    assert error(pod(), MERGE, body).status == 400


# --- media types ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("content_type", ["application/apply-patch+yaml", "application/json", "text/plain", ""])
def test_unsupported_media_type_is_415(content_type: str) -> None:
    err = error(pod(), content_type, b"{}")
    assert (err.status, err.reason) == (415, "UnsupportedMediaType")
    assert str(err) == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json"
    )


def test_media_type_parameters_are_ignored() -> None:
    out = patch(pod(), MERGE + "; charset=utf-8", {"metadata": {"labels": {"x": "1"}}})
    assert out["metadata"]["labels"]["x"] == "1"


def test_custom_resource_rejects_strategic_merge_with_415() -> None:
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"items": [1]}}
    err = error(widget, SMP, b'{"spec": {"size": 1}}')
    assert (err.status, err.reason) == (415, "UnsupportedMediaType")
    assert str(err).endswith("accepted media types include: application/json-patch+json, application/merge-patch+json")
    assert patch(widget, MERGE, {"spec": {"size": 1}})["spec"] == {"items": [1], "size": 1}
    with pytest.raises(PatchError) as info:
        strategic_merge(widget, {"spec": {}}, "Widget")
    assert info.value.status == 415


def test_custom_resource_reusing_a_builtin_kind_name_is_still_custom() -> None:
    fake = {"apiVersion": "example.com/v1", "kind": "Pod", "metadata": {"name": "x"}}
    assert error(fake, SMP, b"{}").status == 415


def test_non_json_strategic_patch_is_400() -> None:
    assert error(pod(), SMP, b"spec: {}").status == 400
    assert error(pod(), SMP, b"[]").status == 400


# --- strategic merge patch ------------------------------------------------------------------------------------


def test_delete_one_scheduling_gate_keeps_the_others() -> None:
    obj = pod(schedulingGates=[{"name": "a.io/one"}, {"name": "kubenexus.io/gang"}, {"name": "b.io/two"}])
    before = copy.deepcopy(obj)
    out = patch(obj, SMP, {"spec": {"schedulingGates": [{"$patch": "delete", "name": "kubenexus.io/gang"}]}})
    assert out["spec"]["schedulingGates"] == [{"name": "a.io/one"}, {"name": "b.io/two"}]
    assert obj == before  # input untouched


def test_adding_a_gate_merges_by_name_and_new_item_goes_first() -> None:
    obj = pod(schedulingGates=[{"name": "a.io/one"}, {"name": "b.io/two"}])
    # strategicpatch.mergeSortedSlice: patch items [gang, two] in patch order, server-only [one]; a server-only
    # item is emitted first only when it precedes the next patch item in the live list, and "gang" is not in
    # the live list at all, so it leads: [gang, one, two].
    out = patch(obj, SMP, {"spec": {"schedulingGates": [{"name": "kubenexus.io/gang"}, {"name": "b.io/two"}]}})
    assert out["spec"]["schedulingGates"] == [{"name": "kubenexus.io/gang"}, {"name": "a.io/one"}, {"name": "b.io/two"}]
    out = patch(obj, SMP, {"spec": {"schedulingGates": [{"name": "b.io/two"}, {"name": "kubenexus.io/gang"}]}})
    assert out["spec"]["schedulingGates"] == [{"name": "a.io/one"}, {"name": "b.io/two"}, {"name": "kubenexus.io/gang"}]
    out = patch(obj, SMP, {"spec": {"schedulingGates": [{"name": "kubenexus.io/gang"}]}})
    assert out["spec"]["schedulingGates"] == [{"name": "kubenexus.io/gang"}, {"name": "a.io/one"}, {"name": "b.io/two"}]


def test_deleting_a_gate_that_is_not_there_leaves_no_directive_behind() -> None:
    out = patch(pod(), SMP, {"spec": {"schedulingGates": [{"$patch": "delete", "name": "x"}]}})
    assert out["spec"].get("schedulingGates") in (None, [])


def test_task_page_adding_a_container_keeps_the_existing_one() -> None:
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "patch-demo"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": "patch-demo-ctr", "image": "nginx"}],
                    "tolerations": [{"effect": "NoSchedule", "key": "dedicated", "value": "test-team"}],
                }
            }
        },
    }
    out = patch(
        sts, SMP, {"spec": {"template": {"spec": {"containers": [{"name": "patch-demo-ctr-2", "image": "redis"}]}}}}
    )
    assert out["spec"]["template"]["spec"]["containers"] == [
        {"name": "patch-demo-ctr-2", "image": "redis"},
        {"name": "patch-demo-ctr", "image": "nginx"},
    ]
    # Tolerations have no patch strategy: the list is replaced.
    out = patch(
        sts,
        SMP,
        {
            "spec": {
                "template": {"spec": {"tolerations": [{"effect": "NoSchedule", "key": "disktype", "value": "ssd"}]}}
            }
        },
    )
    assert out["spec"]["template"]["spec"]["tolerations"] == [
        {"effect": "NoSchedule", "key": "disktype", "value": "ssd"}
    ]
    assert out["spec"]["template"]["spec"]["containers"] == [{"name": "patch-demo-ctr", "image": "nginx"}]


def test_updating_one_container_image_by_name_keeps_the_others() -> None:
    obj = pod()
    obj["spec"]["containers"] = [
        {"name": "init-like", "image": "busybox", "args": ["a"]},
        {"name": "main", "image": "nginx", "args": ["serve"]},
        {"name": "sidecar", "image": "envoy"},
    ]
    out = patch(obj, SMP, {"spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}})
    assert out["spec"]["containers"] == [
        {"name": "init-like", "image": "busybox", "args": ["a"]},
        {"name": "main", "image": "nginx:1.27", "args": ["serve"]},
        {"name": "sidecar", "image": "envoy"},
    ]


def test_container_env_ports_mounts_merge_by_key_while_args_and_command_replace() -> None:
    obj = pod()
    obj["spec"]["containers"] = [
        {
            "name": "main",
            "image": "nginx",
            "command": ["nginx", "-g"],
            "args": ["daemon off;"],
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
            "ports": [{"containerPort": 80, "protocol": "TCP"}],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        }
    ]
    body = {
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "command": ["sh"],
                    "args": ["-c", "true"],
                    "env": [{"name": "B", "value": "two"}],
                    "ports": [{"containerPort": 80, "name": "http"}],
                    "volumeMounts": [{"name": "cache", "mountPath": "/data", "readOnly": True}],
                }
            ]
        }
    }
    (c,) = patch(obj, SMP, body)["spec"]["containers"]
    assert c["command"] == ["sh"]
    assert c["args"] == ["-c", "true"]
    assert c["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "two"}]
    assert c["ports"] == [{"containerPort": 80, "protocol": "TCP", "name": "http"}]
    assert c["volumeMounts"] == [{"name": "cache", "mountPath": "/data", "readOnly": True}]


def test_retain_keys_clears_fields_not_listed() -> None:
    # The task page's retainKeys example, on a StatefulSet's update strategy.
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "s"},
        "spec": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}},
    }
    out = patch(sts, SMP, {"spec": {"updateStrategy": {"$retainKeys": ["type"], "type": "OnDelete"}}})
    assert out["spec"]["updateStrategy"] == {"type": "OnDelete"}


def test_retain_keys_on_a_volume_source_union() -> None:
    obj = pod(volumes=[{"name": "data", "emptyDir": {}}, {"name": "other", "emptyDir": {}}])
    body = {"spec": {"volumes": [{"name": "data", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/srv"}}]}}
    out = patch(obj, SMP, body)
    assert out["spec"]["volumes"] == [{"name": "data", "hostPath": {"path": "/srv"}}, {"name": "other", "emptyDir": {}}]


def test_retain_keys_must_list_every_field_the_patch_sets() -> None:
    body = json.dumps({"spec": {"nodeSelector": {"$retainKeys": ["a"], "b": "x"}}}).encode()
    obj = pod(nodeSelector={"a": "1"})
    assert error(obj, SMP, body).status == 400


def test_delete_from_primitive_list_finalizers() -> None:
    obj = pod()
    obj["metadata"]["finalizers"] = ["a", "b", "c"]
    out = patch(obj, SMP, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["b", "c"]}})
    assert out["metadata"]["finalizers"] == ["a"]


def test_finalizers_merge_as_a_set() -> None:
    obj = pod()
    obj["metadata"]["finalizers"] = ["a", "b"]
    out = patch(obj, SMP, {"metadata": {"finalizers": ["b", "c"]}})
    assert sorted(out["metadata"]["finalizers"]) == ["a", "b", "c"]
    assert len(out["metadata"]["finalizers"]) == 3


def test_owner_references_merge_by_uid() -> None:
    obj = pod()
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u1"}]
    body = {
        "metadata": {
            "ownerReferences": [
                {"uid": "u1", "controller": True},
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "u2"},
            ]
        }
    }
    out = patch(obj, SMP, body)
    assert out["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u1", "controller": True},
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "u2"},
    ]


def test_status_conditions_merge_by_type() -> None:
    obj = pod()
    obj["status"] = {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"},
            {"type": "Ready", "status": "False"},
        ],
    }
    out = patch(obj, SMP, {"status": {"conditions": [{"type": "PodScheduled", "status": "True", "reason": None}]}})
    assert out["status"]["conditions"] == [
        {"type": "PodScheduled", "status": "True"},
        {"type": "Ready", "status": "False"},
    ]
    assert out["status"]["phase"] == "Pending"


def test_set_element_order_reorders_a_merged_list() -> None:
    obj = pod()
    obj["spec"]["containers"] = [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}, {"name": "c", "image": "3"}]
    body = {"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "c"}, {"name": "a"}]}}
    out = patch(obj, SMP, body)
    assert [c["name"] for c in out["spec"]["containers"]] == ["b", "c", "a"]
    assert out["spec"]["containers"][0] == {"name": "b", "image": "2"}


def test_set_element_order_places_an_added_item() -> None:
    obj = pod()
    obj["spec"]["containers"] = [{"name": "a", "image": "1"}, {"name": "c", "image": "3"}]
    body = {
        "spec": {
            "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
            "containers": [{"name": "b", "image": "2"}],
        }
    }
    out = patch(obj, SMP, body)
    assert out["spec"]["containers"] == [
        {"name": "a", "image": "1"},
        {"name": "b", "image": "2"},
        {"name": "c", "image": "3"},
    ]


def test_set_element_order_on_primitive_list() -> None:
    obj = pod()
    obj["metadata"]["finalizers"] = ["a", "b", "c"]
    body = {"metadata": {"$setElementOrder/finalizers": ["a", "b", "c", "d"], "finalizers": ["d"]}}
    assert patch(obj, SMP, body)["metadata"]["finalizers"] == ["a", "b", "c", "d"]


def test_replace_directive_in_a_list() -> None:
    obj = pod()
    obj["spec"]["containers"].append({"name": "log-tailer", "image": "log-tailer-1.0"})
    body = {"spec": {"containers": [{"name": "nginx", "image": "nginx-1.0"}, {"$patch": "replace"}]}}
    assert patch(obj, SMP, body)["spec"]["containers"] == [{"name": "nginx", "image": "nginx-1.0"}]


def test_replace_and_delete_directives_on_maps() -> None:
    out = patch(pod(), SMP, {"metadata": {"labels": {"$patch": "replace", "only": "this"}}})
    assert out["metadata"]["labels"] == {"only": "this"}
    out = patch(pod(), SMP, {"metadata": {"labels": {"$patch": "delete"}}})
    assert not out["metadata"].get("labels")
    assert out["metadata"]["name"] == "p"


def test_null_deletes_a_map_key_and_maps_merge() -> None:
    out = patch(
        pod(nodeSelector={"zone": "a"}),
        SMP,
        {"metadata": {"labels": {"tier": None, "gang": "g"}}, "spec": {"nodeSelector": None, "nodeName": "n1"}},
    )
    assert out["metadata"]["labels"] == {"app": "web", "gang": "g"}
    assert "nodeSelector" not in out["spec"]
    assert out["spec"]["nodeName"] == "n1"


def test_list_without_merge_key_is_replaced_on_builtins_without_schema() -> None:
    hook = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "h"},
        "webhooks": [
            {"name": "a.example.com", "rules": [{"operations": ["CREATE"]}], "timeoutSeconds": 5},
            {"name": "b.example.com"},
        ],
    }
    out = patch(hook, SMP, {"webhooks": [{"name": "a.example.com", "rules": [{"operations": ["UPDATE"]}]}]})
    assert out["webhooks"] == [
        {"name": "a.example.com", "rules": [{"operations": ["UPDATE"]}], "timeoutSeconds": 5},
        {"name": "b.example.com"},
    ]
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}}
    assert patch(cm, SMP, {"data": {"a": None, "c": "3"}})["data"] == {"b": "2", "c": "3"}


def test_merge_key_missing_in_patch_item_is_an_unclassified_server_error() -> None:
    # mergepatch.ErrNoMergeKey is not mapped by interpretStrategicMergePatchError: 500, reason Unknown ("").
    err = error(pod(), SMP, json.dumps({"spec": {"containers": [{"image": "x"}]}}).encode())
    assert (err.status, err.reason) == (500, "")
    assert "does not contain declared merge key: name" in str(err)


def test_strategic_merge_null_body_changes_nothing() -> None:
    assert apply_patch(pod(), SMP, b"null") == pod()


# --- server-side apply ("Server-Side Apply", kubernetes.io reference): the manager's intent, field by field ----


def deployment(image: str, labels: dict, env: list) -> dict:
    container = {"name": "main", "image": image, "env": env}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ns",
                                                                        "labels": labels},
            "spec": {"template": {"spec": {"containers": [container]}}}}


def test_apply_creates_then_merges_and_drops_only_what_the_manager_stopped_applying() -> None:
    first = server_side_apply(None, deployment("a:1", {"app": "d", "old": "x"}, [{"name": "A", "value": "1"}]),
                              "kubectl", "apps/v1", "t0")
    [entry] = first["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"], entry["fieldsType"]) == ("kubectl", "Apply", "FieldsV1")
    assert entry["fieldsV1"]["f:metadata"]["f:labels"] == {"f:app": {}, "f:old": {}}
    assert 'k:{"name":"main"}' in entry["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
    # another writer (an Update: not tracked) adds a label, a container and an env var
    live = copy.deepcopy(first)
    live["metadata"]["labels"]["theirs"] = "y"
    live["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "THEIRS", "value": "2"})
    live["spec"]["template"]["spec"]["containers"].append({"name": "sidecar", "image": "s:1"})
    # the next apply drops the label "old" and env A, changes the image
    second = server_side_apply(live, deployment("a:2", {"app": "d"}, [{"name": "B", "value": "3"}]),
                               "kubectl", "apps/v1", "t1")
    assert second["metadata"]["labels"] == {"app": "d", "theirs": "y"}
    containers = second["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["main", "sidecar"] and containers[0]["image"] == "a:2"
    assert sorted(e["name"] for e in containers[0]["env"]) == ["B", "THEIRS"]
    assert [e["time"] for e in second["metadata"]["managedFields"]] == ["t1"]


def test_apply_of_a_custom_resource_replaces_its_lists_and_keeps_other_managers_entries() -> None:
    rule = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": {"name": "r"},
            "spec": {"groups": [{"name": "a"}, {"name": "b"}]}}
    live = server_side_apply(None, rule, "kubectl", "monitoring.coreos.com/v1", "t0")
    live["metadata"]["managedFields"].append({"manager": "other", "operation": "Update"})
    again = server_side_apply(live, {**rule, "spec": {"groups": [{"name": "b"}]}}, "kubectl",
                              "monitoring.coreos.com/v1", "t1")
    assert again["spec"] == {"groups": [{"name": "b"}]}
    assert [e["manager"] for e in again["metadata"]["managedFields"]] == ["other", "kubectl"]

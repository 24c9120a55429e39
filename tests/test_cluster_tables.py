"""Server-side printing (cluster/tables.py), cell by cell: what the apiserver's printers compute for ``kubectl get``.

Expected cells are those of kubernetes/kubernetes' own printer tests (pkg/printers/internalversion/printers_test.go:
TestPrintPodTable, TestPrintPodwide, TestPrintNodeStatus, TestPrintEvent...; apimachinery's duration_test.go;
tableconvertor_test.go) for the same objects.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from cluster import tables
from cluster.resources import PrinterColumn, Resource
from cluster.store import ApiError

pytestmark = pytest.mark.unit

KUBECTL_ACCEPT = ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,"
                  "application/json")


NOW = datetime.datetime(2026, 11, 25, 12, 0, 0, 250000, tzinfo=datetime.UTC)


@pytest.fixture(autouse=True)
def frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ages are computed at NOW (a quarter second past a whole second: ages never straddle one)."""
    monkeypatch.setattr(tables, "clock", lambda: NOW)


def ago(seconds: float) -> str:
    moment = NOW - datetime.timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


# --- negotiation ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("accept", "expected"), [
    (KUBECTL_ACCEPT, "meta.k8s.io/v1"),
    ("application/json;as=Table;v=v1beta1;g=meta.k8s.io, application/json", "meta.k8s.io/v1beta1"),
    ("application/json", None),
    ("", None),
    ("*/*", None),
    ("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1;g=meta.k8s.io",
     "meta.k8s.io/v1"),
    ("application/json;as=Table;v=v2;g=meta.k8s.io,application/json", None),
    ("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json", None),
    ("application/json;q=0.5,application/json;as=Table;v=v1;g=meta.k8s.io", "meta.k8s.io/v1"),
])
def test_negotiate(accept: str, expected: str | None) -> None:
    assert tables.negotiate(accept) == expected


def test_include_object() -> None:
    assert tables.include_object({}) == "Metadata"
    assert tables.include_object({"includeObject": "Object"}) == "Object"
    with pytest.raises(ApiError) as info:
        tables.include_object({"includeObject": "Everything"})
    assert info.value.code == 400 and 'Unsupported value: "Everything"' in info.value.message


# --- ages -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("seconds", "text"), [
    (-2, "<invalid>"), (-1, "0s"), (0, "0s"), (1, "1s"), (70, "70s"), (119, "119s"), (120, "2m"), (190, "3m10s"),
    (70 * 60, "70m"), (3 * 3600, "3h"), (3 * 3600 + 60 * 7, "3h7m"), (47 * 3600, "47h"), (49 * 3600, "2d1h"),
    ((8 * 24 + 2) * 3600, "8d"), (367 * 86400, "367d"), (731 * 86400, "2y1d"), (365 * 10 * 86400, "10y"),
])
def test_human_duration(seconds: float, text: str) -> None:
    assert tables.human_duration(seconds) == text


def test_age_of_an_absent_timestamp_is_unknown() -> None:
    assert tables.since(None) == "<unknown>"
    assert tables.since(ago(300)) == "5m"


# --- pods -------------------------------------------------------------------------------------------------------


def pod(status: dict[str, Any] | None = None, containers: int = 1, deleting: bool = False,
        **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ns", "creationTimestamp": ago(30)}
    if deleting:
        meta["deletionTimestamp"] = ago(0)
    return {"metadata": meta, "spec": {"containers": [{"name": f"c{i}", "image": "x"} for i in range(containers)],
                                       **spec},
            "status": status or {"phase": "Pending"}}


def cells(obj: dict[str, Any]) -> list[Any]:
    return tables.print_pod(obj)[0]


def running(name: str = "c0", ready: bool = True, restarts: int = 0, **extra: Any) -> dict[str, Any]:
    return {"name": name, "ready": ready, "restartCount": restarts, "state": {"running": {"startedAt": ago(20)}},
            **extra}


def terminated(reason: str = "", exit_code: int = 0, name: str = "c0", **extra: Any) -> dict[str, Any]:
    done: dict[str, Any] = {"exitCode": exit_code, "finishedAt": ago(5)}
    if reason:
        done["reason"] = reason
    return {"name": name, "ready": False, "restartCount": 0, "state": {"terminated": {**done, **extra}}}


def waiting(reason: str, name: str = "c0") -> dict[str, Any]:
    return {"name": name, "ready": False, "restartCount": 0, "state": {"waiting": {"reason": reason}}}


def test_a_gated_pod_is_scheduling_gated() -> None:
    gated = pod({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                      "reason": "SchedulingGated"}]}, containers=2)
    assert cells(gated)[:4] == ["p", "0/2", "SchedulingGated", "0"]


def test_pending_and_running() -> None:
    assert cells(pod())[:5] == ["p", "0/1", "Pending", "0", "30s"]
    up = pod({"phase": "Running", "containerStatuses": [running()], "podIPs": [{"ip": "10.1.2.3"}],
              "conditions": [{"type": "Ready", "status": "True"}]}, nodeName="node-a")
    assert cells(up) == ["p", "1/1", "Running", "0", "30s", "10.1.2.3", "node-a", "<none>", "<none>"]


def test_a_container_being_created_shows_its_waiting_reason() -> None:
    assert cells(pod({"phase": "Pending", "containerStatuses": [waiting("ContainerCreating")]}))[2] \
        == "ContainerCreating"
    assert cells(pod({"phase": "Running", "containerStatuses": [waiting("CrashLoopBackOff")]}))[2] \
        == "CrashLoopBackOff"


def test_terminated_containers() -> None:
    done = pod({"phase": "Succeeded", "containerStatuses": [terminated("Completed")]})
    row, conditions = tables.print_pod(done)
    assert row[1:3] == ["0/1", "Completed"]
    assert conditions == [{"type": "Completed", "status": "True", "reason": "Succeeded",
                           "message": "The pod has completed successfully."}]
    assert cells(pod({"phase": "Failed", "containerStatuses": [terminated("OOMKilled", 137)]}))[2] == "OOMKilled"
    assert cells(pod({"phase": "Failed", "containerStatuses": [terminated("Error", 1)]}))[2] == "Error"
    assert cells(pod({"phase": "Failed", "containerStatuses": [terminated(exit_code=3)]}))[2] == "ExitCode:3"
    assert cells(pod({"phase": "Failed", "containerStatuses": [terminated(exit_code=0, signal=9)]}))[2] \
        == "Signal:9"
    assert tables.print_pod(pod({"phase": "Failed"}))[1] == [{"type": "Completed", "status": "True",
                                                              "reason": "Failed", "message": "The pod failed."}]


def test_completed_with_a_container_still_running_is_running_or_not_ready() -> None:
    statuses = [terminated("Completed", name="c1"), running("c0")]  # printed from the last container back
    ready = pod({"phase": "Running", "containerStatuses": statuses,
                 "conditions": [{"type": "Ready", "status": "True"}]}, containers=2)
    assert cells(ready)[1:3] == ["1/2", "Running"]
    assert cells(pod({"phase": "Running", "containerStatuses": statuses}, containers=2))[2] == "NotReady"


def test_init_containers() -> None:
    spec = {"initContainers": [{"name": "i0", "image": "x"}, {"name": "i1", "image": "x"}]}
    assert cells(pod({"phase": "Pending", "initContainerStatuses": [
        terminated("Completed", name="i0"), waiting("PodInitializing", name="i1")]}, **spec))[2] == "Init:1/2"
    assert cells(pod({"phase": "Pending", "initContainerStatuses": [
        waiting("ImagePullBackOff", name="i0")]}, **spec))[2] == "Init:ImagePullBackOff"
    assert cells(pod({"phase": "Pending", "initContainerStatuses": [
        terminated("Error", 1, name="i0")]}, **spec))[2] == "Init:Error"
    assert cells(pod({"phase": "Pending", "initContainerStatuses": [
        terminated(exit_code=2, name="i0")]}, **spec))[2] == "Init:ExitCode:2"


def test_a_started_sidecar_counts_toward_ready() -> None:
    spec = {"initContainers": [{"name": "side", "image": "x", "restartPolicy": "Always"}]}
    sidecar = {**running("side"), "started": True}
    up = pod({"phase": "Running", "initContainerStatuses": [sidecar], "containerStatuses": [running()],
              "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}]}, **spec)
    assert cells(up)[1:3] == ["2/2", "Running"]


def test_restarts_say_when_the_last_one_was() -> None:
    restarted = running(restarts=4, lastState={"terminated": {"exitCode": 1, "finishedAt": ago(300)}})
    assert cells(pod({"phase": "Running", "containerStatuses": [restarted]}))[3] == "4 (5m ago)"
    assert cells(pod({"phase": "Running", "containerStatuses": [running(restarts=2)]}))[3] == "2"


def test_deleting() -> None:
    assert cells(pod({"phase": "Running", "containerStatuses": [running()]}, deleting=True))[2] == "Terminating"
    assert cells(pod({"phase": "Succeeded", "containerStatuses": [terminated("Completed")]}, deleting=True))[2] \
        == "Completed"
    assert cells(pod({"phase": "Running", "reason": "NodeLost"}, deleting=True))[2] == "Unknown"


def test_status_reason_wins_over_the_phase() -> None:
    assert cells(pod({"phase": "Failed", "reason": "Evicted"}))[2] == "Evicted"


def test_wide_cells() -> None:
    gates = [{"conditionType": "example.com/a"}, {"conditionType": "example.com/b"}]
    nominated = pod({"phase": "Pending", "nominatedNodeName": "node-b",
                     "conditions": [{"type": "example.com/a", "status": "True"},
                                    {"type": "example.com/b", "status": "False"}]}, readinessGates=gates)
    assert cells(nominated)[5:] == ["<none>", "<none>", "node-b", "1/2"]


# --- nodes, events ----------------------------------------------------------------------------------------------


def node(ready: str | None = "True", unschedulable: bool = False, **labels: str) -> dict[str, Any]:
    conditions = [] if ready is None else [{"type": "MemoryPressure", "status": "False"},
                                           {"type": "Ready", "status": ready}]
    return {"metadata": {"name": "n", "labels": labels, "creationTimestamp": ago(7200)},
            "spec": {"unschedulable": unschedulable},
            "status": {"conditions": conditions, "nodeInfo": {"kubeletVersion": "v1.31.0"},
                       "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}


def test_nodes() -> None:
    assert tables.print_node(node())[0] == ["n", "Ready", "<none>", "120m", "v1.31.0", "10.0.0.1", "<none>",
                                            "<unknown>", "<unknown>", "<unknown>"]
    assert tables.print_node(node("False"))[0][1] == "NotReady"
    assert tables.print_node(node("Unknown"))[0][1] == "NotReady"
    assert tables.print_node(node(None))[0][1] == "Unknown"
    assert tables.print_node(node(unschedulable=True))[0][1] == "Ready,SchedulingDisabled"
    roles = node(**{"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/control-plane": "",
                    "kubernetes.io/role": "gpu", "node-role.kubernetes.io/": ""})
    assert tables.print_node(roles)[0][2] == "control-plane,gpu,worker"


def test_events() -> None:
    old_style = {"metadata": {"name": "e.1"}, "type": "Warning", "reason": "FailedScheduling",
                 "involvedObject": {"kind": "Pod", "name": "p"}, "source": {"component": "default-scheduler"},
                 "message": " 0/3 nodes are available \n", "firstTimestamp": ago(600), "lastTimestamp": ago(60),
                 "count": 7}
    assert tables.print_event(old_style)[0] == ["60s", "Warning", "FailedScheduling", "pod/p", "",
                                                "default-scheduler", "0/3 nodes are available", "10m", 7, "e.1"]
    series = {"metadata": {"name": "e.2"}, "type": "Normal", "reason": "GangWaiting",
              "involvedObject": {"kind": "PodGroup", "name": "g"}, "message": "2/3 present",
              "eventTime": f"{ago(900)[:-1]}.123456Z", "reportingComponent": "kubenexus.io/controller",
              "reportingInstance": "c-1", "series": {"count": 4, "lastObservedTime": f"{ago(30)[:-1]}.100000Z"}}
    assert tables.print_event(series)[0] == ["30s", "Normal", "GangWaiting", "podgroup/g", "",
                                             "kubenexus.io/controller, c-1", "2/3 present", "15m", 4, "e.2"]
    singleton = {**series, "series": None}
    assert tables.print_event(singleton)[0][0] == "15m" and tables.print_event(singleton)[0][8] == 1


# --- custom resources -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "expected"), [
    (".status.phase", ["Pending"]),
    ("{.spec.minMember}", [3]),
    (".status.missing", []),
    (".status.nodes[1]", ["b"]),
    (".status.nodes[-1]", ["b"]),
    (".status.nodes[5]", []),
    (".metadata.labels['app.kubernetes.io/name']", ["x"]),
    ('.status.conditions[?(@.type=="Released")].status', ["True"]),
    (".status.conditions[?(@.type=='Nope')].status", []),
    (".status.nodes[*]", ["a", "b"]),
    (".status.bad..path", []),
])
def test_json_path(path: str, expected: list[Any]) -> None:
    obj = {"metadata": {"labels": {"app.kubernetes.io/name": "x"}}, "spec": {"minMember": 3},
           "status": {"phase": "Pending", "nodes": ["a", "b"],
                      "conditions": [{"type": "Schedulable", "status": "False"}, {"type": "Released",
                                                                                 "status": "True"}]}}
    assert tables.json_path(path, obj) == expected


@pytest.mark.parametrize(("type_", "value", "cell"), [
    ("string", "Pending", "Pending"), ("string", 3, "3"), ("string", 2.5, "2.5"), ("string", True, "true"),
    ("string", {"b": 1, "a": [1, 2]}, '{"a":[1,2],"b":1}'), ("integer", 3, 3), ("integer", 3.9, 3),
    ("integer", "3", None), ("number", 2.5, 2.5), ("boolean", True, True), ("boolean", "true", None),
    ("date", "not a time", "<invalid>"), ("date", 12, None), ("string", None, None),
])
def test_custom_cells(type_: str, value: Any, cell: Any) -> None:
    assert tables.custom_cell(PrinterColumn("X", type_, ".spec.x"), {"spec": {"x": value}}) == cell


def test_a_date_column_is_printed_as_an_age_by_the_server() -> None:
    column = PrinterColumn("Age", "date", ".metadata.creationTimestamp")
    assert tables.custom_cell(column, {"metadata": {"creationTimestamp": ago(3 * 3600)}}) == "3h"


PODGROUPS = Resource("scheduling.kubenexus.io", "v1alpha1", "PodGroup", "podgroups", builtin=False, columns=(
    PrinterColumn("Phase", "string", ".status.phase"), PrinterColumn("Min", "integer", ".spec.minMember"),
    PrinterColumn("Age", "date", ".metadata.creationTimestamp")))
WIDGETS = Resource("example.com", "v1", "Widget", "widgets", builtin=False)


def test_custom_resource_table() -> None:
    group = {"metadata": {"name": "g", "namespace": "ns", "creationTimestamp": ago(60)}, "spec": {"minMember": 4}}
    table = tables.table(PODGROUPS, [group], "42", "meta.k8s.io/v1", "Metadata")
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Phase", "Min", "Age"]
    assert table["columnDefinitions"][1]["description"] == \
        "Custom resource definition column (in JSONPath format): .status.phase"
    assert table["rows"] == [{"cells": ["g", None, 4, "60s"], "object": {
        "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": group["metadata"]}}]
    assert (table["kind"], table["apiVersion"], table["metadata"]) == ("Table", "meta.k8s.io/v1",
                                                                       {"resourceVersion": "42"})
    # No printer columns: NAME and an Age date column (serveDefaultColumnsIfEmpty).
    plain = tables.table(WIDGETS, [group], "42", "meta.k8s.io/v1", "None")
    assert [(c["name"], c["type"]) for c in plain["columnDefinitions"]] == [("Name", "string"), ("Age", "date")]
    assert plain["rows"] == [{"cells": ["g", "60s"]}]


def test_include_object_and_headers() -> None:
    obj = {"metadata": {"name": "cm", "creationTimestamp": ago(10)}, "data": {"a": "1"}}
    configmaps = Resource("", "v1", "ConfigMap", "configmaps")
    whole = tables.table(configmaps, [obj], "7", "meta.k8s.io/v1beta1", "Object", headers=False)
    assert whole["columnDefinitions"] == [] and whole["apiVersion"] == "meta.k8s.io/v1beta1"
    assert whole["rows"] == [{"cells": ["cm", 1, "10s"], "object": obj}]


def test_the_default_table_prints_the_creation_time_itself() -> None:
    unported = Resource("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies")  # its printer is not ported
    obj = {"metadata": {"name": "deny-all", "creationTimestamp": "2026-01-02T03:04:05Z"}}
    table = tables.table(unported, [obj], "1", "meta.k8s.io/v1", "None")
    assert [(c["name"], c["type"]) for c in table["columnDefinitions"]] == [("Name", "string"),
                                                                            ("Created At", "date")]
    assert table["rows"] == [{"cells": ["deny-all", "2026-01-02T03:04:05Z"]}]


def test_builtin_printers() -> None:
    meta = {"name": "x", "creationTimestamp": ago(5)}
    job = {"metadata": meta, "spec": {"completions": 3, "parallelism": 2, "selector": {
        "matchLabels": {"b": "2", "a": "1"}, "matchExpressions": [{"key": "c", "operator": "Exists"}]},
        "template": {"spec": {"containers": [{"name": "m", "image": "i1"}, {"name": "s", "image": "i2"}]}}},
           "status": {"succeeded": 1, "startTime": ago(65), "conditions": [{"type": "Suspended", "status": "True"}]}}
    assert tables.print_job(job)[0] == ["x", "Suspended", "1/3", "65s", "5s", "m,s", "i1,i2", "a=1,b=2,c"]
    sts = {"metadata": meta, "spec": {"replicas": 3}, "status": {"readyReplicas": 2}}
    assert tables.print_stateful_set(sts)[0][:3] == ["x", "2/3", "5s"]
    binding = {"metadata": meta, "roleRef": {"kind": "ClusterRole", "name": "view"}, "subjects": [
        {"kind": "User", "name": "u"}, {"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}]}
    assert tables.print_role_binding(binding)[0] == ["x", "ClusterRole/view", "5s", "u", "", "ns/sa"]

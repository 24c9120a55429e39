"""Events on the local cluster: one object, two APIs (core/v1 and events.k8s.io/v1), as on a real cluster.

An Event written through either API is read, listed, watched, patched and deleted through the other, with the
field mapping of ``pkg/apis/events/v1/conversion.go``; writes are validated as ``pkg/apis/core/validation/events.go``
does (strictly through events.k8s.io/v1). Driven through the official Python client, as a product would.
"""

from __future__ import annotations

import datetime
import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config, watch

from cluster.local import LocalCluster

pytestmark = pytest.mark.e2e

MERGE, STRATEGIC = "application/merge-patch+json", "application/strategic-merge-patch+json"


@pytest.fixture(scope="module")
def api() -> Iterator[client.ApiClient]:
    with LocalCluster() as local:
        api_client = config.new_client_from_config(local.kubeconfig)
        yield api_client
        api_client.close()


@pytest.fixture
def ns(api: client.ApiClient) -> str:
    name = f"ev-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    return name


def micro(seconds_ago: float = 0) -> str:
    moment = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds_ago)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def seconds(seconds_ago: float = 0) -> str:
    return micro(seconds_ago)[:19] + "Z"


def v1_event(ns: str, name: str = "gang.1", **fields: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "eventTime": micro(60), "reportingController": "kubenexus.io/controller",
            "reportingInstance": "controller-0", "action": "Wait", "reason": "GangWaiting", "type": "Normal",
            "regarding": {"kind": "PodGroup", "namespace": ns, "name": "train",
                          "apiVersion": "scheduling.kubenexus.io/v1alpha1", "uid": "u-1"},
            "note": "40/41 present", **fields}


def raw(api: client.ApiClient, method: str, path: str, body: Any = None,
        content_type: str = "application/json") -> tuple[int, Any]:
    request = api.param_serialize(method, path, header_params={"Content-Type": content_type, "Accept":
                                                               "application/json"}, body=body,
                                  auth_settings=["BearerToken"])
    response = api.call_api(*request)
    response.read()
    return response.status, json.loads(response.data)


def failure(call: Any, *args: Any, **kwargs: Any) -> tuple[int, str]:
    with pytest.raises(client.ApiException) as info:
        call(*args, **kwargs)
    return info.value.status, json.loads(info.value.body)["message"]


# --- one object, two views --------------------------------------------------------------------------------------


def test_an_events_k8s_io_event_is_a_core_event(api: client.ApiClient, ns: str) -> None:
    events, core = client.EventsV1Api(api), client.CoreV1Api(api)
    observed = micro(5)
    created = events.create_namespaced_event(ns, v1_event(ns, series={"count": 3, "lastObservedTime": observed}))
    assert (created.api_version, created.kind, created.note, created.series.count) == (
        "events.k8s.io/v1", "Event", "40/41 present", 3)

    seen = core.read_namespaced_event("gang.1", ns)
    assert (seen.api_version, seen.message, seen.reason, seen.type, seen.action) == (
        "v1", "40/41 present", "GangWaiting", "Normal", "Wait")
    assert (seen.involved_object.kind, seen.involved_object.name, seen.involved_object.uid) == ("PodGroup", "train",
                                                                                              "u-1")
    assert (seen.reporting_component, seen.reporting_instance) == ("kubenexus.io/controller", "controller-0")
    assert (seen.series.count, seen.count, seen.first_timestamp, seen.last_timestamp) == (3, None, None, None)
    assert seen.metadata.uid == created.metadata.uid
    assert seen.metadata.resource_version == created.metadata.resource_version
    assert [e.metadata.name for e in core.list_namespaced_event(ns).items] == ["gang.1"]


def test_the_core_json_of_an_event_written_through_events_k8s_io(api: client.ApiClient, ns: str) -> None:
    """What a Go apiserver encodes for the fields the new API leaves unset."""
    client.EventsV1Api(api).create_namespaced_event(ns, v1_event(ns))
    status, body = raw(api, "GET", f"/api/v1/namespaces/{ns}/events/gang.1")
    assert status == 200
    assert (body["firstTimestamp"], body["lastTimestamp"], body["source"], body["reportingComponent"]) == (
        None, None, {}, "kubenexus.io/controller")
    assert "count" not in body and "note" not in body and "regarding" not in body


def test_a_core_event_is_an_events_k8s_io_event(api: client.ApiClient, ns: str) -> None:
    """Read raw: an old-style Event has no eventTime, which events.k8s.io/v1 serves as null (``json:"eventTime"``),
    and the Python client's EventsV1Event refuses a null eventTime (it would on a real cluster too)."""
    core = client.CoreV1Api(api)
    core.create_namespaced_event(ns, {
        "metadata": {"name": "p.1"},
        "involvedObject": {"kind": "Pod", "namespace": ns, "name": "p", "apiVersion": "v1"},
        "reason": "FailedScheduling", "message": "0/3 nodes are available", "type": "Warning",
        "source": {"component": "default-scheduler"}, "firstTimestamp": seconds(60), "lastTimestamp": seconds(),
        "count": 2})
    status, seen = raw(api, "GET", f"/apis/events.k8s.io/v1/namespaces/{ns}/events/p.1")
    assert status == 200 and (seen["apiVersion"], seen["kind"]) == ("events.k8s.io/v1", "Event")
    assert (seen["note"], seen["regarding"]["name"], seen["deprecatedCount"], seen["deprecatedSource"]) == (
        "0/3 nodes are available", "p", 2, {"component": "default-scheduler"})
    assert seen["eventTime"] is None and "series" not in seen and "reportingController" not in seen
    status, listed = raw(api, "GET", f"/apis/events.k8s.io/v1/namespaces/{ns}/events")
    assert (listed["kind"], [e["metadata"]["name"] for e in listed["items"]]) == ("EventList", ["p.1"])
    client.EventsV1Api(api).delete_namespaced_event("p.1", ns)
    assert core.list_namespaced_event(ns).items == []


def test_a_series_patched_through_either_api(api: client.ApiClient, ns: str) -> None:
    """The recorder of the new API keeps one Event per series and patches its count and lastObservedTime."""
    events, core = client.EventsV1Api(api), client.CoreV1Api(api)
    events.create_namespaced_event(ns, v1_event(ns))
    patched = events.patch_namespaced_event("gang.1", ns, {"series": {"count": 2, "lastObservedTime": micro()}},
                                            _content_type=MERGE)
    assert patched.series.count == 2
    assert core.read_namespaced_event("gang.1", ns).series.count == 2
    again = events.patch_namespaced_event("gang.1", ns, {"series": {"count": 3, "lastObservedTime": micro()}},
                                          _content_type=STRATEGIC)
    assert again.series.count == 3 and int(again.metadata.resource_version) > int(patched.metadata.resource_version)
    # Through core/v1 only the legacy rules apply: the count and message may change there.
    core.patch_namespaced_event("gang.1", ns, {"count": 9, "message": "41/41 present"}, _content_type=MERGE)
    seen = events.read_namespaced_event("gang.1", ns)
    assert (seen.deprecated_count, seen.note, seen.series.count) == (9, "41/41 present", 3)


def test_watches_and_field_selectors_span_both_apis(api: client.ApiClient, ns: str) -> None:
    events, core = client.EventsV1Api(api), client.CoreV1Api(api)
    seen: list[tuple[str, str, str]] = []
    done = threading.Event()

    def follow() -> None:
        for change in watch.Watch().stream(events.list_namespaced_event, ns, timeout_seconds=3):
            seen.append((change["type"], change["object"].metadata.name, change["object"].note))
            if len(seen) == 2:
                break
        done.set()

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    threading.Event().wait(0.5)
    core.create_namespaced_event(ns, {  # a new-style Event written through core/v1
        "metadata": {"name": "old.1"}, "involvedObject": {"kind": "Pod", "namespace": ns, "name": "a"},
        "reason": "Tested", "message": "from core", "type": "Normal", "eventTime": micro(),
        "reportingComponent": "example.com/other", "reportingInstance": "o-1", "action": "Test"})
    events.create_namespaced_event(ns, v1_event(ns, name="new.1", regarding={"kind": "Pod", "namespace": ns,
                                                                            "name": "b"}))
    assert done.wait(5)
    assert seen == [("ADDED", "old.1", "from core"), ("ADDED", "new.1", "40/41 present")]

    assert [e.metadata.name for e in events.list_namespaced_event(ns, field_selector="regarding.name=b").items] \
        == ["new.1"]
    assert [e.metadata.name for e in core.list_namespaced_event(ns, field_selector="involvedObject.name=b").items] \
        == ["new.1"]
    by_controller = core.list_namespaced_event(ns, field_selector="reportingComponent=kubenexus.io/controller")
    assert [e.metadata.name for e in by_controller.items] == ["new.1"]
    by_source = events.list_namespaced_event(ns, field_selector="source=kubenexus.io/controller")
    assert [e.metadata.name for e in by_source.items] == ["new.1"]
    status, message = failure(events.list_namespaced_event, ns, field_selector="involvedObject.name=b")
    assert (status, message) == (400, "field label not supported: involvedObject.name")


# --- validation -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("change", "error"), [
    ({"eventTime": None}, "eventTime: Required value"),
    ({"reportingController": None}, "reportingController: Required value"),
    ({"reportingController": "Not A Name!"}, 'reportingController: Invalid value: "Not A Name!": name part must '
                                             "consist of alphanumeric characters"),
    ({"reportingInstance": None}, "reportingInstance: Required value"),
    ({"reportingInstance": "i" * 129}, 'reportingInstance: Invalid value: "": can have at most 128 characters'),
    ({"action": None}, "action: Required value"),
    ({"reason": "r" * 129}, 'reason: Invalid value: "": can have at most 128 characters'),
    ({"note": "n" * 1025}, 'message: Invalid value: "": can have at most 1024 characters'),
    ({"type": "Info"}, 'type: Invalid value: "": has invalid value: Info'),
    ({"series": {"count": 1, "lastObservedTime": micro()}}, 'series.count: Invalid value: "": should be at least 2'),
    ({"series": {"count": 2}}, "series.lastObservedTime: Required value"),
    ({"deprecatedCount": 3}, 'count: Invalid value: "": needs to be unset'),
    ({"deprecatedLastTimestamp": seconds()}, 'lastTimestamp: Invalid value: "": needs to be unset'),
    ({"deprecatedSource": {"component": "x"}}, 'source: Invalid value: "": needs to be unset'),
])
def test_events_k8s_io_create_is_validated_strictly(api: client.ApiClient, ns: str, change: dict[str, Any],
                                                    error: str) -> None:
    body = {k: v for k, v in {**v1_event(ns), **change}.items() if v is not None}
    status, answer = raw(api, "POST", f"/apis/events.k8s.io/v1/namespaces/{ns}/events", body)  # the client would
    # refuse some of these itself
    assert status == 422 and answer["message"].startswith('Event.events.k8s.io "gang.1" is invalid: ')
    assert error in answer["message"]


def test_a_note_of_1024_bytes_is_accepted(api: client.ApiClient, ns: str) -> None:
    assert len(client.EventsV1Api(api).create_namespaced_event(ns, v1_event(ns, note="n" * 1024)).note) == 1024


def test_events_k8s_io_updates_may_change_the_series_only(api: client.ApiClient, ns: str) -> None:
    events = client.EventsV1Api(api)
    events.create_namespaced_event(ns, v1_event(ns))
    status, message = failure(events.patch_namespaced_event, "gang.1", ns, {"note": "changed"}, _content_type=MERGE)
    assert status == 422 and 'message: Invalid value: "changed": field is immutable' in message
    status, message = failure(events.patch_namespaced_event, "gang.1", ns, {"reportingInstance": "controller-1"},
                              _content_type=MERGE)
    assert 'reportingInstance: Invalid value: "controller-1": field is immutable' in message
    status, message = failure(events.patch_namespaced_event, "gang.1", ns, {"series": {"count": 1}},
                              _content_type=MERGE)
    assert 'series.count: Invalid value: "": should be at least 2' in message
    events.patch_namespaced_event("gang.1", ns, {"metadata": {"labels": {"a": "b"}}}, _content_type=MERGE)


def test_the_legacy_rules_apply_to_core_events(api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    other = {"metadata": {"name": "x.1"}, "involvedObject": {"kind": "Pod", "namespace": "elsewhere", "name": "p"},
             "reason": "Tested", "message": "m", "type": "Normal"}
    status, message = failure(core.create_namespaced_event, ns, other)
    assert status == 422 and 'involvedObject.namespace: Invalid value: "elsewhere": does not match event.namespace' \
        in message
    # A core event with an eventTime is a new-style event: it needs what the new API requires.
    status, message = failure(core.create_namespaced_event, ns, {
        "metadata": {"name": "x.2"}, "involvedObject": {"kind": "Pod", "namespace": ns, "name": "p"},
        "reason": "Tested", "message": "m", "type": "Normal", "eventTime": micro()})
    assert "reportingController: Required value" in message and "action: Required value" in message
    # A cluster-scoped object's events live in default (or kube-system, for a new-style event).
    core.create_namespaced_event("default", {
        "metadata": {"name": f"node.{uuid.uuid4().hex[:6]}"}, "involvedObject": {"kind": "Node", "name": "n"},
        "reason": "Tested", "message": "m", "type": "Normal"})

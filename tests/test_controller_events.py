"""The event recorder against the local cluster's events.k8s.io/v1 Events, with an injected clock for its intervals.

Every Event the tests read is also checked against the apiserver's validation of events.k8s.io/v1 creates
(``tests/support/events.problems``): the local cluster may accept more than a real apiserver does.
"""

from __future__ import annotations

import datetime
import json
import re
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from cluster.http import write_kubeconfig
from cluster.local import LocalCluster, NodeSpec
from controller.engine import Cause, GangDecision, Verdict
from controller.run import Controller
from gang.config import Config
from kube.events import EventRecorder
from kubenexus.local_webhook import free_port
from tests.support.contract import GATE, GROUP, MIN
from tests.support.events import list_events, problems

pytestmark = pytest.mark.e2e


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(nodes=[NodeSpec("node-a")]) as local:
        yield local


@pytest.fixture
def pod(core: client.CoreV1Api) -> dict[str, Any]:
    """An ObjectReference to a pod in a fresh namespace."""
    ns = f"ev-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": ns}})
    created = core.create_namespaced_pod(ns, {"metadata": {"name": "spark-pi-driver"}, "spec": {
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]}})
    return {"apiVersion": "v1", "kind": "Pod", "name": "spark-pi-driver", "namespace": ns,
            "uid": created.metadata.uid}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def recorders(api: client.ApiClient, clock: FakeClock) -> Iterator[Any]:
    made: list[EventRecorder] = []

    def make(api_client: client.ApiClient = api, **options: Any) -> EventRecorder:
        made.append(EventRecorder(api_client, clock=clock, **options))
        return made[-1]

    yield make
    for recorder in made:
        recorder.close(timeout=1)


def events_about(api: client.ApiClient, ref: dict[str, Any]) -> list[dict[str, Any]]:
    """The events.k8s.io/v1 Events regarding ``ref`` (by uid), each checked against the API's rules."""
    found = [e for e in list_events(api, ref.get("namespace") or "default")
             if (e.get("regarding") or {}).get("uid") == ref["uid"]]
    for event in found:
        assert not problems(event), (problems(event), event)
    return found


def series_count(event: dict[str, Any]) -> int:
    return int((event.get("series") or {}).get("count") or 1)


def when(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_an_event_carries_the_reference_reason_note_type_action_and_reporter(api: client.ApiClient,
                                                                             pod: dict[str, Any],
                                                                             recorders: Any) -> None:
    recorder = recorders(instance="replica-a")
    recorder.record(pod, "Warning", "GangWaiting", "2 of 4 members fit", "HoldGate")
    assert recorder.flush(5)
    [event] = events_about(api, pod)
    assert re.fullmatch(r"spark-pi-driver\.[0-9a-f]{16}", event["metadata"]["name"]), event["metadata"]["name"]
    assert event["metadata"]["namespace"] == pod["namespace"]
    assert event["regarding"] == {k: pod[k] for k in ("apiVersion", "kind", "name", "namespace", "uid")}
    assert (event["type"], event["reason"], event["note"], event["action"]) == (
        "Warning", "GangWaiting", "2 of 4 members fit", "HoldGate")
    assert (event["reportingController"], event["reportingInstance"]) == ("kubenexus-controller", "replica-a")
    assert "series" not in event, "the first occurrence has no series"
    assert abs(when(event["eventTime"]) - datetime.datetime.now(datetime.UTC)) < datetime.timedelta(seconds=5)
    assert recorder.dropped == 0 and recorder.written == 1


def test_an_event_about_a_cluster_scoped_object_goes_to_the_default_namespace(api: client.ApiClient,
                                                                             recorders: Any) -> None:
    node = {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": str(uuid.uuid4())}
    recorder = recorders(controller="example.com/gate-test")
    recorder.record(node, "Normal", "CapacityChanged", "node-a has room again")
    assert recorder.flush(5)
    [event] = events_about(api, node)
    assert event["metadata"]["namespace"] == "default" and "namespace" not in event["regarding"]
    assert event["reportingController"] == "example.com/gate-test"
    assert event["reportingInstance"] == "example.com/gate-test", "without an instance: the controller's name"


def test_identical_events_within_the_interval_are_written_once(api: client.ApiClient, pod: dict[str, Any],
                                                               clock: FakeClock, recorders: Any) -> None:
    recorder = recorders(repeat_interval=60)
    for _ in range(3):
        recorder.record(pod, "Warning", "GangWaiting", "2 of 4 members fit")
        clock.now += 10
    recorder.record(pod, "Warning", "GangWaiting", "3 of 4 members fit")  # another note: another event
    assert recorder.flush(5)
    assert sorted((e["note"], series_count(e)) for e in events_about(api, pod)) == [
        ("2 of 4 members fit", 1), ("3 of 4 members fit", 1)]
    assert recorder.dropped == 0 and recorder.written == 2


def test_a_repeat_after_the_interval_counts_up_the_same_events_series(api: client.ApiClient, pod: dict[str, Any],
                                                                      clock: FakeClock, recorders: Any) -> None:
    recorder = recorders(repeat_interval=60)
    recorder.record(pod, "Warning", "GangWaiting", "2 of 4 members fit")
    assert recorder.flush(5)
    [first] = events_about(api, pod)

    clock.now += 61
    recorder.record(pod, "Warning", "GangWaiting", "2 of 4 members fit")
    assert recorder.flush(5)
    [second] = events_about(api, pod)
    assert second["metadata"]["name"] == first["metadata"]["name"] and second["series"]["count"] == 2
    assert second["eventTime"] == first["eventTime"] and second["note"] == first["note"]
    assert when(second["series"]["lastObservedTime"]) >= when(first["eventTime"])

    # Suppressed occurrences still count: the series counts how often it happened, not how often it was written.
    recorder.record(pod, "Warning", "GangWaiting", "2 of 4 members fit")
    recorder.record(pod, "Warning", "GangWaiting", "2 of 4 members fit")
    clock.now += 61
    recorder.record(pod, "Warning", "GangWaiting", "2 of 4 members fit")
    assert recorder.flush(5)
    [third] = events_about(api, pod)
    assert third["metadata"]["name"] == first["metadata"]["name"] and third["series"]["count"] == 5
    assert when(third["series"]["lastObservedTime"]) >= when(second["series"]["lastObservedTime"])
    assert recorder.dropped == 0 and recorder.written == 3


def test_a_series_never_changes_the_note_nor_the_other_immutable_fields(api: client.ApiClient, pod: dict[str, Any],
                                                                        clock: FakeClock, recorders: Any) -> None:
    """The apiserver refuses an update of an events.k8s.io/v1 Event's note, reason, type, action, eventTime or
    reporter: a series update writes the series alone."""
    recorder = recorders(repeat_interval=0)
    for _ in range(3):
        recorder.record(pod, "Normal", "GangWaiting", "1/2 members present", "HoldGate")
        clock.now += 1
    assert recorder.flush(5)
    [event] = events_about(api, pod)
    immutable = ("note", "reason", "type", "action", "eventTime", "reportingController", "reportingInstance",
                 "regarding")
    recorder.record(pod, "Normal", "GangWaiting", "1/2 members present", "HoldGate")
    assert recorder.flush(5)
    [after] = events_about(api, pod)
    assert {k: after[k] for k in immutable} == {k: event[k] for k in immutable}
    assert after["series"]["count"] == 4


def test_a_repeat_of_a_deleted_event_creates_it_again(api: client.ApiClient, pod: dict[str, Any], clock: FakeClock,
                                                      recorders: Any) -> None:
    recorder = recorders(repeat_interval=60)
    recorder.record(pod, "Normal", "GangReleased", "all 4 members fit")
    assert recorder.flush(5)
    [first] = events_about(api, pod)
    client.EventsV1Api(api).delete_namespaced_event(first["metadata"]["name"], pod["namespace"])  # the event TTL

    clock.now += 61
    recorder.record(pod, "Normal", "GangReleased", "all 4 members fit")
    assert recorder.flush(5)
    [again] = events_about(api, pod)
    assert again["metadata"]["name"] == first["metadata"]["name"] and again["series"]["count"] == 2
    assert recorder.dropped == 0


def test_a_note_longer_than_the_api_allows_is_cut_and_a_long_name_kept_valid(
        api: client.ApiClient, core: client.CoreV1Api, pod: dict[str, Any], recorders: Any) -> None:
    recorder = recorders()
    recorder.record(pod, "Warning", "GangNotCertifiable", "é" * 600 + " the end")  # 1,208 bytes
    long_name = "x" * 250
    other = {**pod, "name": long_name, "uid": str(uuid.uuid4())}
    recorder.record(other, "Normal", "GangWaiting", "1/2 members present")
    assert recorder.flush(5)
    [cut] = events_about(api, pod)
    assert cut["note"] == "é" * 510 + "...", "1,020 bytes of whole characters and an ellipsis"
    [named] = events_about(api, other)
    assert len(named["metadata"]["name"]) == 253 and named["regarding"]["name"] == long_name
    assert recorder.dropped == 0


def test_events_beyond_the_burst_are_dropped_until_tokens_refill(api: client.ApiClient, pod: dict[str, Any],
                                                                 clock: FakeClock, recorders: Any) -> None:
    drops: list[None] = []
    recorder = recorders(burst=3, per_second=0.5, on_dropped=lambda: drops.append(None))
    for i in range(5):
        recorder.record(pod, "Normal", "Attempt", f"attempt {i}")
    assert recorder.flush(5)
    assert sorted(e["note"] for e in events_about(api, pod)) == ["attempt 0", "attempt 1", "attempt 2"]
    assert recorder.dropped == 2 and len(drops) == 2

    clock.now += 1.9  # 0.95 tokens: still nothing
    recorder.record(pod, "Normal", "Attempt", "attempt 5")
    clock.now += 0.2  # one token
    recorder.record(pod, "Normal", "Attempt", "attempt 6")
    assert recorder.flush(5)
    assert sorted(e["note"] for e in events_about(api, pod)) == ["attempt 0", "attempt 1", "attempt 2", "attempt 6"]
    assert recorder.dropped == 3 and len(drops) == 3


def test_the_rate_limit_is_per_object_so_one_chatty_object_starves_no_other(
        api: client.ApiClient, pod: dict[str, Any], recorders: Any) -> None:
    recorder = recorders(burst=2, per_second=0.001)
    other = {**pod, "name": pod["name"] + "-other", "uid": str(pod.get("uid", "")) + "-other"}
    for i in range(4):
        recorder.record(pod, "Normal", "Attempt", f"attempt {i}")
    recorder.record(other, "Normal", "Attempt", "other attempt")
    assert recorder.flush(5)
    assert sorted(e["note"] for e in events_about(api, pod)) == ["attempt 0", "attempt 1"]
    assert [e["note"] for e in events_about(api, other)] == ["other attempt"]
    assert recorder.dropped == 2


def test_close_writes_what_is_queued_and_drops_what_comes_after(api: client.ApiClient, pod: dict[str, Any],
                                                                recorders: Any) -> None:
    recorder = recorders()
    for i in range(3):
        recorder.record(pod, "Normal", "Attempt", f"attempt {i}")
    recorder.close(timeout=5)
    recorder.record(pod, "Normal", "Attempt", "after close")
    assert len(events_about(api, pod)) == 3
    assert recorder.dropped == 1


def test_an_unreachable_api_or_a_bad_reference_never_raises(cluster: LocalCluster, pod: dict[str, Any],
                                                           tmp_path: Any, recorders: Any) -> None:
    kubeconfig = write_kubeconfig(str(tmp_path / "kubeconfig"), f"https://127.0.0.1:{free_port()}", cluster.ca_cert,
                                  "no-token")
    unreachable = config.new_client_from_config(kubeconfig)
    recorder = recorders(unreachable)
    recorder.record(pod, "Warning", "GangWaiting", "2 of 4 members fit")
    recorder.record(None, "Warning", "GangWaiting", "no reference at all")  # type: ignore[arg-type]
    assert recorder.flush(10)
    assert recorder.dropped == 2
    unreachable.close()


def test_a_hung_api_never_blocks_the_caller(cluster: LocalCluster, pod: dict[str, Any], tmp_path: Any,
                                            recorders: Any) -> None:
    with socket.socket() as hung:  # accepts connections (the kernel's backlog), never answers
        hung.bind(("127.0.0.1", 0))
        hung.listen(16)
        kubeconfig = write_kubeconfig(str(tmp_path / "kubeconfig"), f"https://127.0.0.1:{hung.getsockname()[1]}",
                                      cluster.ca_cert, "token")
        recorder = recorders(config.new_client_from_config(kubeconfig), queue_size=2, request_timeout=0.3)
        began = time.monotonic()
        for i in range(10):
            recorder.record(pod, "Normal", "Attempt", f"attempt {i}")
        assert time.monotonic() - began < 0.1
        assert recorder.dropped == 8, "two queued (or one of them being written), the rest dropped"
        assert not recorder.flush(0.1)
        began = time.monotonic()
        recorder.close(timeout=0.1)
        assert time.monotonic() - began < 0.5


def test_record_says_whether_the_event_was_dropped(api: client.ApiClient, pod: dict[str, Any], clock: FakeClock,
                                                   recorders: Any) -> None:
    recorder = recorders(burst=1, per_second=0.5, repeat_interval=60)
    assert recorder.record(pod, "Normal", "GangWaiting", "1/2 members present") is True
    assert recorder.record(pod, "Normal", "GangWaiting", "1/2 members present") is True, "written already"
    assert recorder.record(pod, "Normal", "GangWaiting", "2/2 members present") is False, "no token left"
    clock.now += 2
    assert recorder.record(pod, "Normal", "GangWaiting", "2/2 members present") is True
    assert recorder.flush(5)
    assert sorted(e["note"] for e in events_about(api, pod)) == ["1/2 members present", "2/2 members present"]


def test_an_announcement_the_rate_limit_dropped_is_told_on_a_later_pass(
        api: client.ApiClient, core: client.CoreV1Api, pod: dict[str, Any], clock: FakeClock, recorders: Any) -> None:
    """The controller remembers what it told per gang; a dropped event must not count as told."""
    member = core.read_namespaced_pod(pod["name"], pod["namespace"]).to_dict()
    controller = Controller(api, Config())
    controller.events.close(timeout=1)
    controller.events = recorders(burst=1, per_second=0.5)
    view = controller.state.upsert_pod({
        "metadata": {"name": pod["name"], "namespace": pod["namespace"], "uid": pod["uid"],
                     "labels": {GROUP: "pi", MIN: "2"}},
        "spec": {"schedulingGates": [{"name": GATE}], "containers": member["spec"]["containers"]}})
    assert view.gang is not None
    decision = GangDecision(view.gang, "", Verdict.WAIT, "needs 8 cpu on 1 node; the most free is 2 cpu",
                            cause=Cause.CAPACITY)
    assert controller.events.record(pod, "Normal", "Other", "uses the only token") is True
    controller._announce(decision)  # dropped: no token
    clock.now += 2
    controller._announce(decision)  # told now
    controller._announce(decision)  # and not again
    assert controller.events.flush(5)
    told = [e for e in events_about(api, pod) if e["reason"] == "GangInsufficientCapacity"]
    assert [(e["note"], series_count(e), e["action"]) for e in told] == [
        ("needs 8 cpu on 1 node; the most free is 2 cpu", 1, "HoldGate")]


def test_kubectl_describe_reads_the_same_event_through_core_v1(core: client.CoreV1Api, pod: dict[str, Any],
                                                               clock: FakeClock, recorders: Any) -> None:
    """``kubectl describe pod`` lists core/v1 Events by involvedObject.uid: the same objects, note as message,
    regarding as involvedObject, the series as it is."""
    recorder = recorders(repeat_interval=0)
    for _ in range(3):
        recorder.record(pod, "Normal", "GangWaiting", "1/2 members present", "HoldGate")
        clock.now += 1
    assert recorder.flush(5)
    items = json.loads(core.list_namespaced_event(pod["namespace"], field_selector=f"involvedObject.uid={pod['uid']}",
                                                  _preload_content=False).data)["items"]
    [event] = items
    assert (event["message"], event["reason"], event["type"], event["reportingComponent"]) == (
        "1/2 members present", "GangWaiting", "Normal", "kubenexus-controller")
    assert event["involvedObject"]["name"] == pod["name"] and event["series"]["count"] == 3

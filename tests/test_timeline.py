"""The gang timeline: each member's moments read from pods, Events and PodGroups (``kubenexus/timeline.py``), and the
picture drawn from them (``kubenexus/timeline_html.py``), on plain objects."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from gang import keys
from kubenexus.timeline import Gang, Member, gangs, member, timestamp
from kubenexus.timeline_html import PLOT_LEFT, PLOT_RIGHT, SEGMENTS, render, spans

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 26, 3, 0, 0, tzinfo=UTC).timestamp()


def at(seconds: float) -> str:
    """RFC 3339 at T0 + seconds; whole seconds unless a fraction is given (as the API stores Time and MicroTime)."""
    moment = datetime.fromtimestamp(T0 + seconds, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{moment.microsecond:06d}" if seconds % 1 else "") + "Z"


def pod(name: str, gang: str = "train", created: float = 0, gated: bool = False, scheduled: float | None = None,
        started: float | None = None, finished: float | None = None, phase: str = "Pending",
        ready: float | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "conditions": []}
    if scheduled is not None:
        status["conditions"].append({"type": "PodScheduled", "status": "True", "lastTransitionTime": at(scheduled)})
    if ready is not None:
        status["conditions"].append({"type": "Ready", "status": "True", "lastTransitionTime": at(ready)})
    if started is not None:
        state = ({"terminated": {"startedAt": at(started), "finishedAt": at(finished), "exitCode": 0}}
                 if finished is not None else {"running": {"startedAt": at(started)}})
        status["containerStatuses"] = [{"name": "main", "state": state}]
    return {"metadata": {"name": name, "namespace": "ml", "creationTimestamp": at(created),
                         "labels": {keys.POD_GROUP_LABEL: gang, keys.POD_GROUP_MIN_LABEL: "2"},
                         "annotations": {keys.OWNER_ANNOTATION: f"kubeflow.org/v1/PyTorchJob/{gang}"}},
            "spec": {"schedulingGates": [{"name": keys.GANG_GATE}] if gated else [],
                     "nodeName": "node-a" if scheduled is not None else ""},
            "status": status}


def released(seconds: float, kind: str = "PyTorchJob", name: str = "train") -> dict[str, Any]:
    return {"reason": "GangReleased", "eventTime": at(seconds),
            "regarding": {"kind": kind, "name": name, "namespace": "ml"}}


def test_timestamps_read_time_and_micro_time():
    assert timestamp(at(3)) == T0 + 3
    assert timestamp(at(3.25)) == pytest.approx(T0 + 3.25)
    assert timestamp("2026-11-26T03:00:03.250000+00:00") == pytest.approx(T0 + 3.25)
    assert timestamp(None) is None


def test_a_member_released_by_the_gangs_event_runs_after_its_bind():
    found = member(pod("a", created=1, scheduled=4, started=5, phase="Running"), [T0 + 0.5, T0 + 3.6])
    # the event before its creation belongs to an earlier member; the one in [created, bind + 1s) is its release
    assert (found.created, found.released, found.scheduled, found.running, found.finished) == (
        T0 + 1, pytest.approx(T0 + 3.6), T0 + 4, T0 + 5, None)
    assert found.node == "node-a" and found.phase == "Running"


def test_a_bind_in_the_same_second_as_the_release_is_not_earlier_than_it():
    found = member(pod("a", created=1, scheduled=1, started=1, phase="Running"), [T0 + 1.7])
    assert found.released == found.scheduled == found.running == pytest.approx(T0 + 1.7)


def test_without_an_event_a_member_counts_as_released_at_its_bind():
    found = member(pod("late", created=6, scheduled=7, started=8, phase="Running"), [T0 + 2])
    assert found.released == T0 + 7


def test_a_gated_member_is_not_released_and_an_ungated_unbound_one_is():
    assert member(pod("g", gated=True), [T0 + 1]).released is None
    assert member(pod("u", created=2), [T0 + 3]).released == T0 + 3
    assert member(pod("u", created=2), []).released == T0 + 2  # released, but when is not known


def test_running_falls_back_to_ready_and_a_finished_pod_ends():
    assert member(pod("r", scheduled=1, ready=2, phase="Running"), []).running == T0 + 2
    done = member(pod("d", scheduled=1, started=2, finished=9, phase="Succeeded"), [])
    assert (done.running, done.finished) == (T0 + 2, T0 + 9)
    unknown = pod("x", scheduled=1, ready=2, phase="Succeeded")
    assert member(unknown, []).finished == T0 + 2  # ended, when not known: where it started running


def test_gangs_group_members_and_read_events_on_the_root_or_a_member_and_the_podgroups_release():
    pods = [pod("train-0", scheduled=5, started=6, phase="Running"), pod("train-1", scheduled=5, started=6,
                                                                         phase="Running"),
            pod("solo-0", gang="solo", created=1, scheduled=3, phase="Pending"),
            pod("eval-0", gang="eval", created=2, gated=True),
            {"metadata": {"name": "plain", "namespace": "ml", "creationTimestamp": at(0)}, "spec": {}, "status": {}}]
    events = [released(4.5), released(2.5, "Pod", "solo-0"), released(9, "PyTorchJob", "other"),
              {"reason": "GangWaiting", "eventTime": at(0.5), "regarding": {"kind": "PyTorchJob", "name": "train"}}]
    groups = [{"metadata": {"name": "train", "namespace": "ml"}, "status": {"phase": "Running"}},
              {"metadata": {"name": "eval", "namespace": "ml"}, "status": {"phase": "Waiting"}}]
    found = {g.name: g for g in gangs(pods, events, groups)}
    assert [g.name for g in gangs(pods, events, groups)] == ["train", "solo", "eval"]  # by first creation
    train = found["train"]
    assert (train.phase, train.min_available, train.released, train.running) == ("Running", 2, 2, 2)
    assert [m.released for m in train.members] == [pytest.approx(T0 + 4.5)] * 2
    assert found["solo"].members[0].released == pytest.approx(T0 + 2.5)  # the event on its member
    assert found["solo"].phase == ""  # no PodGroup
    assert found["eval"].released == 0 and found["eval"].waited(T0 + 12) == (10, True)
    assert train.waited(T0 + 12) == (pytest.approx(4.5), False)


def test_the_podgroups_released_at_stands_in_for_expired_events():
    pods = [pod("train-0", created=1, scheduled=9, started=9, phase="Running")]
    groups = [{"metadata": {"name": "train", "namespace": "ml"}, "status": {"releasedAt": at(8)}}]
    assert gangs(pods, [], groups)[0].members[0].released == T0 + 8


def _member(name: str, *moments: float | None) -> Member:
    created, released_, scheduled, running, finished = (*moments, *[None] * (5 - len(moments)))
    assert created is not None
    return Member(name, T0 + created, *(None if m is None else T0 + m for m in (released_, scheduled, running,
                                                                                    finished)), "node-a", "Running")


def test_spans_follow_the_member_through_its_stages_until_now_or_its_end():
    assert spans(_member("w", 0), T0 + 10) == [("waiting", T0, T0 + 10)]
    assert [(k, s - T0, e - T0) for k, s, e in spans(_member("r", 0, 2, 3, 5), T0 + 10)] == [
        ("waiting", 0, 2), ("released", 2, 3), ("starting", 3, 5), ("running", 5, 10)]
    assert [(k, e - T0) for k, _, e in spans(_member("f", 0, 2, 3, 5, 7), T0 + 10)][-1] == ("running", 7)
    # released without a known bind: the released bar runs until now
    assert [(k, e - T0) for k, _, e in spans(_member("u", 0, 2), T0 + 10)] == [("waiting", 2), ("released", 10)]


def _rects(page: str, pod_name: str) -> list[tuple[str, float, float]]:
    group = re.search(rf'<g class="member" data-pod="{re.escape(pod_name)}">(.*?)</g>', page, re.S)
    assert group, pod_name
    return [(kind, float(x), float(width)) for kind, x, width in
            re.findall(r'<rect class="(\w+)" x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', group.group(1))]


def test_the_page_draws_each_member_on_one_time_axis():
    gang = Gang("ml", "train", 2, "Running", (_member("train-0", 0, 2, 3, 5), _member("train-1", 1, 2, 3, 4, 8)))
    waiting = Gang("ml", "eval<&>", 1, "", (_member("eval-0", 4),))
    page = render([gang, waiting], T0 + 10, "namespace ml")
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "http://" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")
    scale = (PLOT_RIGHT - PLOT_LEFT) / 10
    first = _rects(page, "train-0")
    assert [k for k, _, _ in first] == ["waiting", "released", "starting", "running"]
    assert [w for _, _, w in first] == pytest.approx([2 * scale, 1 * scale, 2 * scale, 5 * scale], abs=0.02)
    assert first[0][1] == PLOT_LEFT and first[-1][1] + first[-1][2] == pytest.approx(PLOT_RIGHT, abs=0.02)
    second = _rects(page, "train-1")
    assert second[0][1] == pytest.approx(PLOT_LEFT + scale, abs=0.01)  # created a second later
    assert second[-1][1] + second[-1][2] == pytest.approx(PLOT_LEFT + 8 * scale, abs=0.02)  # finished at 8 s
    assert [k for k, _, _ in _rects(page, "eval-0")] == ["waiting"]
    assert "gang eval&lt;&amp;&gt; (ml)" in page and "eval<&>" not in page
    assert "waited 2s" in page and "waiting 6s" in page
    legend = re.findall(r'<g class="legend-item" data-segment="(\w+)">', page)
    assert legend == [kind for kind, _, _ in SEGMENTS]
    ticks = re.findall(r'<text class="tick" x="[\d.]+" y="[\d.]+">(\w+)</text>', page)
    assert ticks == ["0s", "1s", "2s", "3s", "4s", "5s", "6s", "7s", "8s", "9s", "10s"]


def test_long_waits_get_minute_ticks_and_an_empty_page_says_so():
    gang = Gang("ml", "train", 1, "", (_member("train-0", 0),))
    ticks = re.findall(r'<text class="tick" x="[\d.]+" y="[\d.]+">(\w+)</text>', render([gang], T0 + 3000, "x"))
    assert ticks[:3] == ["0s", "5m", "10m"] and len(ticks) <= 11
    assert "no gang members in namespace ml" in render([], T0, "namespace ml")

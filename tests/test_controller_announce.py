"""The event policy (``controller/announce.py``): from successive decisions about a gang to "a new Event", "the same
Event's series" or nothing. Times are seconds on the controller's clock; the interval is 10 s, the heartbeat 1800 s.
"""

from __future__ import annotations

import random

import pytest

from controller.announce import (
    HEARTBEAT,
    SERIES_INTERVAL,
    Announcer,
    Counts,
    GangTold,
    Phase,
    Tell,
    Telling,
    Told,
    Write,
    count,
    decide,
    material,
    phase_of,
    words,
)
from controller.engine import Cause, GangDecision, Verdict
from controller.members import GangKey, pod_view
from tests.support.contract import GATE, GROUP, MIN

pytestmark = pytest.mark.unit

KEY: GangKey = ("team-a", "train", "uid-1")


def test_the_defaults_are_the_documented_ones() -> None:
    assert (SERIES_INTERVAL, HEARTBEAT) == (10.0, 1800.0)


@pytest.mark.parametrize(("old", "new", "expected"), [
    (40, 40, False), (40, 39, False), (40, 21, False), (40, 20, True), (40, 1, True), (2, 1, True), (3, 2, False),
    (1, 0, True), (0, 1, True), (1, 2, True), (2, 3, False), (5, 10, True), (5, 9, False), (0, 0, False),
])
def test_material_means_halved_doubled_or_reaching_or_leaving_zero(old: int, new: int, expected: bool) -> None:
    assert material(old, new) is expected


@pytest.mark.parametrize(("note", "expected"), [
    ("40/41 members present", "#/# members present"),
    ("4 members like train-worker-0 need 2 cpu, 8Gi memory, 1.5 nvidia.com/gpu each; their 2 eligible nodes have "
     "room for only 1 (free nvidia.com/gpu alone allows no more)",
     "# members like train-worker-0 need # cpu, #Gi memory, # nvidia.com/gpu each; their # eligible nodes have "
     "room for only # (free nvidia.com/gpu alone allows no more)"),
    ("member w-3 on node-12 needs 500m cpu", "member w-3 on node-12 needs #m cpu"),
])
def test_words_are_the_note_without_its_numbers_but_with_the_names(note: str, expected: str) -> None:
    assert words(note) == expected


PENDING_40 = Telling("Pending", "1/41 members present", 40)


def told(telling: Telling, at: float) -> Told:
    return Told.of(telling, at)


@pytest.mark.parametrize(("last", "now", "at", "expected"), [
    # nothing told yet, or another phase: a new Event at once
    (None, PENDING_40, 0.0, Write.NEW),
    (told(PENDING_40, 0.0), Telling("Waiting", "all 41 members present; no room", 1), 0.5, Write.NEW),
    # the same note, before the heartbeat: nothing
    (told(PENDING_40, 0.0), PENDING_40, 5.0, Write.NOTHING),
    (told(PENDING_40, 0.0), PENDING_40, HEARTBEAT - 1, Write.NOTHING),
    # another member arrived: not material (40 -> 39), however late
    (told(PENDING_40, 0.0), Telling("Pending", "2/41 members present", 39), 500.0, Write.NOTHING),
    # the shortfall halved: material, but within the interval it waits (told by a later pass, with its numbers)
    (told(PENDING_40, 0.0), Telling("Pending", "21/41 members present", 20), 9.9, Write.NOTHING),
    (told(PENDING_40, 0.0), Telling("Pending", "21/41 members present", 20), 10.0, Write.NEW),
    (told(PENDING_40, 0.0), Telling("Pending", "40/41 members present", 1), 30.0, Write.NEW),
    # members went away: the shortfall doubled
    (told(Telling("Pending", "39/41 members present", 2), 0.0), Telling("Pending", "37/41 members present", 4),
     10.0, Write.NEW),
    (told(Telling("Pending", "39/41 members present", 2), 0.0), Telling("Pending", "38/41 members present", 3),
     10.0, Write.NOTHING),
    # another limiting resource: other words, material
    (told(Telling("Waiting", "room for only 2 (free cpu alone allows no more)", 2), 0.0),
     Telling("Waiting", "room for only 2 (free nvidia.com/gpu alone allows no more)", 2), 10.0, Write.NEW),
    (told(Telling("Waiting", "room for only 2 (free cpu alone allows no more)", 2), 0.0),
     Telling("Waiting", "room for only 2 (free nvidia.com/gpu alone allows no more)", 2), 3.0, Write.NOTHING),
    # the heartbeat: the same note again counts up its series; numbers that moved a little make a new Event
    (told(PENDING_40, 0.0), PENDING_40, HEARTBEAT, Write.SERIES),
    (told(PENDING_40, 0.0), Telling("Pending", "3/41 members present", 38), HEARTBEAT, Write.NEW),
    # a material change the note does not show (the shortfall is not in its words): the same Event's series
    (told(Telling("Waiting", "at most 3 of 8 members have room now", 8), 0.0),
     Telling("Waiting", "at most 3 of 8 members have room now", 3), 10.0, Write.SERIES),
])
def test_the_policy(last: Told | None, now: Telling, at: float, expected: Write) -> None:
    assert decide(last, now, at) == expected


# --- phases ---------------------------------------------------------------------------------------------------------


def decision(verdict: Verdict, reason: str = "", *, size: int = 41, cause: Cause | None = None, short: int = 0,
             released: list[str] | None = None, plan: dict[str, str] | None = None, timed_out: bool = False,
             waited: float = 0.0) -> GangDecision:
    return GangDecision(KEY, "kubeflow.org/v1/PyTorchJob/train", verdict, reason, plan=dict(plan or {}),
                        released=list(released or []), waited=waited, timed_out=timed_out, size=size, cause=cause,
                        short=short)


@pytest.mark.parametrize(("verdict", "cause", "counts", "whole", "expected"), [
    (Verdict.WAIT, Cause.MEMBERS, Counts(live=3), False, Phase.PENDING),
    (Verdict.WAIT, Cause.CAPACITY, Counts(live=4), False, Phase.WAITING),
    (Verdict.WAIT, Cause.QUEUE, Counts(live=4), False, Phase.WAITING),
    (Verdict.WAIT, Cause.PINNING, Counts(live=4), False, Phase.WAITING),
    (Verdict.NEVER_FITS, None, Counts(live=4), False, Phase.NEVER_FITS),
    (Verdict.NOT_CERTIFIABLE, None, Counts(live=4), False, Phase.NOT_CERTIFIABLE),
    (Verdict.RELEASE, None, Counts(live=4), False, Phase.RELEASING),
    (Verdict.RUNNING, None, Counts(live=4, running=3), False, Phase.RELEASING),
    (Verdict.RUNNING, None, Counts(live=4, running=4), True, Phase.RUNNING),
    (Verdict.RUNNING, None, Counts(live=2, running=2, succeeded=2), True, Phase.RUNNING),  # ran whole, still running
    (Verdict.RUNNING, None, Counts(live=0, succeeded=4), True, Phase.SUCCEEDED),
    (Verdict.RUNNING, None, Counts(live=1, running=1, succeeded=4), True, Phase.RUNNING),  # an extra still runs
    (Verdict.RUNNING, None, Counts(live=2, running=2, failed=2), True, Phase.FAILED),  # 2 left of 4, no room held
    (Verdict.RUNNING, None, Counts(live=0, succeeded=3, failed=1), True, Phase.FAILED),
    (Verdict.RUNNING, None, Counts(live=2, running=1, failed=2), False, Phase.FAILED),
    (Verdict.RUNNING, None, Counts(live=4, running=3, failed=1), False, Phase.RELEASING),  # a replacement is there
    (Verdict.EVICT, None, Counts(live=4), False, None),
])
def test_phase_of(verdict: Verdict, cause: Cause | None, counts: Counts, whole: bool, expected: Phase | None) -> None:
    assert phase_of(decision(verdict, size=4, cause=cause), counts, whole) == expected


def test_a_gang_with_room_held_for_replacements_has_not_failed() -> None:
    lost = decision(Verdict.RUNNING, size=4)
    assert phase_of(lost, Counts(live=2, running=2, failed=2), True, replacing=True) == Phase.RUNNING
    assert phase_of(lost, Counts(live=2, running=2, failed=2), True, replacing=False) == Phase.FAILED


def test_count_reads_the_members_states() -> None:
    def pod(name: str, phase: str = "Pending", node: str = "", deleting: bool = False) -> dict[str, object]:
        meta: dict[str, object] = {"name": name, "namespace": "team-a", "uid": name, "labels": {GROUP: "t", MIN: "5"}}
        if deleting:
            meta["deletionTimestamp"] = "2026-11-22T09:00:00Z"
        return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"name": "c"}]}, "status": {"phase": phase}}

    pods = [pod("gated") | {"spec": {"schedulingGates": [{"name": GATE}], "containers": [{"name": "c"}]}},
            pod("bound", node="n"), pod("runs", "Running", "n"), pod("done", "Succeeded", "n"),
            pod("broke", "Failed", "n"), pod("going", "Running", "n", deleting=True)]
    assert count(pod_view(p) for p in pods) == Counts(live=3, running=1, succeeded=1, failed=1)


# --- a gang, pass after pass ----------------------------------------------------------------------------------------


class Passes:
    """An Announcer fed pass after pass; every Event it asks for is written (unless ``drop``)."""

    def __init__(self) -> None:
        self.announcer = Announcer()
        self.written: list[tuple[float, Tell]] = []

    def run(self, at: float, d: GangDecision, counts: Counts | None = None, whole: bool = False,
            drop: bool = False) -> list[Tell]:
        tells = self.announcer.tells(d, counts or Counts(), whole, at)
        for tell in tells:
            if not drop:
                self.announcer.told(d.key, tell, at)
                self.written.append((at, tell))
        return tells

    def notes(self) -> list[tuple[float, str, str, Write, bool]]:
        return [(at, t.reason, t.note, t.write, t.members) for at, t in self.written]


def pending(present: int, size: int = 41) -> GangDecision:
    return decision(Verdict.WAIT, f"{present}/{size} members present", size=size, cause=Cause.MEMBERS,
                    short=size - present)


def released(count: int, size: int = 41, nodes: int = 11) -> GangDecision:
    names = [f"train-{i}" for i in range(count)]
    return decision(Verdict.RELEASE, f"all {size} members fit on {nodes} node(s)", size=size, released=names,
                    plan={n: f"node-{i % nodes}" for i, n in enumerate(names)})


def test_a_1_plus_40_gang_arriving_member_by_member_makes_a_handful_of_events() -> None:
    """One member a second: a note when the shortfall has halved (and 10 s have passed), then the release."""
    passes = Passes()
    for second in range(40):
        passes.run(float(second), pending(second + 1))
    passes.run(40.0, released(41))
    assert passes.notes() == [
        (0.0, "GangWaiting", "1/41 members present", Write.NEW, False),
        (20.0, "GangWaiting", "21/41 members present", Write.NEW, False),  # 20 missing: half of 40
        (30.0, "GangWaiting", "31/41 members present", Write.NEW, False),  # 10: half of 20
        # 5 missing at 35 s: material, but within 10 s of the last note; complete at 40 s
        (40.0, "GangReleased", "released 41 members of gang train on a plan over 11 nodes: all 41 members fit on "
                               "11 node(s)", Write.NEW, False),
    ]


def test_a_burst_of_arriving_members_makes_one_note() -> None:
    passes = Passes()
    for tenth in range(40):
        passes.run(tenth / 10, pending(tenth + 1))
    passes.run(4.0, released(41))
    assert [(reason, note) for _, reason, note, _, _ in passes.notes()] == [
        ("GangWaiting", "1/41 members present"),
        ("GangReleased", "released 41 members of gang train on a plan over 11 nodes: all 41 members fit on 11 node(s)")]


def test_the_last_member_missing_is_told_once_the_interval_has_passed() -> None:
    """The issue's "25/41 present" while 40 of 41 were: a gang stuck one short says so within the interval."""
    passes = Passes()
    passes.run(0.0, pending(25))
    for second in range(1, 16):
        passes.run(float(second), pending(min(25 + second, 40)))
    assert [(at, note) for at, _, note, _, _ in passes.notes()] == [(0.0, "25/41 members present"),
                                                                   (10.0, "35/41 members present")]
    for second in range(16, 60):  # nothing more arrives
        passes.run(float(second), pending(40))
    assert [(at, note) for at, _, note, _, _ in passes.notes()][2:] == [(20.0, "40/41 members present")]


def test_a_waiting_gang_tells_its_members_on_the_transition_and_the_root_alone_after() -> None:
    passes = Passes()
    short = "41 members like train-worker-0 need 1 nvidia.com/gpu each; their 4 eligible nodes have room for only {}"
    passes.run(0.0, pending(41 - 1))
    passes.run(1.0, decision(Verdict.WAIT, short.format(8), cause=Cause.CAPACITY, short=33))
    passes.run(2.0, decision(Verdict.WAIT, short.format(9), cause=Cause.CAPACITY, short=32))  # not material
    passes.run(12.0, decision(Verdict.WAIT, short.format(30), cause=Cause.CAPACITY, short=11))  # halved
    for at in (HEARTBEAT, HEARTBEAT + 12, HEARTBEAT + 13):  # 1800 s after the last note: its series counts up
        passes.run(at, decision(Verdict.WAIT, short.format(30), cause=Cause.CAPACITY, short=11))
    assert passes.notes() == [
        (0.0, "GangWaiting", "40/41 members present", Write.NEW, False),
        (1.0, "GangInsufficientCapacity", short.format(8), Write.NEW, True),
        (12.0, "GangInsufficientCapacity", short.format(30), Write.NEW, False),
        (HEARTBEAT + 12, "GangInsufficientCapacity", short.format(30), Write.SERIES, False),
    ]


def test_release_events_count_every_member_of_one_release() -> None:
    """A Spark driver released on a plan for it and 10 expected executors, which come one a second and are released
    into their slots: the release Event counts them all (at most once per interval), not "released 1 member"; a
    release held back by the interval is told before the Running it led to, never after."""
    passes = Passes()
    size, plan = 11, {"pi-driver": "cpu-0"} | {f"executor (expected #{i + 1})": f"cpu-{i % 3}" for i in range(10)}
    passes.run(0.0, decision(Verdict.RELEASE, "all 11 members fit on 3 node(s) (10 more expected later)", size=size,
                             released=["pi-driver"], plan=plan))
    for i in range(10):
        room = "member(s) of a running gang released into the room held for them"
        passes.run(2.0 + i, decision(Verdict.RELEASE, room, size=size, released=[f"pi-exec-{i + 1}"],
                                     plan={f"pi-exec-{i + 1}": f"cpu-{i % 3}"}),
                   Counts(live=i + 2, running=i + 1))
    for second in range(12, 30):
        passes.run(float(second), decision(Verdict.RUNNING, "released", size=size), Counts(live=11, running=11), True)
    assert passes.notes() == [
        (0.0, "GangReleased", "released 1 member of gang train on a plan over 3 nodes: all 11 members fit on 3 node(s) "
                              "(10 more expected later)", Write.NEW, False),
        (10.0, "GangReleased", "released 10 members of gang train on a plan over 3 nodes: member(s) of a running gang "
                               "released into the room held for them", Write.NEW, False),
        (12.0, "GangReleased", "released 11 members of gang train on a plan over 3 nodes: member(s) of a running "
                               "gang released into the room held for them", Write.NEW, False),
        (12.0, "GangRunning", "gang train runs: 11 of its 11 members running", Write.NEW, False),
    ]


def test_phase_transitions_to_the_end() -> None:
    passes = Passes()
    passes.run(0.0, released(4, size=4, nodes=2))
    passes.run(1.0, decision(Verdict.RUNNING, "released", size=4), Counts(live=4, running=2))  # Releasing still
    passes.run(2.0, decision(Verdict.RUNNING, "released", size=4), Counts(live=4, running=4), True)
    passes.run(3.0, decision(Verdict.RUNNING, "released", size=4), Counts(live=2, running=2, succeeded=2), True)
    passes.run(4.0, decision(Verdict.RUNNING, "released", size=4), Counts(succeeded=4), True)
    passes.run(HEARTBEAT * 3, decision(Verdict.RUNNING, "released", size=4), Counts(succeeded=4), True)  # no heartbeat
    assert [(at, reason, note) for at, reason, note, _, _ in passes.notes()] == [
        (0.0, "GangReleased",
         "released 4 members of gang train on a plan over 2 nodes: all 4 members fit on 2 node(s)"),
        (2.0, "GangRunning", "gang train runs: 4 of its 4 members running"),
        (4.0, "GangSucceeded", "gang train succeeded: 4 of its 4 members succeeded"),
    ]
    failed = Passes()
    failed.run(0.0, released(4, size=4, nodes=2))
    failed.run(1.0, decision(Verdict.RUNNING, "released", size=4), Counts(live=2, running=2, failed=2))
    assert failed.notes()[-1][1:3] == ("GangFailed", "gang train failed: 2 members failed; 2 left of the 4 it needs")


def test_an_evicted_gang_starts_over() -> None:
    """Evicted (told by the eviction's own events), recreated, released again: a new release is counted afresh."""
    passes = Passes()
    passes.run(0.0, released(4, size=4, nodes=2))
    passes.run(1.0, decision(Verdict.EVICT, "w-1 was rejected by its kubelet", size=4))
    passes.run(2.0, pending(2, size=4))
    passes.run(3.0, released(4, size=4, nodes=2))
    assert [(at, reason, note.split(":")[0]) for at, reason, note, _, _ in passes.notes()] == [
        (0.0, "GangReleased", "released 4 members of gang train on a plan over 2 nodes"),
        (2.0, "GangWaiting", "2/4 members present"),
        (3.0, "GangReleased", "released 4 members of gang train on a plan over 2 nodes"),
    ]


def test_the_timeout_is_told_once_per_wait() -> None:
    passes = Passes()
    late = decision(Verdict.WAIT, "no room", cause=Cause.CAPACITY, short=3, timed_out=True, waited=1801)
    passes.run(0.0, late)
    passes.run(1.0, late)
    passes.run(2.0, released(41))
    passes.run(3.0, decision(Verdict.EVICT, "stuck"))
    passes.run(4.0, late)
    timeouts = [(at, note, members) for at, reason, note, _, members in passes.notes() if reason == "GangTimeout"]
    note = "gang train has waited 1801s, longer than its schedule timeout; still gated: no room"
    assert timeouts == [(0.0, note, True), (4.0, note, True)]


def test_a_dropped_event_is_told_on_a_later_pass() -> None:
    passes = Passes()
    assert [t.reason for t in passes.run(0.0, pending(1), drop=True)] == ["GangWaiting"]
    assert [t.reason for t in passes.run(0.5, pending(2))] == ["GangWaiting"]
    assert passes.notes() == [(0.5, "GangWaiting", "2/41 members present", Write.NEW, False)]
    assert passes.run(1.0, pending(3)) == []


class Always(Announcer):
    """The policy without the shortcut for unchanged input: what every pass would ask for, computed in full."""

    def tells(self, decision: GangDecision, counts: Counts, whole: bool, at: float, replacing: bool = False
              ) -> list[Tell]:
        return self._tells(self.gangs.setdefault(decision.key, GangTold()), decision, counts, whole, at, replacing)


def test_the_shortcut_for_unchanged_passes_asks_for_what_the_full_policy_asks_for() -> None:
    rng = random.Random(12)
    for _ in range(200):
        fast, full = Announcer(), Always()
        at, present = 0.0, 1
        for _ in range(60):
            at += rng.choice((0.05, 0.5, 2.0, 9.0, 11.0, 700.0))
            present = min(max(present + rng.choice((-1, 0, 0, 1, 3)), 1), 8)
            choice = rng.random()
            if choice < 0.5:
                d = pending(present, size=8)
            elif choice < 0.7:
                d = decision(Verdict.WAIT, f"room for only {rng.choice((2, 3, 6))}", size=8, cause=Cause.CAPACITY,
                             short=rng.choice((6, 5, 2)), timed_out=rng.random() < 0.3, waited=1801)
            elif choice < 0.8:
                d = released(rng.choice((1, 8)), size=8, nodes=2)
            else:
                d = decision(Verdict.RUNNING, "released", size=8)
            counts = Counts(live=8, running=rng.choice((0, 8)))
            drop = rng.random() < 0.1
            got = [fast.tells(d, counts, True, at), full.tells(d, counts, True, at)]
            assert got[0] == got[1], (at, d)
            for announcer, tells in zip((fast, full), got, strict=True):
                for tell in tells if not drop else ():
                    announcer.told(d.key, tell, at)

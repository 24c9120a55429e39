"""What the gate controller tells users in Events about a gang, and when: on phase transitions and when the reason's
numbers change materially, aggregated per gang, never once per arriving member.

A gang's phase (the PodGroup's words) follows from the pass's decision and its members: ``Pending`` (members
missing), ``Waiting`` (complete, no plan now), ``Releasing`` (released, not yet min-available running), ``Running``,
``Succeeded``, ``Failed``, ``NeverFits``, ``NotCertifiable``. Three channels per gang are told about:

- the phase: an Event of the phase's reason (``PHASE_EVENTS``; ``Releasing`` is told by the release channel);
- the release: ``GangReleased``, counting every member released since the gang was released (the first stage, then
  its expected members and replacements, pass after pass), over the nodes of its plans; a release the interval held
  back is told before the phase Event that follows it (``GangRunning`` never precedes the release it came from);
- the schedule timeout: ``GangTimeout``, once per wait;
- released members no scheduler picks up (``controller/schedulers.py``): ``GangNotScheduled``, once until one does;
- its root opted out while its pods exist: ``GangOptedOut``, with the members it released to ordinary scheduling.

``decide`` is the policy, pure: from what a channel last told and what this pass says, a new Event, the same Event
again (its series counts up), or nothing:

- another phase: a new Event at once;
- the same phase, a material change: the reason's words other than its numbers (another limiting resource, another
  bound, a starvation plan) or its shortfall (members missing, members without room, members not yet released)
  halved, doubled, reached or left 0. Told at most once per ``SERIES_INTERVAL``: a change within it waits, and is
  told with the numbers of the pass that tells it (a burst of arriving members makes one note, not one each);
- a waiting gang (Pending, Waiting, NeverFits, NotCertifiable) with nothing material for ``HEARTBEAT``: told again,
  so that a gang that waits for hours keeps an Event (the apiserver's default event TTL is an hour).

In events.k8s.io/v1 an Event's note cannot change (the apiserver refuses an update of it): new numbers make a new
Event, and the note told last, told again, counts up that Event's ``series`` (``kube/events.py``). The counts in a
note are those of the moment it is written.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

from controller import status
from controller.engine import Cause, GangDecision, Verdict
from controller.members import GangKey, PodView
from controller.status import Phase

SERIES_INTERVAL = 10.0  # seconds: a channel's material changes within one phase are told at most this often
HEARTBEAT = 1800.0  # seconds: nothing material for this long, and the channel is told again (client-go's refresh)

# events.k8s.io/v1 ``action``: what the controller did about the regarded object.
HOLD, RELEASE, OBSERVE, EVICT, JOIN, PREEMPT = "HoldGate", "RemoveGate", "Observe", "Evict", "Join", "Preempt"


# Per phase: the Event's reason, type and action, and whether it also goes to gated members (a gated pod's
# ``kubectl describe`` says why it waits). Releasing is told by GangReleased.
PHASE_EVENTS: dict[Phase, tuple[str, str, str, bool]] = {
    Phase.PENDING: ("GangWaiting", "Normal", HOLD, False),
    Phase.WAITING: ("GangInsufficientCapacity", "Normal", HOLD, True),
    Phase.NEVER_FITS: ("GangNeverFits", "Warning", HOLD, True),
    Phase.NOT_CERTIFIABLE: ("GangNotCertifiable", "Warning", HOLD, True),
    Phase.RUNNING: ("GangRunning", "Normal", OBSERVE, False),
    Phase.SUCCEEDED: ("GangSucceeded", "Normal", OBSERVE, False),
    Phase.FAILED: ("GangFailed", "Warning", OBSERVE, False),
}
_WAITS = (Phase.PENDING, Phase.WAITING, Phase.NEVER_FITS, Phase.NOT_CERTIFIABLE, Phase.PREEMPTING)
# A complete gang that waits for something else than capacity, told as a state of its own: its root's constraints
# cannot be read, no scheduler serves its schedulerName.
CAUSE_EVENTS: dict[Cause, tuple[str, str, str, bool]] = {
    Cause.ROOT: ("GangConstraintsUnknown", "Warning", HOLD, True),
    Cause.NO_SCHEDULER: ("GangNotScheduled", "Warning", HOLD, True),
    Cause.QUOTA: ("GangQueued", "Normal", HOLD, True),
    Cause.QUEUE_UNKNOWN: ("GangQueueUnknown", "Warning", HOLD, True),
}


@dataclass(frozen=True)
class Counts:
    """A gang's members by state: live (neither finished nor deleting), running, succeeded, failed."""

    live: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0


def count(members: Iterable[PodView]) -> Counts:
    live = running = succeeded = failed = 0
    for pod in members:
        if pod.deleting:
            continue
        if pod.terminal:
            failed += pod.failed
            succeeded += not pod.failed
        else:
            live += 1
            running += pod.running and bool(pod.node)
    return Counts(live, running, succeeded, failed)


def phase_of(decision: GangDecision, counts: Counts, whole: bool, replacing: bool = False) -> Phase | None:
    """The gang's phase as its PodGroup shows it (``status.phase_of``); None for a gang being evicted (the eviction's
    own events tell it). ``whole``: min-available members have run at once; ``replacing``: room is held for
    replacements of failed or deleted members."""
    if decision.decision == Verdict.EVICT:
        return None
    shown = status.Counts(present=counts.live + counts.succeeded, running=counts.running,
                          succeeded=counts.succeeded, failed=counts.failed)
    return status.phase_of(decision, shown, max(decision.size, 1), status.Facts(whole=whole, replacing=replacing))


# --- the policy ---------------------------------------------------------------------------------------------------


class Write(StrEnum):
    NEW = "new"  # a note not told last: a new Event
    SERIES = "series"  # the note told last, again: its Event's series counts up
    NOTHING = "nothing"


_NUMBER = re.compile(r"(?<![\w.-])\d+(?:\.\d+)?")


def words(note: str) -> str:
    """A note without its numbers (those that stand alone, not digits in names like worker-3): what it says."""
    return _NUMBER.sub("#", note)


@dataclass(frozen=True)
class Telling:
    """What one pass says on one channel: ``state`` (a change of it is a transition), the note, and ``short``: how
    far the gang is from done (members missing, without room, not yet released). Its ``shape`` is the note's words
    without numbers, or ``fixed`` when given."""

    state: str
    note: str
    short: int = 0
    fixed: str | None = None

    @cached_property
    def shape(self) -> str:
        return words(self.note) if self.fixed is None else self.fixed


@dataclass(frozen=True)
class Told:
    """What a channel last wrote, and when."""

    state: str
    note: str
    shape: str
    short: int
    at: float

    @classmethod
    def of(cls, telling: Telling, at: float) -> Told:
        return cls(telling.state, telling.note, telling.shape, telling.short, at)


def material(old: int, new: int) -> bool:
    """A shortfall that changed by a large fraction: halved, doubled, reached or left 0."""
    if old == new:
        return False
    if not old or not new:
        return True
    return new * 2 <= old or new >= old * 2


def decide(told: Told | None, now: Telling, at: float, interval: float = SERIES_INTERVAL,
           heartbeat: float = HEARTBEAT) -> Write:
    """The policy (see the module docstring): what to write on a channel that last told ``told``, given ``now``."""
    if told is None or told.state != now.state:
        return Write.NEW
    since = at - told.at
    if (now.note != told.note and now.shape != told.shape) or material(told.short, now.short):
        if since < interval:
            return Write.NOTHING  # told once the interval has passed, with the numbers of then
    elif since < heartbeat:
        return Write.NOTHING
    return Write.SERIES if now.note == told.note else Write.NEW


# --- per gang --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tell:
    """One Event to write: ``channel`` (phase, release, timeout), its reason, type, action and note, a new Event or
    its series, and whether gated members get it too (the root always does)."""

    channel: str
    reason: str
    type: str
    action: str
    telling: Telling
    write: Write
    members: bool

    @property
    def note(self) -> str:
        return self.telling.note


@dataclass
class GangTold:
    """What was told about one gang, per channel, and the release under way."""

    phase: Told | None = None
    release: Told | None = None
    timeout: bool = False
    stranded: bool = False  # told that no scheduler picks up its released members
    released: int = 0  # members released since the gang was released
    nodes: set[str] = field(default_factory=set)  # the nodes of its plans
    release_reason: str = ""  # the reason of the last pass that released members
    counted: tuple[int | None, Counts] | None = None  # the members' counts, as of the gang's version
    quiet: tuple[object, ...] | None = None  # a pass's input that asked for nothing ...
    quiet_until: float = 0.0  # ... and until when the same input asks for nothing again (an interval, a heartbeat)


class Announcer:
    """The channels of every gang; ``tells`` says what to write after a pass, ``told`` records what was written (an
    Event the recorder dropped is not told, and is decided again on the next pass)."""

    def __init__(self, interval: float = SERIES_INTERVAL, heartbeat: float = HEARTBEAT) -> None:
        self.gangs: dict[GangKey, GangTold] = {}
        self.interval, self.heartbeat = interval, heartbeat

    def counts(self, key: GangKey, version: int | None, members: Callable[[], Iterable[PodView]]) -> Counts:
        """The gang's counts, counted again only when a member changed (``version``)."""
        gang = self.gangs.setdefault(key, GangTold())
        if gang.counted is None or gang.counted[0] != version:
            gang.counted = (version, count(members()))
        return gang.counted[1]

    def tells(self, decision: GangDecision, counts: Counts, whole: bool, at: float, replacing: bool = False
              ) -> list[Tell]:
        gang = self.gangs.setdefault(decision.key, GangTold())
        # Most passes change nothing about most gangs: the same input as a pass that asked for nothing, before an
        # interval or a heartbeat is due, asks for nothing (a pass that released members always counts them).
        quiet = None if decision.released else (decision.decision, decision.cause, decision.reason, decision.short,
                                                decision.size, decision.timed_out, counts, whole, replacing)
        if quiet is not None and quiet == gang.quiet and at < gang.quiet_until:
            return []
        tells = self._tells(gang, decision, counts, whole, at, replacing)
        gang.quiet = None if tells else quiet
        if not tells:
            gang.quiet_until = self._due(gang, at)
        return tells

    def _due(self, gang: GangTold, at: float) -> float:
        """When a channel that asked for nothing now may ask for something with the same input: the end of its
        interval (a change waiting for it), then its heartbeat (waiting phases)."""
        due = math.inf
        waits = gang.phase is not None and gang.phase.state.partition(":")[0] in _WAITS
        for told, beats in ((gang.phase, waits), (gang.release, False)):
            if told is not None:
                if told.at + self.interval > at:
                    due = min(due, told.at + self.interval)
                elif beats:
                    due = min(due, told.at + self.heartbeat)
        return due

    def _tells(self, gang: GangTold, decision: GangDecision, counts: Counts, whole: bool, at: float,
               replacing: bool) -> list[Tell]:
        phase = phase_of(decision, counts, whole, replacing)
        if phase is None or phase in _WAITS:  # a release is over (evicted), or none began
            gang.released, gang.release, gang.release_reason = 0, None, ""
            gang.nodes.clear()
        else:
            gang.timeout = False  # released: the next wait is another
        if decision.decision == Verdict.RELEASE and decision.released:
            gang.released += len(decision.released)
            gang.nodes.update(node for node in decision.plan.values() if node)
            gang.release_reason = decision.reason
        tells = []
        if decision.timed_out and not gang.timeout and phase in _WAITS:
            note = (f"gang {decision.name} has waited {decision.waited:.0f}s, longer than its schedule timeout; "
                    f"still gated: {decision.reason}")
            tells.append(Tell("timeout", "GangTimeout", "Warning", HOLD, Telling("timeout", note), Write.NEW, True))
        if decision.decision == Verdict.OPTED_OUT and decision.released:
            tells.append(Tell("optout", "GangOptedOut", "Normal", RELEASE,
                              Telling("optout", f"gang {decision.name}: {decision.reason}"), Write.NEW, False))
        if decision.cause == Cause.NO_SCHEDULER and phase not in _WAITS and phase is not None:
            if not gang.stranded:  # released members nobody binds: told once, until a scheduler acts on them
                tells.append(Tell("stranded", "GangNotScheduled", "Warning", OBSERVE,
                                  Telling("stranded", f"gang {decision.name}: {decision.reason}"), Write.NEW, False))
        else:
            gang.stranded = False
        told = None  # the phase's Event, if this pass tells one
        if phase is not None and decision.cause != Cause.ROOT_UNSEEN:  # (its root may be a watch event away)
            special = CAUSE_EVENTS.get(decision.cause) if phase is Phase.WAITING and isinstance(
                decision.cause, Cause) else None
            state = f"{phase}:{decision.cause}" if special else str(phase)
            telling = Telling(state, _phase_note(phase, decision, counts), decision.short)
            write = decide(gang.phase, telling, at, self.interval, self.heartbeat if phase in _WAITS else math.inf)
            transition = gang.phase is None or gang.phase.state != state
            if write != Write.NOTHING and phase in PHASE_EVENTS:
                reason, type_, action, members = special or PHASE_EVENTS[phase]
                # members hear of transitions; the root alone of every later change and heartbeat
                told = Tell("phase", reason, type_, action, telling, write, members and transition)
            elif write != Write.NOTHING:  # Releasing: told by the release channel; the phase is noted all the same
                gang.phase = Told.of(telling, at)
        if gang.released:
            nodes = len(gang.nodes)
            note = (f"released {gang.released} member{'' if gang.released == 1 else 's'} of gang {decision.name} on "
                    f"a plan over {nodes} node{'' if nodes == 1 else 's'}: {gang.release_reason}")
            telling = Telling("released", note, max(decision.size - gang.released, 0), fixed="released")
            write = decide(gang.release, telling, at, self.interval, math.inf)
            if write == Write.NOTHING and told is not None and gang.release is not None and \
                    gang.release.note != note:  # a release held back by the interval is told before what followed it
                write = Write.NEW
            if write != Write.NOTHING:
                tells.append(Tell("release", "GangReleased", "Normal", RELEASE, telling, write, False))
        return tells + ([told] if told is not None else [])

    def told(self, key: GangKey, tell: Tell, at: float) -> None:
        gang = self.gangs.setdefault(key, GangTold())
        if tell.channel == "timeout":
            gang.timeout = True
        elif tell.channel == "stranded":
            gang.stranded = True
        elif tell.channel == "release":
            gang.release = Told.of(tell.telling, at)
        elif tell.channel == "phase":
            gang.phase = Told.of(tell.telling, at)


def _phase_note(phase: Phase, decision: GangDecision, counts: Counts) -> str:
    name, size = decision.name, decision.size
    if phase == Phase.NEVER_FITS:
        return f"gang {name} can never fit: {decision.reason}"
    if phase == Phase.RUNNING:
        return f"gang {name} runs: {counts.running} of its {size} members running"
    if phase == Phase.SUCCEEDED:
        return f"gang {name} succeeded: {counts.succeeded} of its {size} members succeeded"
    if phase == Phase.FAILED:
        return (f"gang {name} failed: {counts.failed} member{'' if counts.failed == 1 else 's'} failed; "
                f"{counts.live + counts.succeeded} left of the {size} it needs")
    if phase == Phase.RELEASING:
        return f"gang {name} is released: {counts.running} of its {size} members running"
    return decision.reason

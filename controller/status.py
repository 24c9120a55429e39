"""A gang's PodGroup (``deploy/base/podgroup-crd.yaml``): its desired spec and status, from the pass (pure).

Two halves, so that the decision loop never waits on the API and never reads an API object:

* ``desired`` runs on the loop thread, from the pass's ``GangDecision``, the gang's members and what the state knows
  beyond them (ran whole, released in memory, evicted, room held for replacements). It returns a ``Desired``: the
  phase, the counts, the reason and its short form, the plan's nodes, the conditions without their times, and
  candidate times. ``Tracker`` calls it only for gangs whose inputs changed since the last pass.
* ``status_for`` runs on the writer's thread (``controller/podgroups.py``) against the object as stored: times that
  must not move are kept (``scheduleStartTime``; ``releasedAt`` while the gang stays released; a condition's
  ``lastTransitionTime`` while its status holds), and ``observedGeneration`` is the object's generation. The writer
  writes only when the result differs from the stored status. ``spec_for`` is the spec of a PodGroup the controller
  manages (never of a user's).

Phases (one vocabulary for the PodGroup, the metric and ``kubenexus simulate``): ``Pending`` (members missing, or
evicted and waiting for its members to come back), ``Waiting`` (complete, but does not fit now: capacity, pinning,
pods queued for other schedulers), ``Releasing`` (released, fewer than minMember running), ``Running`` (minMember
running, or ran whole and still running), ``Succeeded`` (minMember succeeded and none runs), ``Failed`` (members
failed, too few are left to reach minMember, and no room is held for replacements any more), ``NeverFits``,
``NotCertifiable``. Conditions: ``Released``, ``Schedulable`` (a plan exists now), ``Starving`` (the pass holds a
starvation shadow plan for it), ``TimedOut`` (waiting, longer than its schedule timeout), ``Scheduled`` (a scheduler
serves its schedulerName: False ``NoScheduler`` when none picks up released pods, ``controller/schedulers.py``).

Nothing here varies with time alone (no "waited 12s" in a message): a status changes only when the gang does, so an
unchanged gang is never written again.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from controller.bookkeeping import assemble
from controller.capacity import PODS
from controller.engine import Cause, Cycle, GangDecision, Verdict
from controller.members import GangKey, PodView
from controller.owners import root_reference
from controller.preemption import InFlight
from controller.roots import Unknown
from controller.state import ClusterState
from controller.topology import described
from gang import keys
from gang.names import label_value

Obj = dict[str, Any]


class Phase(StrEnum):
    PENDING = "Pending"
    WAITING = "Waiting"
    RELEASING = "Releasing"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    NEVER_FITS = "NeverFits"
    NOT_CERTIFIABLE = "NotCertifiable"
    PREEMPTING = "Preempting"


RELEASED = frozenset({Phase.RELEASING, Phase.RUNNING, Phase.SUCCEEDED, Phase.FAILED})
CONDITIONS = ("Released", "Schedulable", "Starving", "TimedOut", "Scheduled")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_LIMIT = 253


@dataclass(frozen=True)
class Root:
    """The gang's root object, from its members' owner annotations: the PodGroup's owner."""

    api_version: str
    kind: str
    name: str
    uid: str

    @property
    def explicit(self) -> bool:
        """The root is a user-created PodGroup (an explicit gang): it is the PodGroup itself."""
        return self.kind == keys.PODGROUP_KIND and self.api_version == keys.PODGROUP_API_VERSION

    def owner_reference(self) -> Obj:
        """Not the controller reference: the root's operator does not manage its PodGroup (API conventions: at most
        one controller, the one that manages the object); no blockOwnerDeletion: that needs the right to update the
        root's finalizers, and a PodGroup must never hold up the root's deletion."""
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid}


def root_of(pod: PodView) -> Root | None:
    ref = root_reference(pod)
    if ref is None or not ref.get("uid"):
        return None
    return Root(str(ref["apiVersion"]), str(ref["kind"]), str(ref["name"]), str(ref["uid"]))


def podgroup_name(group: str) -> str:
    """The PodGroup's name: the gang's name when it is a valid object name (a DNS-1123 subdomain, as every root's
    name is), else a valid name derived from it (lowercased, invalid characters replaced, a hash of the original)."""
    if len(group) <= _NAME_LIMIT and _SUBDOMAIN.fullmatch(group):
        return group
    digest = hashlib.sha256(group.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    stem = re.sub(r"[^a-z0-9.-]+", "-", group.lower())
    stem = re.sub(r"\.?-+\.?|\.{2,}", "-", stem).strip("-.")[: _NAME_LIMIT - 11]
    return f"{stem}-{digest}" if stem else digest


@dataclass(frozen=True)
class Counts:
    """How many members are in which state. gated/released/bound/running count live members (neither finished nor
    on their way out); present = live + succeeded (what counts toward minMember)."""

    members: int = 0
    present: int = 0
    gated: int = 0
    released: int = 0
    bound: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    expected: int = 0

    @property
    def live(self) -> int:
        return self.present - self.succeeded


@dataclass(frozen=True)
class Facts:
    """What the state knows about a gang beyond its members' views."""

    whole: bool = False  # had minMember running at once
    pending: Container[str] = frozenset()  # uids released by this pass or an earlier one, not confirmed yet
    evicted: Container[str] = frozenset()  # uids being deleted by the controller
    replacing: bool = False  # room is held for replacements of failed or deleted members
    preempted: str | None = None  # by whom it was preempted, until it runs whole again


@dataclass(frozen=True)
class Desired:
    """What a gang's PodGroup should say, as the loop computed it (see the module docstring)."""

    key: GangKey
    name: str  # the PodGroup's name
    root: Root | None
    sample: PodView | None  # a member
    phase: Phase
    min_member: int
    expected_members: int  # later-stage members announced (staged gangs), 0 otherwise
    priority_class: str
    status: Obj  # without scheduleStartTime, releasedAt, observedGeneration and the conditions' times
    started: float  # when the gang's oldest member was created: scheduleStartTime unless one is stored
    released_at: float  # candidate releasedAt (the pass that saw it released)
    leaving: bool = False  # every member is being deleted (its root was, most likely): no PodGroup to create
    # What its root asks (``controller/roots.py``), for the spec's schedule timeout; None while it cannot be read.
    constraints: Mapping[str, str] | None = None
    gone: bool = False  # no member pod is left (``emptied``): written once, never created for
    queue: str = ""  # the Queue it belongs to, recorded in spec.queue


    @property
    def namespace(self) -> str:
        return self.key[0]


# --- the loop's half ----------------------------------------------------------------------------------------------


def count(members: Iterable[PodView], facts: Facts, expected: int = 0) -> Counts:
    total = present = gated = released = bound = running = succeeded = failed = 0
    for pod in members:
        total += 1
        if pod.terminal:
            if pod.failed:
                failed += 1
            else:
                succeeded += 1
                present += 1
            continue
        if pod.deleting or pod.uid in facts.evicted:
            continue
        present += 1
        gated += pod.gated and pod.uid not in facts.pending
        released += pod.released or pod.uid in facts.pending
        bound += bool(pod.node)
        running += pod.running
    return Counts(total, present, gated, released, bound, running, succeeded, failed, expected)


def phase_of(decision: GangDecision, counts: Counts, min_member: int, facts: Facts) -> Phase:
    verdict = decision.decision
    if verdict is Verdict.NEVER_FITS:
        return Phase.NEVER_FITS
    if verdict is Verdict.NOT_CERTIFIABLE:
        return Phase.NOT_CERTIFIABLE
    if verdict is Verdict.EVICT:
        return Phase.PENDING
    if verdict is Verdict.WAIT:
        if decision.cause == Cause.MEMBERS:
            return Phase.PENDING
        return Phase.PREEMPTING if decision.cause == Cause.PREEMPTING else Phase.WAITING
    if facts.preempted is not None and not counts.present:  # its members deleted: its operator recreates them
        return Phase.PENDING
    if counts.succeeded >= min_member and not counts.running:
        return Phase.SUCCEEDED
    if counts.failed and counts.present < min_member and not facts.replacing:
        return Phase.FAILED
    if counts.running >= min_member or (facts.whole and counts.running):
        return Phase.RUNNING
    return Phase.RELEASING


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def short_resources(reason: str, requested: Iterable[str]) -> list[str]:
    """The requested resources a capacity reason names as short: named after its first ";" (explain.py's sentences
    say what a member needs first, then what the nodes lack), in the order they appear there."""
    tail = reason.split(";", 1)[1] if ";" in reason else reason
    found: list[tuple[int, str]] = []
    for resource in set(requested):
        word = "pod slot" if resource == PODS else resource
        match = re.search(rf"(?<![\w./-]){re.escape(word)}(?![\w/-])", tail)
        if match is None and resource == PODS:
            match = re.search(r"pod limits", tail)
        if match is not None:
            found.append((match.start(), "pods" if resource == PODS else resource))
    return [resource for _, resource in sorted(found)]


def waiting_for(decision: GangDecision, phase: Phase, counts: Counts, needed: int, requested: Iterable[str]) -> str:
    """The short form of the reason, for ``kubectl get podgroups``: what the gang waits for ("" when nothing)."""
    if phase is Phase.NEVER_FITS:
        return "never fits"
    if phase is Phase.NOT_CERTIFIABLE:
        return "not certifiable"
    if phase is Phase.PENDING:
        if decision.decision in (Verdict.EVICT, Verdict.RUNNING):  # evicted or preempted whole
            return "recreated members"
        return _plural(max(needed - counts.present, 1), "member")
    if decision.cause == Cause.NO_SCHEDULER:
        return "a scheduler"
    if phase is Phase.PREEMPTING:
        return "preempted pods to go"
    if phase is Phase.WAITING:
        if decision.cause == Cause.QUEUE:
            return "queued pods"
        if decision.cause == Cause.PINNING:
            return "pinning (mixed gang)"
        if decision.cause in (Cause.ROOT, Cause.ROOT_UNSEEN):
            return "its root's constraints"
        if decision.cause == Cause.QUOTA:
            return "quota"
        if decision.cause == Cause.QUEUE_UNKNOWN:
            return "its queue"
        short = short_resources(decision.reason, requested)
        return "capacity: " + ", ".join(short) if short else "capacity"
    if phase is Phase.RELEASING:
        unbound = counts.released - counts.bound
        if unbound > 0:
            return f"{unbound} to bind"
        if counts.bound > counts.running:
            return f"{counts.bound - counts.running} to start"
        if counts.expected:
            return _plural(counts.expected, "expected member")
        if counts.gated:
            return _plural(counts.gated, "gated member")
    return ""


def _reason(decision: GangDecision, phase: Phase, counts: Counts, min_member: int, preempted: str | None) -> str:
    if decision.decision is not Verdict.RUNNING and decision.reason:
        return decision.reason
    if phase is Phase.PENDING and preempted is not None:
        return (f"{preempted}: its members are deleted; its operator recreates them, and they wait for room as a "
                "gang again")
    if decision.decision is Verdict.RUNNING and decision.reason and decision.reason != "released":
        return decision.reason  # replacements waiting for room, with numbers
    if phase is Phase.SUCCEEDED:
        return f"{counts.succeeded} of {min_member} members succeeded"
    if phase is Phase.FAILED:
        return (f"{_plural(counts.failed, 'member')} failed; {counts.present} of {min_member} left, and no room is "
                "held for replacements")
    if phase is Phase.RUNNING:
        return f"{counts.running} of {min_member} members running"
    return (f"released: {counts.bound} of {counts.released} released members bound, {counts.running} running, "
            f"{min_member} needed")


def _condition(type_: str, status: bool | None, reason: str, message: str) -> Obj:
    return {"type": type_, "status": "Unknown" if status is None else str(status), "reason": reason,
            "message": message}


_NOT_RELEASED = {Phase.PENDING: "MembersMissing", Phase.WAITING: "Waiting", Phase.NEVER_FITS: "NeverFits",
                 Phase.NOT_CERTIFIABLE: "NotCertifiable", Phase.PREEMPTING: "Preempting"}



def conditions(decision: GangDecision, phase: Phase, reason: str, shadow_nodes: int,
               preempted: str | None = None) -> list[Obj]:
    released = phase in RELEASED
    evicted = decision.decision is Verdict.EVICT
    if decision.decision is Verdict.OPTED_OUT:
        done = _condition("Released", True, "OptedOut", reason)
    elif released:
        done = _condition("Released", True, "Released", reason if decision.decision is Verdict.RELEASE else
                          "the gate controller released the gang's members")
    else:
        done = _condition("Released", False, "Evicted" if evicted else _NOT_RELEASED[phase], reason)
    if released:
        plan = _condition("Schedulable", True, "Released", "the gang was released on a plan")
    elif phase is Phase.NEVER_FITS:
        plan = _condition("Schedulable", False, "NeverFits", reason)
    elif phase is Phase.NOT_CERTIFIABLE:
        plan = _condition("Schedulable", None, "NotCertifiable", reason)
    elif phase is Phase.PENDING:
        plan = _condition("Schedulable", None, "Evicted" if evicted else "MembersMissing",
                          "not planned until its members exist")
    elif decision.cause == Cause.QUEUE:
        plan = _condition("Schedulable", True, "PodsQueued", reason)
    elif phase is Phase.PREEMPTING:
        plan = _condition("Schedulable", True, "Preempting", reason)
    elif decision.cause == Cause.PINNING:
        plan = _condition("Schedulable", None, "MixedGangUnpinned", reason)
    elif decision.cause in (Cause.ROOT, Cause.ROOT_UNSEEN):
        plan = _condition("Schedulable", None, "ConstraintsUnknown", reason)
    elif decision.cause == Cause.QUOTA:
        plan = _condition("Schedulable", False, "InsufficientQuota", reason)
    elif decision.cause == Cause.QUEUE_UNKNOWN:
        plan = _condition("Schedulable", None, "QueueUnknown", reason)
    else:
        plan = _condition("Schedulable", False, "InsufficientCapacity", reason)
    if shadow_nodes:
        starving = _condition("Starving", True, "ShadowPlan", f"capacity is held for it on "
                              f"{_plural(shadow_nodes, 'node')} as it frees up")
    else:
        starving = _condition("Starving", False, "NotStarving", "no starvation shadow plan holds room for it")
    if decision.timed_out:
        timed = _condition("TimedOut", True, "ScheduleTimeout", f"waiting longer than its schedule timeout: {reason}")
    elif released:
        timed = _condition("TimedOut", False, "Released", "released")
    else:
        timed = _condition("TimedOut", False, "WithinTimeout", "waiting less than its schedule timeout")
    if decision.cause == Cause.NO_SCHEDULER:
        scheduled = _condition("Scheduled", False, "NoScheduler", reason)
    elif released:
        scheduled = _condition("Scheduled", True, "SchedulerActive", "a scheduler picks up its released members")
    else:
        scheduled = _condition("Scheduled", None, "NotReleased", "nothing released yet")
    found = [done, plan, starving, timed, scheduled]
    if preempted is not None:  # until it runs whole again
        found.append(_condition("Preempted", True, "PreemptedByGang", preempted))
    return found


def _nodes(decision: GangDecision, members: Iterable[PodView], phase: Phase, facts: Facts) -> list[str]:
    """The release plan's nodes: this pass's plan, and where released members are bound, planned or reserved."""
    if phase not in RELEASED:
        return []
    nodes = {node for node in decision.plan.values() if node}
    for pod in members:
        if pod.live and pod.uid not in facts.evicted:
            where = pod.node or (pod.planned_node if pod.released else "")
            if where:
                nodes.add(where)
        nodes.update(pod.reserved_nodes)
    return sorted(nodes)


def _topology(decision: GangDecision) -> Obj:
    """The root's topology request and, once released, the domains the gang runs in (a waiting gang's best domain
    is in its reason: it changes as capacity does)."""
    told: Obj = {"requests": described(decision.topology)}
    if decision.decision in (Verdict.RELEASE, Verdict.RUNNING) and decision.domains:
        told["domains"] = list(decision.domains)
    return told


def preemption(flight: InFlight) -> Obj:
    """A preemptor's preemption as its PodGroup shows it: its victims, whole units, and since when."""
    victims = [{"kind": "Gang" if unit.gang else "Pod", "namespace": unit.pods[0].namespace,
                "name": unit.gang[1] if unit.gang else unit.pods[0].name, "pods": len(unit.pods),
                "priority": unit.priority} for unit in flight.units]
    return {"round": flight.round, "startedAt": rfc3339(flight.started), "victims": victims}


def desired(decision: GangDecision, members: list[PodView], facts: Facts, now: float) -> Desired:
    """The gang's PodGroup as this pass sees it (``members``: every member pod the state holds)."""
    kept = [p for p in members if p.uid not in facts.evicted] or members
    gang = assemble(decision.key, kept) if kept else None
    min_member = decision.size or (gang.min_available if gang else 0) or 1
    expected = gang.expected if gang else ()
    late = sum(1 for p in kept if gang is not None and gang.late(p) and (p.live or (p.terminal and not p.failed)))
    counts = count(members, facts, max(len(expected) - late, 0))
    phase = phase_of(decision, counts, min_member, facts)
    reason = _reason(decision, phase, counts, min_member, facts.preempted)
    requested = {resource for p in kept if p.gated for resource in p.usage} | \
        {resource for e in expected for resource in e.usage}
    needed = gang.needed if gang else min_member
    shadow = decision.shadow
    status: Obj = {
        "phase": str(phase),
        "members": counts.members, "present": counts.present, "gated": counts.gated,
        "released": counts.released, "bound": counts.bound, "running": counts.running,
        "succeeded": counts.succeeded, "failed": counts.failed, "expected": counts.expected,
        "nodes": _nodes(decision, members, phase, facts),
        "reason": reason,
        "waitingFor": waiting_for(decision, phase, counts, needed, requested),
    }
    if decision.topology:
        status["topology"] = _topology(decision)
    shadow_nodes = Counter(shadow.values()) if shadow else Counter()
    if shadow_nodes:
        status["shadowPlan"] = {"members": len(shadow), "nodes": dict(sorted(shadow_nodes.items()))}
    if decision.preemption is not None and phase is Phase.PREEMPTING:
        status["preemption"] = preemption(decision.preemption)
    status["conditions"] = conditions(decision, phase, reason, len(shadow_nodes), facts.preempted)
    sample = gang.sample if gang else (members[0] if members else None)
    classes = Counter(p.priority_class for p in kept if p.priority_class)
    started = gang.oldest if gang and gang.oldest > 0 else now - decision.waited
    root = root_of(sample) if sample else None
    name = root.name if root is not None and root.explicit else podgroup_name(decision.key[1])  # the user's PodGroup
    return Desired(decision.key, name, root, sample, phase,
                   min_member, len(expected), classes.most_common(1)[0][0] if classes else "", status,
                   started if started > 0 else now, now, all(p.deleting for p in members), queue=decision.queue)


def emptied(last: Desired, now: float) -> Desired:
    """The PodGroup of a gang whose member pods are all gone (deleted, or cleaned up after its job ended), from what
    was last desired: its counts at zero and the reason; a gang that had succeeded or failed keeps that phase, any
    other is Pending again (its operator may create its pods anew: a JobSet restart, a recreated pod). Never a
    PodGroup created for it: one that went with its root stays gone."""
    if last.phase in (Phase.SUCCEEDED, Phase.FAILED):
        reason = f"{str(last.phase).lower()}; its member pods are gone"
        status = {**last.status, **dict.fromkeys(_COUNTED, 0), "nodes": [], "reason": reason, "waitingFor": ""}
        status["conditions"] = [{**c, "message": reason} if c["type"] == "Released" else c
                                for c in last.status["conditions"]]
        return replace(last, status=status, gone=True)
    reason = f"no member pod exists: all {last.min_member} needed are gone (deleted, or their job ended)"
    decision = GangDecision(last.key, "", Verdict.WAIT, reason, cause=Cause.MEMBERS, size=last.min_member)
    fresh = desired(decision, [], Facts(), now)
    return replace(fresh, name=last.name, root=last.root, sample=last.sample, priority_class=last.priority_class,
                   constraints=last.constraints, leaving=False, gone=True, queue=last.queue)


_COUNTED = ("members", "present", "gated", "released", "bound", "running", "succeeded", "failed", "expected")


# --- the writer's half: against the object as stored -----------------------------------------------------------


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_for(want: Desired, current: Mapping[str, Any] | None, generation: int, now: float) -> Obj:
    """The status to write over ``current`` (the stored status, or None): ``want.status`` with the times that must not
    move kept from ``current`` and the others set (see the module docstring)."""
    current = current or {}
    status = {k: v for k, v in want.status.items() if k != "conditions"}
    status["scheduleStartTime"] = current.get("scheduleStartTime") or rfc3339(want.started)
    if want.phase in RELEASED:
        stored = current.get("releasedAt")
        status["releasedAt"] = stored if stored and current.get("phase") in RELEASED else rfc3339(want.released_at)
    status["observedGeneration"] = generation
    before = {c.get("type"): c for c in current.get("conditions") or [] if isinstance(c, dict)}
    stamped = []
    for condition in want.status["conditions"]:
        old = before.get(condition["type"])
        since = old.get("lastTransitionTime") if old and old.get("status") == condition["status"] else None
        stamped.append({**condition, "lastTransitionTime": since or rfc3339(now), "observedGeneration": generation})
    status["conditions"] = stamped
    return status


def timeout_seconds(annotations: Mapping[str, str]) -> int | None:
    """The root's schedule timeout as the spec records it (whole seconds, at least 1), None when it sets none."""
    try:
        value = float(annotations.get(keys.SCHEDULE_TIMEOUT_SECONDS) or "")
    except ValueError:
        return None
    if not math.isfinite(value) or value <= 0:
        return None
    return min(max(math.ceil(value), 1), 2**31 - 1)


def spec_for(want: Desired, root_annotations: Mapping[str, str]) -> Obj:
    """The spec of a PodGroup the controller manages: what the gang contract decided."""
    spec: Obj = {"minMember": want.min_member}
    timeout = timeout_seconds(root_annotations)
    if timeout is not None:
        spec["scheduleTimeoutSeconds"] = timeout
    if want.priority_class:
        spec["priorityClassName"] = want.priority_class
    if want.expected_members:
        spec["expectedMembers"] = want.expected_members
    if want.queue:
        spec["queue"] = want.queue
    return spec


def labels_for(want: Desired) -> dict[str, str]:
    labels = {keys.MANAGED_BY_LABEL: keys.MANAGED_BY_CONTROLLER}
    if want.root is not None:
        labels[keys.ROOT_KIND_LABEL] = label_value(want.root.kind.lower())
        labels[keys.ROOT_NAME_LABEL] = label_value(want.root.name)
    return labels


def new_podgroup(want: Desired, root_annotations: Mapping[str, str]) -> Obj:
    """The PodGroup the controller creates for a gang (its status follows through the status subresource)."""
    meta: Obj = {"name": want.name, "namespace": want.namespace, "labels": labels_for(want)}
    if want.root is not None:
        meta["ownerReferences"] = [want.root.owner_reference()]
    return {"apiVersion": keys.PODGROUP_API_VERSION, "kind": keys.PODGROUP_KIND, "metadata": meta,
            "spec": spec_for(want, root_annotations)}


def merge_patch(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> Obj:
    """The JSON merge patch (RFC 7386) from ``current`` to ``wanted``: changed keys, removed ones as null."""
    patch: Obj = {}
    for key, value in wanted.items():
        old = current.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            inner = merge_patch(old, value)
            if inner:
                patch[key] = inner
        elif old != value or key not in current:
            patch[key] = value
    for key in current:
        if key not in wanted:
            patch[key] = None
    return patch


# --- across passes, on the loop thread -------------------------------------------------------------------------


@dataclass
class Tracker:
    """Per gang, the inputs of its last ``Desired``: a pass computes it again only for gangs whose inputs changed
    (a member changed, the verdict or its reason, ran whole, the shadow plan, room held for replacements). Keeps the
    phase of every gang for the per-phase gauge."""

    _inputs: dict[GangKey, tuple[Any, ...]] = field(default_factory=dict)
    phases: dict[GangKey, Phase] = field(default_factory=dict)
    counts: Counter[Phase] = field(default_factory=Counter)

    def update(self, cycle: Cycle, state: ClusterState, now: float) -> tuple[list[Desired], list[GangKey]]:
        """The PodGroups that changed in this pass, and the gangs that are gone (no member left)."""
        changed: list[Desired] = []
        seen: set[GangKey] = set()
        for decision in cycle.gangs:
            key = decision.key
            seen.add(key)
            replacing = any(v.until > now for v in state.vacancies.get(key, ()))
            preempted = state.preempted.get(key)
            inputs = (state.gang_versions.get(key), decision.decision, decision.cause, decision.reason,
                      decision.timed_out, decision.size, key in state.whole, replacing, preempted, decision.queue,
                      tuple(sorted(decision.plan.items())), tuple(sorted(decision.shadow.items())))
            if self._inputs.get(key) == inputs:
                continue
            self._inputs[key] = inputs
            members = state.members(key)
            if not members:
                continue
            want = desired(decision, members, Facts(key in state.whole, state.pending, state.evicted, replacing,
                                                    preempted[0] if preempted else None), now)
            if want.sample is not None:
                constraints = state.roots.constraints(want.sample)
                want = replace(want, constraints=None if isinstance(constraints, Unknown) else constraints)
            self._phase(key, want.phase)
            changed.append(want)
        gone = [key for key in self._inputs if key not in seen]
        for key in gone:
            del self._inputs[key]
            old = self.phases.pop(key, None)
            if old is not None:
                self.counts[old] -= 1
        return changed, gone

    def _phase(self, key: GangKey, phase: Phase) -> None:
        old = self.phases.get(key)
        if old is not None:
            self.counts[old] -= 1
        self.phases[key] = phase
        self.counts[phase] += 1


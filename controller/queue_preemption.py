"""Preemption by Queue policy: a gang its Queue's quota or the nodes hold back takes what gangs of its own Queue
(``preemption.withinQueue: LowerPriority``) or borrowing Queues of its cohort (``reclaimWithinCohort``) hold —
whole gangs only, and only when its whole gang then fits both its quota and the nodes (a witness plan, verified).

Kueue's rules (``pkg/scheduler/preemption``), for whole gangs:

- **Candidates**: running gangs of its own Queue of lower priority (unless ``withinQueue: Never``); gangs of other
  Queues of its cohort while those Queues borrow (``reclaimWithinCohort``: ``Any`` priority, ``LowerPriority``, or
  ``Never``). Other pods are never taken here (priority preemption, ``controller/preemption.py``, takes those).
- **Order**: gangs of other Queues first, then the lower priority, then the newest (Kueue's candidatesOrdering).
- **Borrowers only, no ping-pong**: a gang of another Queue is taken only while that Queue still borrows once the
  victims before it are gone, and only if the preemptor's Queue's weighted share with the gang admitted is at most
  the victim Queue's share without the victim (Kueue's ``LessThanOrEqualToFinalShare``): lending never costs a Queue
  its guaranteed share, and two Queues cannot take gangs back and forth.
- **Minimal**: the shortest run of candidates, in that order, with which quota and a plan both hold (found by
  halving: more victims only free more); then the ones before the last are reprieved, the most important first (at
  most ``REPRIEVES`` of them), while both still hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from controller.bookkeeping import Gang, HeldRoom
from controller.capacity import add
from controller.fitting import Fitting
from controller.members import GangKey
from controller.preemption import Futile, Unit, Victims, unit_of, verified
from controller.problem import Member
from controller.quota import Quota
from controller.state import ClusterState
from controller.topology import Request
from gang.queues import LOWER_PRIORITY, NEVER
from gang.resources import Resources

REPRIEVES = 16  # the most important victims tried for a reprieve (a plan each, over thousands of nodes at worst)


@dataclass(frozen=True)
class Candidate:
    unit: Unit
    queue: str
    other: bool  # of another Queue of the cohort (a reclaim), not its own

    @property
    def order(self) -> tuple[bool, int, float]:
        return not self.other, self.unit.priority, -self.unit.newest


class Reclaim:
    """The engine's unit for preemption by Queue policy (module docstring)."""

    def __init__(self, state: ClusterState, quota: Quota, fitting: Fitting) -> None:
        self.state, self.quota, self.fitting = state, quota, fitting
        self._units: dict[GangKey, Unit | None] = {}  # candidate units, while the state is at ``_units_version``
        self._units_version = -1

    def possible(self, gang: Gang, queue: str) -> bool:
        """Whether its Queue's policy could give it any victim at all (cheap: before ``find`` looks)."""
        view = self.quota.queues[queue]
        spec = view.spec
        if spec.within_queue != NEVER and view.lowest is not None and view.lowest < gang.priority:
            return True
        return bool(spec.cohort) and spec.reclaim != NEVER and any(
            name != queue and other.spec.cohort == spec.cohort and self.quota.borrowing(name)
            for name, other in self.quota.queues.items())

    def candidates(self, gang: Gang, queue: str) -> list[Candidate]:
        spec = self.quota.queues[queue].spec
        found = []
        for key in self.quota.running:
            name = self.quota.of.get(key)
            if key == gang.key or not isinstance(name, str):
                continue
            other = name != queue
            if other and (not spec.cohort or self.quota.queues[name].spec.cohort != spec.cohort
                          or spec.reclaim == NEVER):
                continue
            if not other and spec.within_queue == NEVER:
                continue
            unit = self._unit(key)
            if unit is None or ((not other or spec.reclaim == LOWER_PRIORITY) and unit.priority >= gang.priority):
                continue
            found.append(Candidate(unit, name, other))
        return sorted(found, key=lambda c: c.order)

    def _unit(self, key: GangKey) -> Unit | None:
        """The running gang as a candidate victim (None if it cannot be one), kept while the state does not change:
        every waiting gang of a pass weighs the same running gangs."""
        state = self.state
        if self._units_version != state.version:
            self._units, self._units_version = {}, state.version
        if key in self._units:
            return self._units[key]
        pods = [p for p in state.members(key) if p.live and state.charged_node(p.uid) and p.uid not in state.evicted]
        unit = None if not pods or any(p.deleting or p.permanent for p in pods) else unit_of(
            pods, key, state.violations(pods), state.charged_node)
        self._units[key] = unit
        return unit

    def find(self, gang: Gang, queue: str, members: list[Member], demand: Mapping[str, Decimal], request: Request,
             held: HeldRoom) -> Victims | Futile | None:
        """The victims, ``Futile`` when taking every allowed candidate would not let it fit, None when its Queue's
        policy allows no candidate at all."""
        candidates = self.candidates(gang, queue)
        if not candidates or self.quota.check(queue, demand, gang.key, _freed(candidates)) is not None:
            return None  # no victim could make its quota admit it (say, its own borrowing limit): its reason says why
        share = self.quota.share(queue, demand)
        allowed: list[Candidate] = []  # in order, each allowed with the ones before it gone
        for candidate in candidates:
            if not candidate.other or self._may_take(candidate, allowed, share):
                allowed.append(candidate)
        if self._fits(queue, demand, gang, members, request, held, allowed) is None:
            return Futile(f"taking the gangs its Queue {queue} may preempt ({len(candidates)}: lower-priority gangs of "
                          "its own Queue, gangs of borrowing Queues of its cohort, while they borrow) would not let it "
                          "fit")
        low, high = 1, len(allowed)  # the shortest prefix that fits: more victims only free more (a plan per step)
        while low < high:
            middle = (low + high) // 2
            if self._fits(queue, demand, gang, members, request, held, allowed[:middle]) is not None:
                high = middle
            else:
                low = middle + 1
        chosen = allowed[:low]
        for candidate in sorted(chosen[:-1], key=lambda c: c.unit.importance, reverse=True)[:REPRIEVES]:
            trial = [c for c in chosen if c is not candidate]
            if self._fits(queue, demand, gang, members, request, held, trial) is not None:
                chosen = trial
        placement = self._fits(queue, demand, gang, members, request, held, chosen)
        assert placement is not None
        units = tuple(c.unit for c in chosen)
        nodes = self.fitting.nodes(gang, sorted(set(placement.values())), held, None)
        problems = verified(members, nodes, units, placement)
        if problems:
            return Futile(f"no preemption verified for its plan: {problems[0]}")
        return Victims(units, placement)

    def _may_take(self, candidate: Candidate, chosen: Sequence[Candidate], share: int) -> bool:
        """Its Queue still borrows with the victims chosen so far gone, and would not fall below the preemptor's
        share without it (Kueue's LessThanOrEqualToFinalShare)."""
        gone = _usage([c for c in chosen if c.queue == candidate.queue])
        if not self.quota.borrowing(candidate.queue, gone):
            return False
        after = _usage([c for c in chosen if c.queue == candidate.queue] + [candidate])
        return share <= self.quota.share(candidate.queue, {r: -v for r, v in after.items()})

    def _fits(self, queue: str, demand: Mapping[str, Decimal], gang: Gang, members: list[Member], request: Request,
              held: HeldRoom, chosen: Sequence[Candidate]) -> Mapping[str, str] | None:
        """The plan with ``chosen`` gone, if its Queue then admits it and the nodes hold it."""
        if self.quota.check(queue, demand, gang.key, _freed(chosen)) is not None:
            return None
        room: dict[str, Resources] = {}
        for candidate in chosen:
            for node, usage in candidate.unit.freed.items():
                room[node] = add(room.get(node, {}), usage)
        found = self.fitting.plan_with_room(members, gang, held, request, lambda node: room.get(node, {})).result
        return found.placement


def _freed(candidates: Sequence[Candidate]) -> dict[str, Resources]:
    """What the candidates hold, per Queue."""
    freed: dict[str, Resources] = {}
    for candidate in candidates:
        freed[candidate.queue] = add(freed.get(candidate.queue, {}), _usage([candidate]))
    return freed


def _usage(candidates: Sequence[Candidate]) -> Resources:
    total: Resources = {}
    for candidate in candidates:
        for usage in candidate.unit.freed.values():
            total = add(total, usage)
    return total

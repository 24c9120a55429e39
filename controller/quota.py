"""Quota in the decision pass: a gang is released only when its Queue admits it and its witness plan exists.

The rules (issue 24; names and semantics of Kueue's ClusterQueue, flat: no hierarchy, no flavors):

- **Usage** of a Queue: what its gangs hold — every member charged to a node (bound, or released onto it), running or
  still terminating, and the room held for members to come (a staged gang's slots) or to be replaced (vacancies).
  A resource a Queue's ``nominalQuota`` does not name is not limited by it (and not counted in its usage).
- **Admission**: usage + the gang's requests within ``nominalQuota``; or, in a cohort, beyond it up to
  ``borrowingLimit`` (none: no limit) while the cohort has that much unused (the sum of its Queues' nominal quota
  less the sum of their usage). A gang within its Queue's nominal quota that the cohort cannot cover was lent away:
  it may reclaim (``controller/queue_preemption.py``).
- **Weighted share** (Kueue's dominant resource share, ×1000): the largest, over the resources a Queue names, of its
  usage above nominal divided by the cohort's nominal total of that resource, divided by ``fairSharing.weight``
  (0 when not borrowing; the largest int64 for weight 0 while borrowing).
- **Order** (``ordered``): the head of the Queue whose weighted share would be lowest with it admitted goes first,
  then priority, age and name; within a Queue, priority then age. Gangs in no Queue count as share 0, so without
  Queues (or while none borrows) the order is exactly priority, age, name. ``StrictFIFO``: once a Queue's head waits
  for quota, capacity or a preemption, its later gangs wait behind it (``BestEffortFIFO`` lets them pass); heads that
  can never start (never fits, not certifiable) or are not complete do not hold anything, and no Queue ever holds
  another.
- A gang whose Queue cannot be told (``gang/queues.py`` ``QueueProblem``) waits and says why.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from controller.bookkeeping import Gang, Held
from controller.members import Expected, GangKey, PodView
from controller.roots import Unknown
from controller.state import ClusterState
from gang import keys
from gang.quantity import format_quantity
from gang.queues import STRICT_FIFO, QueueProblem, QueueSpec
from gang.resources import Resources

MAX_SHARE = 2**63 - 1  # Kueue's weightedShare of a weight-0 Queue that borrows


def demand_of(pods: Iterable[PodView], expected: Iterable[Expected] = ()) -> Resources:
    """What releasing ``pods`` (and holding room for ``expected`` members) adds to a Queue's usage."""
    total: Resources = {}
    for usage in itertools.chain((p.usage for p in pods), (e.usage for e in expected)):
        for name, value in usage.items():
            total[name] = total.get(name, Decimal(0)) + value
    return total


def _text(value: Decimal, resource: str) -> str:
    return format_quantity(value, resource)


@dataclass(frozen=True)
class Denied:
    """The Queue does not admit the gang now: why, with numbers; ``lent`` when the gang is within its Queue's
    nominal quota and only the cohort lacks room (others borrowed it: a reclaim may help)."""

    reason: str
    lent: bool = False


@dataclass
class QueueView:
    """One Queue during a pass."""

    spec: QueueSpec
    usage: Resources = field(default_factory=dict)
    reserved: dict[GangKey, Resources] = field(default_factory=dict)  # preemptors' demand while their victims go
    pending: int = 0
    admitted: int = 0
    blocked_by: str = ""  # StrictFIFO: the head its later gangs wait behind
    lowest: int | None = None  # the lowest priority of its running gangs (what withinQueue preemption could take)


class Quota:
    """The engine's unit for Queues: membership, usage, admission, fair-share order (module docstring)."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.queues: dict[str, QueueView] = {}
        self.of: dict[GangKey, str | None | QueueProblem] = {}
        self.running: list[GangKey] = []  # the released gangs that belong to a Queue
        self.spared: frozenset[GangKey] = frozenset()  # the same: what a gang of a Queue never takes by priority
        self._cohorts: dict[str, list[str]] = {}  # cohort -> its Queues
        self._nominal: dict[str, Resources] = {}  # cohort -> the sum of its Queues' nominal quota
        self._used: dict[str, Resources] = {}  # cohort -> the sum of their usage
        self._by_namespace: tuple[int, dict[tuple[str, str], str | None | QueueProblem]] = (-1, {})
        self._last: dict[GangKey, str | None | QueueProblem] = {}  # per gang, its Queue while its root could be read

    @property
    def active(self) -> bool:
        inputs = self.state.queues
        return bool(inputs.specs) or inputs.problem is not None

    # --- the pass ----------------------------------------------------------------------------------

    def begin(self, gangs: Sequence[Gang], started: Iterable[GangKey], held: Held,
              preempting: Mapping[GangKey, Resources]) -> None:
        """Each gang's Queue, and each Queue's usage, at the start of a pass (``preempting``: the demand of gangs
        whose victims are going, in ``held`` as the room held for them, so counted as their Queue's already)."""
        self.queues, self.of, self.running, self.spared = {}, {}, [], frozenset()
        self._cohorts, self._nominal, self._used = {}, {}, {}
        if not self.active:  # no Queue: a gang is in none, unless its root names one (which does not exist)
            for gang in gangs:
                if (named := self._named(gang.sample)) is not None:
                    self.of[gang.key] = self.queue_of(gang.sample, named)
            return
        for spec in self.state.queues.specs.values():
            self.queues[spec.name] = QueueView(spec)
            if spec.cohort:
                self._cohorts.setdefault(spec.cohort, []).append(spec.name)
        for key in [k for k in self._last if k not in self.state.gangs]:
            del self._last[key]
        for gang in gangs:
            self.of[gang.key] = self._resolve(gang.key, gang.sample)
        running = set(started)
        for gang in gangs:
            view = self._view(gang.key)
            if view is not None:
                if gang.key in running:
                    view.admitted += 1
                    view.lowest = gang.priority if view.lowest is None else min(view.lowest, gang.priority)
                    self.running.append(gang.key)
                else:
                    view.pending += 1
        self.spared = frozenset(self.running)
        for key in self.state.gangs:  # every gang holding room, those whose members all leave included
            members = self.state.members(key)
            found = self.of[key] if key in self.of else self._resolve(key, members[0])
            view = self.queues.get(found) if isinstance(found, str) else None
            if view is not None:
                self._add(view, self._held_by(members, held.get(key, {})))  # a preemptor's held room included
                if key in preempting:
                    view.reserved[key] = dict(preempting[key])
        for cohort, names in self._cohorts.items():
            nominal, used = self._nominal.setdefault(cohort, {}), self._used.setdefault(cohort, {})
            for name in names:
                view = self.queues[name]
                for resource, value in view.spec.nominal.items():
                    nominal[resource] = nominal.get(resource, Decimal(0)) + value
                    used[resource] = used.get(resource, Decimal(0)) + view.usage.get(resource, Decimal(0))

    def _resolve(self, key: GangKey, sample: PodView) -> str | None | QueueProblem:
        """The gang's Queue; while its root cannot be read, the one it had when it could (its usage stays where it
        was), else a ``QueueProblem``: never the Queue its namespace would give a root that names none."""
        root = self.state.roots.constraints(sample)
        if isinstance(root, Unknown):
            return self._last.get(key, QueueProblem(f"its Queue cannot be told: {root.reason}"))
        found = self._last[key] = self.queue_of(sample, root.get(keys.QUEUE))
        return found

    def _named(self, sample: PodView) -> str | None:
        """The Queue the root of ``sample``'s gang names (``kubenexus.io/queue``), if it can be read."""
        root = self.state.roots.constraints(sample)
        return root.get(keys.QUEUE) if isinstance(root, Mapping) else None

    def queue_of(self, sample: PodView, named: str | None = None) -> str | None | QueueProblem:
        """The Queue of the gang of ``sample`` (a member): its root's annotation, else the one selecting its
        namespace (cached per namespace)."""
        named = named or self._named(sample)
        inputs = self.state.queues
        version, cache = self._by_namespace
        if version != inputs.version:
            cache = {}
            self._by_namespace = (inputs.version, cache)
        key = (named or "", sample.namespace)
        if key not in cache:
            cache[key] = inputs.queue_of(named, sample.namespace)
        return cache[key]

    def _view(self, key: GangKey) -> QueueView | None:
        name = self.of.get(key)
        return self.queues.get(name) if isinstance(name, str) else None

    def _held_by(self, members: Iterable[PodView], held: Mapping[str, Resources]) -> Resources:
        """What a gang holds: its members charged to nodes (running or terminating) and the room held for it."""
        total: Resources = {}
        for pod in members:
            if not pod.terminal and self.state.charged_node(pod.uid):
                for name, value in pod.usage.items():
                    total[name] = total.get(name, Decimal(0)) + value
        for per_node in held.values():
            for name, value in per_node.items():
                total[name] = total.get(name, Decimal(0)) + value
        return total

    @staticmethod
    def _add(view: QueueView, demand: Mapping[str, Decimal], sign: int = 1) -> None:
        for name in view.spec.nominal:
            if name in demand:
                view.usage[name] = view.usage.get(name, Decimal(0)) + sign * demand[name]

    # --- admission --------------------------------------------------------------------------------

    def check(self, name: str, demand: Mapping[str, Decimal], own: GangKey | None = None,
              freed: Mapping[str, Resources] | None = None) -> Denied | None:
        """None when Queue ``name`` admits ``demand`` now (with ``freed``, per Queue, gone from its usage: a
        preemption's victims); else why not (the first resource that does not fit)."""
        view, freed = self.queues[name], freed or {}
        spec, mine = view.spec, view.reserved.get(own, {}) if own else {}
        gone = freed.get(name, {})
        in_cohort: Resources = {}
        for other, resources in freed.items():
            if spec.cohort and self.queues[other].spec.cohort == spec.cohort:
                for resource, value in resources.items():
                    in_cohort[resource] = in_cohort.get(resource, Decimal(0)) + value
        for resource, nominal in sorted(spec.nominal.items()):
            need = demand.get(resource, Decimal(0))
            if need <= 0:
                continue
            used = (view.usage.get(resource, Decimal(0)) - mine.get(resource, Decimal(0))
                    - gone.get(resource, Decimal(0)))
            after = used + need
            head = f"queue {name}: {resource} {_text(used, resource)}/{_text(nominal, resource)} nominal"
            needs = f"the gang needs {_text(need, resource)}"
            if not spec.cohort:
                if after > nominal:
                    return Denied(f"{head}; {needs}")
                continue
            limit = spec.borrowing_limit.get(resource)
            if limit is not None and after > nominal + limit:
                return Denied(f"{head}, borrowing limit {_text(limit, resource)}; {needs}")
            free = (self._nominal[spec.cohort].get(resource, Decimal(0))
                    - self._used[spec.cohort].get(resource, Decimal(0))
                    + mine.get(resource, Decimal(0)) + in_cohort.get(resource, Decimal(0)))
            if need > free:
                lent = after <= nominal
                said = (f"{head}, but cohort {spec.cohort} has lent the rest: {_text(max(free, Decimal(0)), resource)} "
                        f"free in the cohort" if lent else
                        f"{head}, cohort {spec.cohort} has {_text(max(free, Decimal(0)), resource)} to lend")
                return Denied(f"{said}; {needs}", lent)
        return None

    def charge(self, name: str, demand: Mapping[str, Decimal], own: GangKey | None = None) -> None:
        """A gang of Queue ``name`` released in this pass: its demand is usage from now on (its reservation, if it
        preempted, becomes that usage)."""
        view = self.queues[name]
        if own is not None and own in view.reserved:
            self._account(view, view.reserved.pop(own), -1)
        self._account(view, demand, 1)
        view.admitted += 1
        view.pending = max(view.pending - 1, 0)

    def use(self, name: str, demand: Mapping[str, Decimal]) -> None:
        """A running gang's member beyond its minimum released in this pass: usage from now on."""
        self._account(self.queues[name], demand, 1)

    def _account(self, view: QueueView, demand: Mapping[str, Decimal], sign: int) -> None:
        self._add(view, demand, sign)
        if view.spec.cohort:
            used = self._used[view.spec.cohort]
            for resource in view.spec.nominal:
                if resource in demand:
                    used[resource] = used.get(resource, Decimal(0)) + sign * demand[resource]

    def borrowing(self, name: str, freed: Mapping[str, Decimal] | None = None) -> bool:
        """Queue ``name`` uses more than its nominal quota of some resource (with ``freed`` gone)."""
        view, freed = self.queues[name], freed or {}
        return any(view.usage.get(r, Decimal(0)) - freed.get(r, Decimal(0)) > nominal
                   for r, nominal in view.spec.nominal.items())

    # --- fair sharing ------------------------------------------------------------------------------

    def share(self, name: str | None, extra: Mapping[str, Decimal] | None = None) -> int:
        """The Queue's weighted share ×1000 (module docstring), with ``extra`` usage added (negative: taken away)."""
        view = self.queues.get(name) if name else None
        if view is None or not view.spec.cohort:
            return 0
        spec, total = view.spec, self._nominal[view.spec.cohort]
        ratio = Decimal(0)
        for resource, nominal in spec.nominal.items():
            used = view.usage.get(resource, Decimal(0)) + (extra or {}).get(resource, Decimal(0))
            if used > nominal and total.get(resource, Decimal(0)) > 0:
                ratio = max(ratio, (used - nominal) / total[resource])
        if ratio == 0:
            return 0
        if spec.weight <= 0:
            return MAX_SHARE
        return int(ratio * 1000 / spec.weight)

    def ordered(self, waiting: list[Gang]) -> Iterator[Gang]:
        """``waiting`` (sorted by priority, age, name) in fair-share order: the next gang is the head of the Queue
        whose share would be lowest with it admitted; shares are read again as gangs are released."""
        if not self.queues:
            yield from waiting
            return
        lanes: dict[str | None, list[Gang]] = {}
        for gang in waiting:
            name = self.of.get(gang.key)
            lanes.setdefault(name if isinstance(name, str) else None, []).append(gang)
        order = itertools.count()
        heap: list[tuple[int, int, float, str, str, int, str | None]] = []

        def push(lane: str | None, index: int) -> None:
            gang = lanes[lane][index]
            share = self.share(lane, demand_of(gang.live, gang.expected)) if lane else 0
            heapq.heappush(heap, (share, -gang.priority, gang.oldest, gang.key[0], gang.key[1], next(order), lane))

        positions = dict.fromkeys(lanes, 0)
        for lane in lanes:
            push(lane, 0)
        while heap:
            *_, lane = heapq.heappop(heap)
            index = positions[lane]
            yield lanes[lane][index]
            positions[lane] = index + 1
            if index + 1 < len(lanes[lane]):
                push(lane, index + 1)

    # --- StrictFIFO -----------------------------------------------------------------------------------

    def behind(self, name: str) -> str:
        """The head a StrictFIFO Queue's later gangs wait behind ("" when none)."""
        return self.queues[name].blocked_by

    def holds(self, name: str, gang: Gang) -> None:
        """Gang ``gang``, complete and waiting for quota, capacity or a preemption, heads its StrictFIFO Queue."""
        view = self.queues[name]
        if view.spec.strategy == STRICT_FIFO and not view.blocked_by:
            view.blocked_by = f"{gang.key[0]}/{gang.key[1]}"

    # --- status -------------------------------------------------------------------------------------

    def status(self, name: str) -> dict[str, object]:
        """The Queue's status as this pass leaves it (without the condition's transition time, which the writer
        keeps): usage and borrowing of the resources it names, its gangs, its weighted share, a summary."""
        view = self.queues[name]
        spec = view.spec
        usage = {r: view.usage.get(r, Decimal(0)) for r in sorted(spec.nominal)}
        borrowing = {r: used - spec.nominal[r] for r, used in usage.items() if used > spec.nominal[r]}
        head = f"; later gangs wait behind {view.blocked_by} (StrictFIFO)" if view.blocked_by else ""
        over = ", ".join(f"{_text(v, r)} {r}" for r, v in borrowing.items())
        message = (f"{view.admitted} gang(s) admitted, {view.pending} pending"
                   + ((f", borrowing {over} from cohort {spec.cohort}" if spec.cohort else
                       f", using {over} above its nominal quota without a cohort (lowered after its gangs were "
                       "admitted, or members started without the gate controller's release)") if borrowing else "")
                   + head)
        return {
            "usage": {r: _text(v, r) for r, v in usage.items()},
            "borrowing": {r: _text(v, r) for r, v in borrowing.items()},
            "pendingGangs": view.pending,
            "admittedGangs": view.admitted,
            "weightedShare": self.share(name),
            "usageSummary": " ".join(f"{r} {_text(v, r)}/{_text(spec.nominal[r], r)}" for r, v in usage.items()),
            "observedGeneration": spec.generation,
            "conditions": [{"type": "Active", "status": "True", "reason": "Admitting", "message": message}],
        }

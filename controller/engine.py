"""The decision loop: which gangs to release now, onto which nodes, and why the others wait.

One pass (``Engine.cycle``) looks at every gang in a fixed order and decides against the state
as updated by the decisions before it, so two gangs eligible at the same instant are never
promised the same capacity. The order of work in a pass:

1. Releases already under way (a crash or a lost leadership can leave a gang half released):
   their remaining first-stage members go first, since a release is never rolled back.
2. Gangs that run: late members go into the slots reserved for them, replacements into the
   room their failed predecessor left.
3. Waiting gangs by priority, then age, then name: release when the whole gang (present
   members and the expected later ones) has a witness plan. A gang that has waited past the
   starvation threshold gets a shadow plan over capacity that will free up; lower-ranked gangs
   may then only use what that plan leaves, and what they took there keeps counting until it ends.
4. Extra members of running gangs (beyond min-available), one by one wherever they fit: after
   every whole gang, and within what shadow plans leave, like any backfill.

A released gang ends whole or not at all (``controller/integrity.py`` says what is stuck): a gang
that never ran whole is evicted as a whole when a member cannot bind where it was planned (or was
rejected by its kubelet, or its remaining members find no room); one that ran whole has a stuck
member deleted and replaced. A member someone else released and that is not bound is deleted, so
it comes back through admission, gated. A gang whose plan could be spoiled by pods already queued
for other schedulers waits for them to land.

The engine never talks to the API: the controller (``controller.run``) and ``kubenexus simulate``
feed it the same state, so what simulate prints is what the controller does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum

from controller.capacity import add, fits, subtract
from controller.explain import slots_text, too_big_text
from controller.integrity import Integrity, Stuck, StuckReason
from controller.members import Expected, GangKey, NodeView, PodView
from controller.planner import PlanResult, check_placement, never_fits, plan
from controller.predicates import HostPort, PodInfo, feasible, gang_member_port
from controller.problem import Member, NodeFree
from controller.rooms import RoomIndex, Rooms, Shape, prefix, shape_of
from controller.state import ClusterState
from gang import keys
from gang.config import Config
from gang.resources import Resources


class Verdict(StrEnum):
    """What a pass decided for a gang; the values are what ``kubenexus simulate`` prints."""

    RELEASE = "release"
    WAIT = "wait"
    NEVER_FITS = "never-fits"
    NOT_CERTIFIABLE = "not-certifiable"
    RUNNING = "running"
    EVICT = "evict"


class Cause(StrEnum):
    """Why a waiting gang waits."""

    MEMBERS = "members"  # too few members exist yet
    CAPACITY = "capacity"  # no plan over the free capacity
    PINNING = "pinning"  # a mixed gang, and members are not pinned
    QUEUE = "queue"  # pods queued for other schedulers could take the planned room


# Root annotations the engine reads: (schedule timeout, best effort); see ``RootLookup``.
RootLookup = Callable[[PodView], Mapping[str, str]]


@dataclass(frozen=True)
class Release:
    """Remove the gate of ``pod``, record ``node`` (its room stays reserved until bound) and pin it there
    when ``pin``; record ``reserved_nodes`` for the slots of expected members."""

    pod: PodView
    node: str
    reserved_nodes: tuple[str, ...] = ()
    pin: bool = True


@dataclass(frozen=True)
class Eviction:
    """Delete ``pods`` of gang ``key``: the whole gang (``whole_gang``: it never ran whole, its operator recreates
    it through admission) or single members (a stuck member of a running gang, a member that escaped)."""

    key: GangKey
    owner: str
    pods: tuple[PodView, ...]
    reason: StuckReason
    message: str
    whole_gang: bool


@dataclass
class GangDecision:
    key: GangKey
    owner: str
    decision: Verdict
    reason: str
    plan: dict[str, str] = field(default_factory=dict)
    released: list[str] = field(default_factory=list)
    waited: float = 0.0
    timed_out: bool = False
    present: int = 0
    size: int = 0
    cause: Cause | StuckReason | None = None  # why a waiting gang waits, or why an evicted one could not start

    @property
    def name(self) -> str:
        return self.key[1]


@dataclass
class Cycle:
    gangs: list[GangDecision]
    releases: list[Release]
    evictions: list[Eviction] = field(default_factory=list)


@dataclass
class _Gang:
    """A gang as one pass sees it."""

    key: GangKey
    members: list[PodView]
    expected: tuple[Expected, ...]
    min_available: int
    priority: int
    oldest: float
    owner: str
    sample: PodView
    apart: bool = False  # some member keeps the others off its node (required pod anti-affinity)
    live: list[PodView] = field(default_factory=list)  # neither finished nor on their way out
    started: bool | None = None  # some member released (see Engine._started), once computed
    # Members that may be stuck (released and unbound, or rejected) and that escaped (loose), once computed: both
    # change only with a member, which makes a new view.
    suspects: list[PodView] | None = None
    loose: list[Stuck] | None = None

    def late(self, pod: PodView) -> bool:
        """A member created after the first stage: it does not announce the expected members."""
        return bool(self.expected) and not pod.expected_text

    @property
    def needed(self) -> int:
        return max(self.min_available - len(self.expected), 1)


def _gang(key: GangKey, members: list[PodView]) -> _Gang:
    announcing = [p for p in members if p.expected_text]
    live = [p for p in members if p.live] or members
    min_available = max((p.min_available for p in members), default=0) or len(live)
    # At least one member of the first stage announces the rest: never more expected than that leaves.
    expected = max((p.expected for p in announcing), key=len, default=())[:max(min_available - 1, 0)]
    return _Gang(
        key=key,
        members=members,
        expected=expected,
        min_available=min_available,
        priority=max(p.priority for p in live),
        oldest=min(p.created for p in live),
        owner=next((p.owner for p in members if p.owner), ""),
        sample=min(live, key=lambda p: (p.created, p.name)),
        apart=any(p.apart for p in members) or any(e.apart for e in expected),
        live=[p for p in members if p.live],
    )


class Engine:
    """Decides releases; owns the caches that make a pass cheap when little changed."""

    def __init__(self, state: ClusterState, config: Config, roots: RootLookup | None = None) -> None:
        self.state = state
        self.config = config
        self.roots = roots or (lambda pod: {})
        self._feasible: dict[str, frozenset[str]] = {}
        self._feasible_version = -1
        self._kinds: dict[str, list[NodeView]] = {}  # nodes by kind, as of _feasible_version
        self._never: dict[tuple, str | None] = {}
        self._fits_somewhere: set[tuple] = set()  # gang shapes proven able to fit on an otherwise empty cluster
        self._slots: dict[GangKey, tuple[str, ...]] = {}  # reserved nodes decided in memory
        self._shadows: dict[GangKey, dict[str, str]] = {}
        # Per node, per pod uid: lower-ranked pods released into a shadow plan's slack there. They count
        # against that slack while they are charged to the node, reserved or bound; a restart forgets them,
        # and they then count as work that will finish (the shadow plan stays feasible, backfill waits).
        self._backfill: dict[str, dict[str, Resources]] = {}
        self._gangs: dict[GangKey, tuple[int, _Gang | None]] = {}  # per gang, as of its members' last change
        self._not_yet: dict[GangKey, tuple[tuple, PlanResult, list[PodView]]] = {}
        self._held_seen: dict[GangKey, dict[str, Resources]] = {}
        self._held_version = 0  # bumps when room held for gangs changes: cached "not yet"s may be stale
        self._partial: dict[GangKey, float] = {}  # since when members run that the gate controller did not release
        self._now = 0.0
        self.rooms = Rooms(state)
        self.integrity = Integrity(state, config.bind_timeout_seconds)

    # --- static feasibility, cached per placement shape ----------------------------------------

    def feasible(self, key: str, spec: Mapping, usage: Mapping[str, Decimal]) -> frozenset[str]:
        """The nodes that pass every filter for members of this placement key; evaluated once
        per node kind (nodes that differ only in name), node by node only when the pod names nodes."""
        if self._feasible_version != self.state.shape_version:
            self._feasible.clear()
            self._kinds.clear()
            self._feasible_version = self.state.shape_version
        nodes = self._feasible.get(key)
        if nodes is None:
            pod = PodInfo.of(spec, {r: v for r, v in usage.items() if r != "pods"})
            if pod.names_nodes:
                views = list(self.state.nodes.values())
            else:
                if not self._kinds:
                    for view in self.state.nodes.values():
                        self._kinds.setdefault(view.kind, []).append(view)
                views = [same[0] for same in self._kinds.values()]
            names = feasible(pod, [view.info for view in views])
            if len(views) < len(self.state.nodes):
                passed = set(names)
                names = [view.name for same in self._kinds.values() if same[0].name in passed for view in same]
            found = frozenset(names)
            # One object per distinct set: sets of frozensets then compare by identity, not element by element.
            nodes = self._feasible[key] = next((s for s in self._feasible.values() if s == found), found)
        return nodes

    def _member(self, pod: PodView, gang: _Gang) -> Member:
        ports = pod.ports | {_apart_port(gang, pod.name, pod.apart)} if gang.apart else pod.ports
        return Member(pod.name, pod.usage, self.feasible(pod.key, pod.spec or {}, pod.usage), ports)

    def _expected_members(self, gang: _Gang) -> list[Member]:
        return [self._expected_member(gang, i) for i in range(len(gang.expected))]

    def _expected_member(self, gang: _Gang, index: int) -> Member:
        e = gang.expected[index]
        name = f"{e.role} (expected #{index + 1})"
        ports = frozenset({_apart_port(gang, name, e.apart)}) if gang.apart else frozenset()
        return Member(name, e.usage, self.feasible(e.key, e.spec, e.usage), ports)

    def _members_on(self, gang: _Gang) -> dict[str, set[HostPort]]:
        """Per node, the pseudo ports of the gang's members already there (bound or released) if it keeps apart."""
        on: dict[str, set[HostPort]] = {}
        for pod in gang.members if gang.apart else ():
            node = self.state.charged_node(pod.uid)
            if node:
                on.setdefault(node, set()).add(_apart_port(gang, pod.name, pod.apart))
        return on

    # --- reservations that are not pods: slots for expected members, vacancies --------------------

    def _slot_nodes(self, gang: _Gang) -> tuple[str, ...]:
        if gang.key in self._slots:
            return self._slots[gang.key]
        return next((p.reserved_nodes for p in gang.members if p.reserved_nodes), ())

    def open_slots(self, gang: _Gang) -> list[tuple[str, Expected]]:
        """Reserved slots of expected members that no released late member has taken yet."""
        nodes = self._slot_nodes(gang)
        return [(nodes[i], gang.expected[i]) for i in self._open_slot_indexes(gang)]

    def _open_slot_indexes(self, gang: _Gang) -> list[int]:
        if not gang.expected or not any(p.live and not gang.late(p) for p in gang.members):
            return []
        nodes = self._slot_nodes(gang)
        open_ = list(range(min(len(nodes), len(gang.expected))))
        for pod in gang.members:
            if gang.late(pod) and not (pod.gated and pod.uid not in self.state.pending):
                where = pod.node or pod.planned_node or self.state.pending.get(pod.uid, "")
                index = next((i for i in open_ if nodes[i] == where), open_[0] if open_ else None)
                if index is not None:
                    open_.remove(index)
        return open_

    def _held(self, gangs: Sequence[_Gang], now: float) -> dict[GangKey, dict[str, Resources]]:
        """Per gang, per node: room held for it (open slots and vacancies) that others must not use."""
        held: dict[GangKey, dict[str, Resources]] = {}
        for gang in gangs:
            if not gang.expected and gang.key not in self.state.vacancies:
                continue
            per_node: dict[str, Resources] = {}
            for node, slot in self.open_slots(gang):
                per_node[node] = add(per_node.get(node, {}), slot.usage)
            for vacancy in self.state.live_vacancies(gang.key, now):
                per_node[vacancy.node] = add(per_node.get(vacancy.node, {}), vacancy.usage)
            if per_node:
                held[gang.key] = per_node
        return held

    # --- capacity as one gang sees it --------------------------------------------------------------

    def _nodes(self, members: Sequence[Member], gang: _Gang, held: Mapping[GangKey, Mapping[str, Resources]],
               limits: Mapping[str, Resources] | None, names: Sequence[str] | None = None) -> list[NodeFree]:
        """Free capacity as ``gang`` sees it on ``names`` (default: every node some member may use): minus
        nominated pods of at least its priority, room held for gangs (its own too), and a starving gang's limits."""
        if names is None:
            names = sorted(set().union(*{m.nodes for m in members})) if members else []
        state = self.state
        own = state.gangs.get(gang.key, ())
        members_on = self._members_on(gang)
        nominated = set(state.nominated_nodes())
        held_nodes = [per_node for per_node in held.values() if per_node]
        result = []
        for name in names:
            free = state.free(name)  # shared with the state: the planner only reads it
            if name in nominated:
                for uid, priority, usage in state.nominated(name):
                    if priority >= gang.priority and uid not in own:
                        free = subtract(free, usage)
            for per_node in held_nodes:
                if name in per_node:
                    free = subtract(free, per_node[name])
            if limits is not None and name in limits:
                free = {r: min(v, limits[name].get(r, v)) for r, v in free.items()}
            ports = state.used_ports(name)
            if name in members_on:
                ports |= members_on[name]
            result.append(NodeFree(name, free, ports))
        return result

    def _plan(self, members: list[Member], shapes: list[Shape], gang: _Gang,
              held: Mapping[GangKey, Mapping[str, Resources]], limits: Mapping[str, Resources] | None) -> PlanResult:
        """``plan`` over the nodes as ``gang`` sees them; the room indexes first say "certainly not" cheaply or
        name the few nodes to try before all of them. Members with host ports (or kept apart) are planned directly."""
        if any(m.host_ports for m in members):
            return plan(members, self._nodes(members, gang, held, limits))
        groups: dict[Shape, list[Member]] = {}
        for member, shape in zip(members, shapes, strict=True):
            groups.setdefault(shape, []).append(member)
        shapes_of = {self.rooms.index(shape, group[0].nodes): shape for shape, group in groups.items()}
        demand = {index: groups[shape] for index, shape in shapes_of.items()}
        slots = {index: index.slots(len(group)) for index, group in demand.items()}
        if any(slots[index] < len(group) for index, group in demand.items()):
            return self._no_room(demand, slots, len(members), shapes_of)
        sets = {m.nodes for m in members}  # interned: one per placement key
        order = self.rooms.sorted_nodes(next(iter(sets)) if len(sets) == 1 else frozenset().union(*sets))
        names = prefix(order, {index: len(group) for index, group in demand.items()})
        if names and len(names) < len(order):
            found = plan(members, self._nodes(members, gang, held, limits, names))
            if found.fits:
                return found
        return plan(members, self._nodes(members, gang, held, limits, order))

    def _no_room(self, demand: Mapping[RoomIndex, list[Member]], slots: Mapping[RoomIndex, int],
                 total: int, shapes: Mapping[RoomIndex, Shape]) -> PlanResult:
        """The planner's reason, from the room indexes: a member no node can hold, or too few slots for a class."""
        short = [(index, group) for index, group in demand.items() if slots[index] < len(group)]
        index, group = next(((i, g) for i, g in short if not slots[i]), short[0])
        if not slots[index]:
            most = {resource: index.most(resource) for resource in index.usage}
            reason = too_big_text(group[0].name, index.usage, len(index.nodes), most, "free")
        else:
            limit = self._limiting(shapes[index], index.nodes, slots[index])
            reason = slots_text(len(group), group[0].name, index.usage, len(index.nodes), slots[index], (), limit)
        placed = sum(min(slots[i], len(g)) for i, g in demand.items())
        if len(demand) == 1:  # one class: first-fit places exactly that many
            return PlanResult(None, placed, f"{reason}; the largest placement found holds {placed} of {total} members")
        return PlanResult(None, 0, f"{reason}; at most {placed} of {total} members have room now")

    def _limiting(self, shape: Shape, nodes: frozenset[str], slots: int) -> str:
        """``explain.limiting`` from room indexes of the shape's resources one at a time: an index stops walking
        once it has found room for more than ``slots``, so only the resource that runs out walks every node."""
        for resource, quantity in shape[1]:
            if quantity > 0 and self.rooms.index((shape[0], ((resource, quantity),)), nodes).slots(slots + 1) <= slots:
                return resource
        return ""

    def _future(self, names: Sequence[str], claims: Mapping[str, Resources],
                held: Mapping[GangKey, Mapping[str, Resources]]) -> dict[str, Resources]:
        """Capacity that will be there once running workloads finish (bound or only released), minus what
        is promised already: room held for gangs, higher-ranked shadow plans, backfill into their slack."""
        future = {}
        for name in names:
            node = self.state.nodes.get(name)
            if node is None:
                continue
            room = subtract(node.allocatable, self.state.permanent(name))
            for usage in self._backfill.get(name, {}).values():
                room = subtract(room, usage)
            for per_node in held.values():
                if name in per_node:
                    room = subtract(room, per_node[name])
            future[name] = subtract(room, claims.get(name, {}))
        return future

    # --- one pass ---------------------------------------------------------------------------------

    def cycle(self, now: float) -> Cycle:
        self._now = now
        for cache in (self._slots, self._gangs, self._not_yet, self._partial):
            for key in [k for k in cache if k not in self.state.gangs]:
                del cache[key]
        self.integrity.prune(lambda uid: uid in self.state.pods)
        evictions = [self._evict(gang, loose, whole_gang=False) for gang in map(self._gang, list(self.state.gangs))
                     if gang and (loose := self._loose(gang))]
        gangs = [g for g in map(self._gang, list(self.state.gangs)) if g]
        held = self._held(gangs, now)
        if held != self._held_seen:
            self._held_version += 1
            self._held_seen = {key: dict(per_node) for key, per_node in held.items()}
        decisions: list[GangDecision] = []
        releases: list[Release] = []
        released = [g for g in gangs if self._started(g)]
        waiting = sorted((g for g in gangs if not self._started(g)),
                         key=lambda g: (-g.priority, g.oldest, g.key[0], g.key[1]))
        extras: list[tuple[_Gang, GangDecision, PodView]] = []
        for gang in released:
            decision, more = self._running(gang, held, now, releases, evictions)
            decisions.append(decision)
            extras.extend((gang, decision, pod) for pod in more)
        self._backfill = {node: kept for node, pods in self._backfill.items()
                          if (kept := {uid: u for uid, u in pods.items() if self.state.charged_node(uid) == node})}
        claims: dict[str, Resources] = {}
        for gang in waiting:
            decision = self._waiting(gang, held, claims, now, releases, evictions)
            decisions.append(decision)
        for gang, decision, pod in extras:
            self._extra(gang, decision, pod, held, claims, releases)
        for key in [k for k in self._shadows if k not in {g.key for g in waiting}]:
            del self._shadows[key]
        if not self._shadows:
            self._backfill.clear()
        self.rooms.prune()
        return Cycle(decisions, releases, evictions)

    def _gang(self, key: GangKey) -> _Gang | None:
        """The gang as of its members' last change (rebuilt only then), without the members being evicted; None
        when that leaves none."""
        version = self.state.gang_versions.get(key, 0)
        cached = self._gangs.get(key)
        if cached is None or cached[0] != version:
            evicted = self.state.evicted
            members = [p for p in self.state.members(key) if p.uid not in evicted]
            cached = self._gangs[key] = (version, _gang(key, members) if members else None)
        return cached[1]

    def _started(self, gang: _Gang) -> bool:
        """Released by this controller (some member, not on its way out), or known to have run whole: members
        someone else released, or that escaped admission, never start a gang, they only count as placed."""
        if gang.key in self._slots or gang.key in self.state.whole:
            return True
        if gang.started is None:  # fixed for this view: a release or a watch event makes a new one
            gang.started = any(p.uid in self.state.pending or (p.released and not p.deleting)
                               for p in gang.members if p.live or p.node)
        return gang.started

    def _release(self, pod: PodView, node: str, releases: list[Release], reserved: tuple[str, ...] = ()) -> None:
        """Reserve, then release; a member with constraints the plan could not check (best effort) is not
        pinned: a pin onto a node its pod affinity or spread rules out would leave it unschedulable for good."""
        self.state.reserve(pod, node, self._now)
        releases.append(Release(pod, node, reserved, self.config.pin_members and not pod.uncertifiable))

    # --- keeping released gangs whole ------------------------------------------------------------------

    def _stuck(self, gang: _Gang, now: float) -> list[Stuck]:
        if gang.suspects is None:
            gang.suspects = [p for p in gang.members if p.uid in self.state.released_at or p.rejected]
        return [s for p in gang.suspects if (s := self.integrity.stuck(p, now) or self.integrity.rejected(p))]

    def _loose(self, gang: _Gang) -> list[Stuck]:
        if gang.loose is None:
            gang.loose = [s for p in gang.members if (s := self.integrity.loose(p))]
        return gang.loose

    def _evict(self, gang: _Gang, stuck: Sequence[Stuck], whole_gang: bool) -> Eviction:
        """Delete the stuck members or, ``whole_gang``, every member that has not succeeded; forget what the gang
        held (its slots, vacancies, shadow plan): its operator recreates it through admission, gated."""
        if whole_gang:
            pods = tuple(p for p in gang.members if not p.deleting and not (p.terminal and not p.failed))
            for table in (self._slots, self._shadows, self._partial, self.state.vacancies):
                table.pop(gang.key, None)
            self._held_version += 1
        else:
            pods = tuple(s.pod for s in stuck)
        self.state.mark_evicted(pods)
        message = stuck[0].message if whole_gang else "; ".join(s.message for s in stuck)
        return Eviction(gang.key, gang.owner, pods, stuck[0].reason, message, whole_gang)

    def _evicted(self, gang: _Gang, result: GangDecision, stuck: Stuck, evictions: list[Eviction]) -> GangDecision:
        evictions.append(self._evict(gang, [stuck], whole_gang=True))
        result.decision, result.reason, result.cause = Verdict.EVICT, stuck.message, stuck.reason
        return result

    def _repair_slots(self, gang: _Gang, held: dict[GangKey, dict[str, Resources]]) -> Stuck | None:
        """Open slots of expected members on a node that can no longer hold them (another scheduler's pods took the
        room) move to nodes that can; None when every slot holds (again), a reason when no node has room."""
        indexes = self._open_slot_indexes(gang)
        nodes = list(self._slot_nodes(gang))
        need: dict[str, Resources] = {}
        for i in indexes:
            need[nodes[i]] = add(need.get(nodes[i], {}), gang.expected[i].usage)
        broken = [n for n, usage in need.items() if n not in self.state.nodes or not fits(usage, self.state.free(n))]
        if not broken:
            return None
        others = {key: per_node for key, per_node in held.items() if key != gang.key}
        members = [self._expected_member(gang, i) for i in indexes]
        found = plan(members, self._nodes(members, gang, others, None))
        if not found.fits:
            return Stuck(gang.sample, StuckReason.UNPLACEABLE,
                         f"the room reserved for {len(indexes)} expected member(s) on node(s) "
                         f"{', '.join(sorted(broken))} was taken by other pods and no other node has room: "
                         f"{found.shortfall}")
        for i, member in zip(indexes, members, strict=True):
            nodes[i] = found.placement[member.name]
        self._slots[gang.key] = tuple(nodes)
        self._held_version += 1
        held.pop(gang.key, None)
        held.update(self._held([gang], self._now))
        return None

    def _base(self, gang: _Gang, now: float, decision: Verdict, reason: str) -> GangDecision:
        live = gang.live
        return GangDecision(gang.key, gang.owner, decision, reason, waited=max(now - gang.oldest, 0.0),
                            present=len(live), size=gang.min_available)

    def _released(self, result: GangDecision, pod: PodView, node: str, reason: str, releases: list[Release]) -> None:
        """One member of a running gang released on its own."""
        self._release(pod, node, releases)
        result.released.append(pod.name)
        result.plan[pod.name] = node
        result.decision, result.reason = Verdict.RELEASE, reason

    def _running(self, gang: _Gang, held: dict[GangKey, dict[str, Resources]], now: float,
                 releases: list[Release], evictions: list[Eviction]) -> tuple[GangDecision, list[PodView]]:
        """Stuck members first (see the module docstring); then late members into their slots and replacements
        into their predecessors' room; then finish a release under way (a crash can leave one half done).
        Returns the extra members still gated."""
        result = self._base(gang, now, Verdict.RUNNING, "released")
        whole = gang.key in self.state.whole
        stuck = self._stuck(gang, now)
        if stuck and not whole:
            # A first-stage member that just has not bound yet, while none of the gang runs, spoils nothing (the
            # gang scheduler may be down): only a partial start, or a member that cannot bind at all, evicts the
            # gang. A late member's room is re-planned below (its slot): only the member itself is replaced.
            partial = bool(self.state.bound_members(gang.key))
            fatal = [s for s in stuck if not gang.late(s.pod) and (s.reason != StuckReason.BIND_TIMEOUT or partial)]
            if fatal:
                return self._evicted(gang, result, fatal[0], evictions), []
            stuck = [s for s in stuck if gang.late(s.pod)]
        replaced = [s for s in stuck if s.reason in (StuckReason.UNPLACEABLE, StuckReason.BIND_TIMEOUT)]
        if replaced:  # the replacement path: its creator makes it again, and it is released where it fits
            evictions.append(self._evict(gang, replaced, whole_gang=False))
            remaining = self._gang(gang.key)
            if remaining is None:
                return result, []
            gang = remaining
        gated = sorted((p for p in gang.live if p.gated and p.uid not in self.state.pending),
                       key=lambda p: (p.created, p.name))
        if not gated:  # the usual case: every member released; nothing to decide
            return result, []
        broken = None if whole else self._repair_slots(gang, held)
        if broken is not None:
            return self._evicted(gang, result, broken, evictions), []

        slots = self.open_slots(gang)
        waiting = []
        for pod in gated:
            node = self._into_room(pod, gang, slots, held, now) if gang.late(pod) else ""
            node = node or self._into_vacancy(pod, gang, held, now)
            if node:
                self._released(result, pod, node, "member(s) of a running gang released into the room held for them",
                               releases)
            else:
                waiting.append(pod)
        started = [p for p in gang.live if not gang.late(p) and (not p.gated or p.uid in self.state.pending)]
        missing = max(gang.needed - len(started), 0)
        finishing = [p for p in waiting if not gang.late(p)][:missing]
        if finishing:
            members = [self._member(p, gang) for p in finishing]
            found = plan(members, self._nodes(members, gang, held, None))
            if found.placement is not None:
                for pod in finishing:
                    self._released(result, pod, found.placement[pod.name], "completing a release started earlier",
                                   releases)
            elif not whole:  # half released (a crash, a deleted member) and no room for the rest: all or nothing
                return self._evicted(gang, result, Stuck(finishing[0], StuckReason.INCOMPLETE, (
                    f"{len(started)} of {gang.needed} members were released and {len(finishing)} more find no room: "
                    f"{found.shortfall}")), evictions), []
            else:  # replacements of a gang that ran whole wait for room
                result.reason = f"{len(finishing)} replacement(s) wait for room: {found.shortfall}"
                finishing = []
        return result, [p for p in waiting if p not in finishing]

    def _extra(self, gang: _Gang, result: GangDecision, pod: PodView, held: dict[GangKey, dict[str, Resources]],
               claims: dict[str, Resources], releases: list[Release]) -> None:
        """An extra member of a running gang where it fits now, within what shadow plans leave (as backfill)."""
        member = self._member(pod, gang)
        limits = self._limits(gang, held, claims) if claims else None
        found = plan([member], self._nodes([member], gang, held, limits))
        if found.placement:
            node = found.placement[pod.name]
            self._released(result, pod, node, "member(s) of a running gang released where they fit", releases)
            self._count_backfill(pod, node, claims)

    def _into_room(self, pod: PodView, gang: _Gang, slots: list[tuple[str, Expected]],
                   held: dict[GangKey, dict[str, Resources]], now: float) -> str:
        """The node of an open slot this late member fits (its own slot's room counts as free)."""
        member = self._member(pod, gang)
        for index, (node, slot) in enumerate(slots):
            if node not in member.nodes:
                continue
            base = self._nodes([Member(pod.name, pod.usage, frozenset({node}))], gang, held, None)[0]
            free = add(base.free, slot.usage)
            if check_placement([member], [NodeFree(node, free, base.used_ports)], {pod.name: node}):
                continue
            slots.pop(index)
            self._held_version += 1
            per_node = held.get(gang.key, {})
            if node in per_node:
                per_node[node] = subtract(per_node[node], slot.usage)
            return node
        return ""

    def _into_vacancy(self, pod: PodView, gang: _Gang, held: dict[GangKey, dict[str, Resources]], now: float) -> str:
        """A replacement takes the room its failed or deleted predecessor left."""
        vacancies = self.state.live_vacancies(gang.key, now)
        member = self._member(pod, gang)
        for vacancy in vacancies:
            if vacancy.node not in member.nodes:
                continue
            base = self._nodes([Member(pod.name, pod.usage, frozenset({vacancy.node}))], gang, held, None)[0]
            free = add(base.free, vacancy.usage)
            if check_placement([member], [NodeFree(vacancy.node, free, base.used_ports)], {pod.name: vacancy.node}):
                continue
            vacancies.remove(vacancy)
            self._held_version += 1
            self.state.vacancies[gang.key] = vacancies
            per_node = held.get(gang.key, {})
            if vacancy.node in per_node:
                per_node[vacancy.node] = subtract(per_node[vacancy.node], vacancy.usage)
            return vacancy.node
        return ""

    def _waiting(self, gang: _Gang, held: dict[GangKey, dict[str, Resources]], claims: dict[str, Resources],
                 now: float, releases: list[Release], evictions: list[Eviction]) -> GangDecision:
        """Release the gang when all of it has a plan. Members already bound (they escaped admission, or someone
        else released them) count as present and placed, and so do those that already succeeded (they cannot run
        again: waiting for them would be waiting for ever); the gated ones are planned around them."""
        live = sorted(gang.live, key=lambda p: (p.created, p.name))
        placed = [p for p in live if p.node]
        live = [p for p in live if not p.node]
        done = sum(1 for p in gang.members if p.terminal and not p.failed and not p.deleting)
        if not placed:
            self._partial.pop(gang.key, None)
        needed = max(gang.needed - len(placed) - done, 0)
        expected_note = f" ({len(gang.expected)} more expected later)" if gang.expected else ""
        root = self.roots(gang.sample)
        timeout = _seconds(root.get(keys.SCHEDULE_TIMEOUT_SECONDS)) or self.config.schedule_timeout_seconds
        result = self._base(gang, now, Verdict.WAIT, "")
        result.timed_out = result.waited > timeout
        if len(live) < needed:
            result.cause = Cause.MEMBERS
            result.reason = f"{len(live) + len(placed) + done}/{gang.needed} members present{expected_note}"
            return self._hold(gang, result, placed, now, evictions)
        reasons = sorted({p.uncertifiable for p in live if p.uncertifiable} |
                         {e.uncertifiable for e in gang.expected if e.uncertifiable})
        best_effort = root.get(keys.BEST_EFFORT) == "true"
        if reasons and not best_effort:
            result.decision = Verdict.NOT_CERTIFIABLE
            result.reason = (f"members have constraints the controller cannot check exactly: {'; '.join(reasons)}; "
                             f"set {keys.BEST_EFFORT}=true on the root to release on a best-effort plan")
            return self._hold(gang, result, placed, now, evictions)
        if not self.config.pin_members and len({(p.key, tuple(sorted(p.usage.items()))) for p in live} |
                                               {(e.key, tuple(sorted(e.usage.items()))) for e in gang.expected}) > 1:
            result.cause = Cause.PINNING
            result.reason = ("members differ and controller.pinMembers is false: only gangs of identical members "
                             "are released unpinned, since the scheduler may place a mixed gang differently")
            return self._hold(gang, result, placed, now, evictions)
        chosen = live if len(live) == needed else live[:needed]
        candidates = [live, chosen] if len(live) > needed else [live]
        expected = self._expected_members(gang)
        limits = self._limits(gang, held, claims) if claims else None
        # Nothing freed, no member changed, no held room given back: the last "not yet" still holds.
        token = (self.state.gang_versions.get(gang.key), self.state.freed, self.state.shape_version,
                 self._held_version) if not claims else None
        cached = self._not_yet.get(gang.key)
        if token is not None and cached is not None and cached[0] == token:
            found, chosen = cached[1], cached[2]
        else:
            self._not_yet.pop(gang.key, None)
            shapes = [shape_of(e.key, e.usage) for e in gang.expected]
            for group in candidates:
                members = [self._member(p, gang) for p in group] + expected
                found = self._plan(members, [shape_of(p.key, p.usage) for p in group] + shapes, gang, held, limits)
                if found.fits:
                    chosen = group
                    break
            if token is not None and not found.fits:
                self._not_yet[gang.key] = (token, found, chosen)
        if found.fits:
            queued = self._queued_in_the_way(found.placement, members, now)
            if queued:
                result.cause = Cause.QUEUE
                result.reason = (f"all {len(found.placement)} members fit, but {len(queued)} pod(s) queued for other "
                                 f"schedulers could take the planned room before the gang binds (e.g. "
                                 f"{queued[0].namespace}/{queued[0].name}): released once they are placed")
                return self._hold(gang, result, placed, now, evictions)
            self._partial.pop(gang.key, None)
            reserved = tuple(found.placement[m.name] for m in expected)
            if reserved:
                self._slots[gang.key] = reserved
                self._held_version += 1
                per_node = held.setdefault(gang.key, {})
                for member, node in zip(gang.expected, reserved, strict=True):
                    per_node[node] = add(per_node.get(node, {}), member.usage)
            for pod in chosen:
                self._release(pod, found.placement[pod.name], releases, reserved)
                self._count_backfill(pod, found.placement[pod.name], claims)
            result.decision = Verdict.RELEASE
            result.plan = dict(found.placement)
            result.released = [p.name for p in chosen]
            nodes = len(set(found.placement.values()))
            result.reason = f"all {len(found.placement)} members fit on {nodes} node(s){expected_note}"
            if reasons:
                result.reason += (f"; best effort: members with {'; '.join(reasons)} are released unpinned, "
                                  "for the scheduler to place")
            return result
        members = [self._member(p, gang) for p in chosen] + expected
        never = self._never_fits(gang, members)
        if never:
            result.decision = Verdict.NEVER_FITS
            result.reason = never
            return self._hold(gang, result, placed, now, evictions)
        result.cause = Cause.CAPACITY
        result.reason = found.shortfall
        if result.waited >= self.config.starvation_seconds:
            shadow = self._shadow(gang, members, claims, held)
            result.reason += (f"; waiting longer than {self.config.starvation_seconds:g}s: capacity is held for it "
                              f"on {len(set(shadow.values()))} node(s) as it frees up" if shadow else
                              "; starving, but no shadow plan exists over capacity that will free up")
        return self._hold(gang, result, placed, now, evictions)

    def _hold(self, gang: _Gang, result: GangDecision, placed: list[PodView], now: float,
              evictions: list[Eviction]) -> GangDecision:
        """A gang that waits while some of its members run (bound without this controller's release): all or nothing,
        so after ``controller.bindTimeoutSeconds`` of that it is evicted."""
        if not placed:
            return result
        since = self._partial.setdefault(gang.key, now)
        if now - since <= self.config.bind_timeout_seconds:
            return result
        return self._evicted(gang, result, Stuck(placed[0], StuckReason.INCOMPLETE, (
            f"{len(placed)} of {gang.needed} members run without the gate controller's release and the rest could "
            f"not start with them for {now - since:.0f}s: {result.reason}")), evictions)

    def _queued_in_the_way(self, placement: Mapping[str, str], members: Sequence[Member], now: float) -> list[PodView]:
        """Pods queued for a scheduler (created within ``controller.queuedPodSeconds``, not found unschedulable) that
        fit a planned node now but not beside the members planned there: they could take that room between the
        gang's release and its bind, and strand it."""
        window = self.config.queued_pod_seconds
        queued = [p for p in self.state.in_flight.values() if now - p.created <= window]
        if not queued:
            return []
        requests = {m.name: m.requests for m in members}
        planned: dict[str, Resources] = {}
        for name, node in placement.items():
            planned[node] = add(planned.get(node, {}), requests[name])
        found = []
        for pod in queued:
            for node, usage in planned.items():
                free = self.state.free(node)
                if fits(pod.usage, free) and not fits(pod.usage, subtract(free, usage)) and self._admits(pod, node):
                    found.append(pod)
                    break
        return found

    def _admits(self, pod: PodView, node: str) -> bool:
        """The node passes the pod's filters (taints, selector, affinity, resource kinds)."""
        spec = pod.spec or {}
        info = PodInfo.of(spec, {r: v for r, v in pod.usage.items() if r != "pods"})
        if not info.names_nodes:
            return node in self.feasible(pod.key, spec, pod.usage)
        view = self.state.nodes.get(node)
        return view is not None and bool(feasible(info, [view.info]))

    def _count_backfill(self, pod: PodView, node: str, claims: Mapping[str, Resources]) -> None:
        """A lower-ranked pod released onto a node a shadow plan claims takes from that plan's slack."""
        if node in claims:
            self._backfill.setdefault(node, {})[pod.uid] = pod.usage

    def _limits(self, gang: _Gang, held: Mapping[GangKey, Mapping[str, Resources]],
                claims: Mapping[str, Resources]) -> dict[str, Resources]:
        """What a lower-ranked gang may use on nodes where a starving gang's shadow plan holds room."""
        return self._future(list(claims), claims, {k: v for k, v in held.items() if k != gang.key})

    def _shadow(self, gang: _Gang, members: list[Member], claims: dict[str, Resources],
                held: Mapping[GangKey, Mapping[str, Resources]]) -> dict[str, str]:
        names = sorted(set().union(*{m.nodes for m in members}))
        future = self._future(names, claims, held)
        nodes = [NodeFree(n, future[n], self.state.permanent_ports(n)) for n in names if n in future]
        previous = self._shadows.get(gang.key)
        if previous and set(previous) == {m.name for m in members} and not check_placement(members, nodes, previous):
            placement = previous
        else:
            found = plan(members, nodes)
            placement = found.placement or {}
        if placement:
            self._shadows[gang.key] = placement
            by_name = {m.name: m for m in members}
            for name, node in placement.items():
                claims[node] = add(claims.get(node, {}), by_name[name].requests)
        return placement

    def _never_fits(self, gang: _Gang, members: list[Member]) -> str | None:
        """Cached per gang shape and node shape: a proof that it cannot fit even on an otherwise empty cluster."""
        homeless = [m.name for m in members if not m.nodes]
        if homeless:
            return (f"{homeless[0]} has no schedulable node that matches its node selector, affinity and tolerations "
                    "and offers every resource it requests")
        shape = (self.state.shape_version, frozenset(Counter(
            (m.nodes, tuple(sorted(m.requests.items())), m.host_ports) for m in members).items()))
        if shape in self._fits_somewhere:  # another gang of this shape was proven able to fit: so is this one
            return None
        signature = (gang.key, shape)
        if signature not in self._never:
            if len(self._never) > 10_000:
                self._never.clear()
                self._fits_somewhere.clear()
            names = sorted(set().union(*{m.nodes for m in members}))
            nodes = [NodeFree(n, subtract(self.state.nodes[n].allocatable, self.state.permanent(n)),
                              self.state.permanent_ports(n)) for n in names if n in self.state.nodes]
            self._never[signature] = reason = never_fits(members, nodes)
            if reason is None:
                self._fits_somewhere.add(shape)
        return self._never[signature]


def _apart_port(gang: _Gang, name: str, with_term: bool) -> HostPort:
    return gang_member_port(gang.key[0], gang.key[1], None if with_term else name)


def _seconds(value: str | None) -> float:
    try:
        number = float(value) if value else 0.0
    except ValueError:
        return 0.0
    return number if number > 0 else 0.0

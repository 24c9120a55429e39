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

The pass composes units that each keep one job's state across passes: ``Feasibility`` (static feasibility per
placement key, never-fits proofs), ``Bookkeeping`` (gang views, reserved slots, held room), ``Backfill`` (shadow
plans of starving gangs, the backfill ledger), ``Fitting`` (a gang's members and nodes as it sees them, its plans
guided by the room indexes) and ``Integrity`` (what keeps a released gang from ending whole).

The engine never talks to the API: the controller (``controller.run``) and ``kubenexus simulate``
feed it the same state, so what simulate prints is what the controller does.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from controller.backfill import Backfill
from controller.bookkeeping import Bookkeeping, Gang, Held
from controller.capacity import add, fits, subtract
from controller.feasibility import Feasibility
from controller.fitting import Fitting
from controller.integrity import Integrity, Stuck, StuckReason
from controller.members import Expected, GangKey, PodView
from controller.planner import PlanResult, check_placement
from controller.preemption import MAX_ROUNDS, Futile, InFlight, Preemption, Unit, Victims, named
from controller.problem import Member, NodeFree
from controller.queue_preemption import Reclaim
from controller.quota import Denied, Quota, demand_of
from controller.rooms import Rooms, shape_of
from controller.roots import Unknown
from controller.schedulers import Schedulers, fix
from controller.state import ClusterState
from controller.topology import Request, domains_used, request_of
from gang import keys
from gang.config import Config
from gang.queues import QueueProblem
from gang.resources import Resources

# A new job's pods and its root arrive by two watches: a root not delivered yet for this long is no lag any more.
ROOT_LAG_SECONDS = 10.0


class Verdict(StrEnum):
    """What a pass decided for a gang; the values are what ``kubenexus simulate`` prints."""

    RELEASE = "release"
    WAIT = "wait"
    NEVER_FITS = "never-fits"
    NOT_CERTIFIABLE = "not-certifiable"
    RUNNING = "running"
    EVICT = "evict"
    OPTED_OUT = "opted-out"  # its root opted out after its pods were created: no gang any more


class Cause(StrEnum):
    """Why a waiting gang waits."""

    MEMBERS = "members"  # too few members exist yet
    CAPACITY = "capacity"  # no plan over the free capacity
    PINNING = "pinning"  # a mixed gang, and members are not pinned
    QUEUE = "queue"  # pods queued for other schedulers could take the planned room
    ROOT = "root"  # what its root asks cannot be read (``controller/roots.py``): never planned without it
    ROOT_UNSEEN = "root-unseen"  # as ROOT, the root not delivered by its watch yet, within ROOT_LAG_SECONDS: told once
    # it lasts
    PREEMPTING = "preempting"  # it evicts lower-priority work to fit, and waits for it to go (controller/preemption.py)
    NO_SCHEDULER = "no-scheduler"  # no scheduler serves its schedulerName (``controller/schedulers.py``); also said of
    # a released gang whose pods nobody binds
    QUOTA = "quota"  # its Queue does not admit it now (``controller/quota.py``), or it waits behind a StrictFIFO head
    QUEUE_UNKNOWN = "queue-unknown"  # which Queue it belongs to cannot be told (``gang/queues.py``)


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
    shadow: dict[str, str] = field(default_factory=dict)  # a starving gang's shadow plan in this pass (member: node)
    short: int = 0  # a waiting gang: members missing (Cause.MEMBERS), or members without room in the best plan found
    # What its root asks: ``kubenexus.io/topology-required``/``-preferred``, per role, JobSet's exclusive topology.
    topology: Request = ()
    # With a topology: the domains its plan uses (released, running), or the best domain's (waiting, whole gang).
    domains: tuple[str, ...] = ()
    preemption: InFlight | None = None  # the preemption it has under way
    queue: str = ""  # the Queue it belongs to (``controller/quota.py``), "" for none

    @property
    def name(self) -> str:
        return self.key[1]


@dataclass(frozen=True)
class Preempting:
    """Evict ``victims`` (lower-priority units, whole) so that gang ``key`` fits: its ``round``-th preemption."""

    key: GangKey
    owner: str
    sample: PodView  # a member of the preemptor, for its root
    victims: tuple[Unit, ...]
    nodes: int  # the nodes of the plan their room makes
    members: int
    round: int
    why: str = "of lower priority"  # or which Queue policy lets it take them (``controller/queue_preemption.py``)


@dataclass
class Cycle:
    gangs: list[GangDecision]
    releases: list[Release]
    evictions: list[Eviction] = field(default_factory=list)
    preemptions: list[Preempting] = field(default_factory=list)


LOWER_PRIORITY = "of lower priority"  # why a preemptor may take its victims, unless a Queue's policy says otherwise

# The waits of a complete gang that make it the head its StrictFIFO Queue's later gangs wait behind.
_HOLDS_A_QUEUE = frozenset({Cause.QUOTA, Cause.CAPACITY, Cause.PREEMPTING, Cause.QUEUE})

# A waiting gang's "not yet" (no plan; no preemption helps) holds while nothing freed, no member changed and no held
# room was given back: (its members' version, freed, shape version, held version). The held version covers the room
# held for preemptors too: ``Bookkeeping.observe`` compares all that is held at the start of each pass.
_Token = tuple[int | None, int, int, int]


class Engine:
    """Decides releases: one pass over every gang, composed of the units that keep state across passes."""

    def __init__(self, state: ClusterState, config: Config) -> None:
        self.state = state
        self.config = config
        self.feasibility = Feasibility(state)
        self.rooms = Rooms(state)
        self.schedulers = Schedulers(state, config.bind_timeout_seconds)
        self.integrity = Integrity(state, config.bind_timeout_seconds)
        self.books = Bookkeeping(state)
        self.backfill = Backfill(state)
        self.fitting = Fitting(state, self.feasibility, self.rooms)
        self.preemption = Preemption(state, self.fitting, config.preemption)
        self.quota = Quota(state)
        self.reclaim = Reclaim(state, self.quota, self.fitting)
        self._preemptions: list[Preempting] = []  # this pass's
        self._not_yet: dict[GangKey, tuple[_Token, PlanResult, list[PodView], tuple[str, ...]]] = {}
        # Started gangs: their topology request and the domains they were released into.
        self._placed_in: dict[GangKey, tuple[Request, tuple[str, ...]]] = {}
        # Members an opt-out released to ordinary scheduling: never "escaped", even once the opt-out is taken back
        # (kept in memory: a restart between the two forgets them).
        self._let_go: set[str] = set()
        self._now = 0.0

    # --- one pass ---------------------------------------------------------------------------------

    def cycle(self, now: float) -> Cycle:
        self._now = now
        self.books.prune()
        for cache in (self._not_yet, self._placed_in):
            for key in [k for k in cache if k not in self.state.gangs]:
                del cache[key]
        self.integrity.prune(lambda uid: uid in self.state.pods)
        self._let_go &= self.state.pods.keys()
        self.schedulers.update(now)
        self.preemption.prune(now)
        self._preemptions = []
        every = [g for g in map(self.books.gang, list(self.state.gangs)) if g]
        out = {g.key for g in every if self._opted_out(g)}
        evictions = [self._evict(gang, loose, whole_gang=False)
                     for gang in every if gang.key not in out and (loose := self._loose(gang))]
        gangs = [g for g in map(self.books.gang, list(self.state.gangs)) if g and g.key not in out]
        held = self.books.held(gangs, now)
        held.update(self.preemption.held())
        self.books.observe(held)
        released = [g for g in gangs if self.books.started(g)]
        waiting = sorted((g for g in gangs if not self.books.started(g)),
                         key=lambda g: (-g.priority, g.oldest, g.key[0], g.key[1]))
        self.quota.begin(gangs, (g.key for g in released), held, self.preemption.demand())
        releases: list[Release] = []
        decisions = [self._leave(gang, now, releases) for gang in every if gang.key in out]
        extras: list[tuple[Gang, GangDecision, PodView]] = []
        for gang in released:
            decision, more = self._running(gang, held, now, releases, evictions)
            decisions.append(decision)
            extras.extend((gang, decision, pod) for pod in more)
        self.backfill.keep_charged()
        claims: dict[str, Resources] = {}
        for gang in self.quota.ordered(waiting):
            decision = self._waiting(gang, held, claims, now, releases, evictions)
            queue = self.quota.of.get(gang.key)
            if isinstance(queue, str) and decision.decision is Verdict.WAIT and decision.cause in _HOLDS_A_QUEUE:
                self.quota.holds(queue, gang)
            decisions.append(decision)
        held_back: dict[GangKey, tuple[GangDecision, list[str]]] = {}  # per gang, why its Queue holds back its extras
        for gang, decision, pod in extras:
            denied = self._extra(gang, decision, pod, held, claims, releases)
            if denied is not None:
                held_back.setdefault(gang.key, (decision, []))[1].append(denied)
        for decision, why in held_back.values():
            decision.reason += f"; {len(why)} member(s) beyond its minimum wait for its Queue: {why[-1]}"
        self.backfill.end_pass(g.key for g in waiting)
        self.rooms.prune()
        return Cycle(decisions, releases, evictions, self._preemptions)

    def _opted_out(self, gang: Gang) -> bool:
        """Its root now says ``kubenexus.io/gang-scheduling: "false"`` (an edit to a live job applies at once)."""
        root = self.state.roots.constraints(gang.sample)
        return not isinstance(root, Unknown) and root.get(keys.GANG_SCHEDULING) == keys.ROOT_OPT_OUT

    def _leave(self, gang: Gang, now: float, releases: list[Release]) -> GangDecision:
        """A gang whose root opted out: its gated members go to ordinary scheduling at once (ungated, no plan, no
        pin, nothing reserved); its other members are left as they are."""
        result = self._base(gang, now, Verdict.OPTED_OUT, "")
        for pod in sorted((p for p in gang.live if p.gated and p.uid not in self.state.pending), key=lambda p: p.name):
            self.state.reserve(pod, "", now)
            releases.append(Release(pod, "", pin=False))
            result.released.append(pod.name)
            self._let_go.add(pod.uid)
        result.reason = (f"its root opted out of gang scheduling ({keys.GANG_SCHEDULING}={keys.ROOT_OPT_OUT}): "
                         + (f"{len(result.released)} gated member(s) released to ordinary scheduling"
                            if result.released else "its members are scheduled as ordinary pods"))
        return result

    def _base(self, gang: Gang, now: float, decision: Verdict, reason: str) -> GangDecision:
        live, queue = gang.live, self.quota.of.get(gang.key)
        return GangDecision(gang.key, gang.owner, decision, reason, waited=max(now - gang.oldest, 0.0),
                            present=len(live), size=gang.min_available, queue=queue if isinstance(queue, str) else "")

    def _release(self, pod: PodView, node: str, releases: list[Release], reserved: tuple[str, ...] = ()) -> None:
        """Reserve, then release; a member with constraints the plan could not check (best effort) is not
        pinned: a pin onto a node its pod affinity or spread rules out would leave it unschedulable for good."""
        self.state.reserve(pod, node, self._now)
        releases.append(Release(pod, node, reserved, self.config.pin_members and not pod.uncertifiable))

    def _released(self, result: GangDecision, pod: PodView, node: str, reason: str, releases: list[Release]) -> None:
        """One member of a running gang released on its own."""
        self._release(pod, node, releases)
        result.released.append(pod.name)
        result.plan[pod.name] = node
        result.decision, result.reason = Verdict.RELEASE, reason

    # --- keeping released gangs whole ------------------------------------------------------------------

    def _stuck(self, gang: Gang, now: float) -> list[Stuck]:
        if gang.suspects is None:
            gang.suspects = [p for p in gang.members if p.uid in self.state.released_at or p.rejected]
        return [s for p in gang.suspects if (s := self.integrity.stuck(p, now) or self.integrity.rejected(p))]

    def _loose(self, gang: Gang) -> list[Stuck]:
        if gang.loose is None:
            gang.loose = [s for p in gang.members if p.uid not in self._let_go and (s := self.integrity.loose(p))]
        return gang.loose

    def _evict(self, gang: Gang, stuck: Sequence[Stuck], whole_gang: bool) -> Eviction:
        """Delete the stuck members or, ``whole_gang``, every member that has not succeeded; forget what the gang
        held (its slots, vacancies, shadow plan): its operator recreates it through admission, gated."""
        if whole_gang:
            pods = tuple(p for p in gang.members if not p.deleting and not (p.terminal and not p.failed))
            self._forget(gang.key)
        else:
            pods = tuple(s.pod for s in stuck)
        self.state.mark_evicted(pods)
        message = stuck[0].message if whole_gang else "; ".join(s.message for s in stuck)
        return Eviction(gang.key, gang.owner, pods, stuck[0].reason, message, whole_gang)

    def _forget(self, key: GangKey) -> None:
        """A gang evicted or preempted whole holds nothing any more: its operator recreates it through admission."""
        self.books.forget(key)
        self.backfill.forget(key)
        self._placed_in.pop(key, None)
        self.state.vacancies.pop(key, None)

    def _evicted(self, gang: Gang, result: GangDecision, stuck: Stuck, evictions: list[Eviction]) -> GangDecision:
        evictions.append(self._evict(gang, [stuck], whole_gang=True))
        result.decision, result.reason, result.cause = Verdict.EVICT, stuck.message, stuck.reason
        return result

    def _repair_slots(self, gang: Gang, held: Held) -> Stuck | None:
        """Open slots of expected members on a node that can no longer hold them (another scheduler's pods took the
        room) move to nodes that can; None when every slot holds (again), a reason when no node has room."""
        indexes = self.books.open_slot_indexes(gang)
        nodes = list(self.books.slot_nodes(gang))
        need: dict[str, Resources] = {}
        for i in indexes:
            need[nodes[i]] = add(need.get(nodes[i], {}), gang.expected[i].usage)
        broken = [n for n, usage in need.items() if n not in self.state.nodes or not fits(usage, self.state.free(n))]
        if not broken:
            return None
        others = {key: per_node for key, per_node in held.items() if key != gang.key}
        members = self._anchored(gang, [self.fitting.expected_member(gang, i) for i in indexes])
        placed_in = self._placed(gang)
        assert not isinstance(placed_in, Unknown), "slots are repaired only once the gang's root is known (_running)"
        request = placed_in[0]
        if request:  # units whose members all move are placed as the request asks (e.g. a later child Job alone)
            shapes = [shape_of(gang.expected[i].key, gang.expected[i].usage) for i in indexes]
            found = self.fitting.plan_topology(members, shapes, gang, others, None, request).result
        else:
            found = self.fitting.plan(members, gang, others, None)
        if found.placement is None:
            return Stuck(gang.sample, StuckReason.UNPLACEABLE,
                         f"the room reserved for {len(indexes)} expected member(s) on node(s) "
                         f"{', '.join(sorted(broken))} was taken by other pods and no other node has room: "
                         f"{found.shortfall}")
        for i, member in zip(indexes, members, strict=True):
            nodes[i] = found.placement[member.name]
        self.books.move_slots(gang, tuple(nodes), held, self._now)
        return None

    # --- gangs that run ------------------------------------------------------------------------------

    def _running(self, gang: Gang, held: Held, now: float, releases: list[Release],
                 evictions: list[Eviction]) -> tuple[GangDecision, list[PodView]]:
        """Stuck members first (see the module docstring); then late members into their slots and replacements
        into their predecessors' room; then finish a release under way (a crash can leave one half done).
        Returns the extra members still gated."""
        result = self._base(gang, now, Verdict.RUNNING, "released")
        placed_in = self._placed(gang)
        result.topology, result.domains = placed_in if not isinstance(placed_in, Unknown) else ((), ())
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
            remaining = self.books.gang(gang.key)
            if remaining is None:
                return result, []
            gang = remaining
        stranded = [p for p in gang.live if not p.gated and self.schedulers.stranded(p)]
        if stranded:
            scheduler = stranded[0].scheduler
            result.cause = Cause.NO_SCHEDULER
            result.reason = (f"{len(stranded)} released member(s) not picked up by any scheduler: no scheduler serves "
                             f"schedulerName {scheduler!r} (nothing acted on its pods within "
                             f"{self.config.bind_timeout_seconds:g}s of their release); they hold no room meanwhile; "
                             f"{fix(scheduler)}")
        gated = sorted((p for p in gang.live if p.gated and p.uid not in self.state.pending),
                       key=lambda p: (p.created, p.name))
        if not gated:  # the usual case: every member released; nothing to decide
            return result, []
        if isinstance(placed_in, Unknown):  # late members, replacements and extras are placed as the root asks
            result.reason = f"{len(gated)} gated member(s) wait: {placed_in.reason}"
            return result, []
        broken = None if whole else self._repair_slots(gang, held)
        if broken is not None:
            return self._evicted(gang, result, broken, evictions), []

        slots = self.books.open_slots(gang)
        waiting = []
        for pod in gated:
            node = self._into_room(pod, gang, slots, held) if gang.late(pod) else ""
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
            found = self.fitting.plan(self._anchored(gang, [self.fitting.member(p, gang) for p in finishing]), gang,
                                      held, None)
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

    def _extra(self, gang: Gang, result: GangDecision, pod: PodView, held: Held, claims: dict[str, Resources],
               releases: list[Release]) -> str | None:
        """An extra member of a running gang where it fits now, within what shadow plans leave (as backfill) and
        what its Queue admits (its usage grows with it); else why its Queue holds it back."""
        queue = self.quota.of.get(gang.key)
        if isinstance(queue, QueueProblem):
            return queue.reason
        demand = demand_of([pod])
        denied = self.quota.check(queue, demand) if queue is not None else None
        if denied is not None:
            return denied.reason
        limits = self.backfill.limits(gang.key, held, claims) if claims else None
        found = self.fitting.plan(self._anchored(gang, [self.fitting.member(pod, gang)]), gang, held, limits)
        if found.placement:
            node = found.placement[pod.name]
            self._released(result, pod, node, "member(s) of a running gang released where they fit", releases)
            self.backfill.count(pod, node, claims)
            if queue is not None:
                self.quota.use(queue, demand)
        return None

    def _placed(self, gang: Gang) -> tuple[Request, tuple[str, ...]] | Unknown:
        """A started gang's topology request and the domains its members are in (kept from its release; after a
        restart, read once from its root and where its members are charged), or why its root cannot be read."""
        if gang.key not in self._placed_in:
            root = self.state.roots.constraints(gang.sample)
            if isinstance(root, Unknown):
                return root
            request = request_of(root)
            nodes = {p.name: node for p in gang.members if (node := self.state.charged_node(p.uid))}
            self._placed_in[gang.key] = (request, tuple(sorted({
                domain for t in request for domain in domains_used(nodes, self.state.labeller(t.key))})))
        return self._placed_in[gang.key]

    def _anchored(self, gang: Gang, members: list[Member]) -> list[Member]:
        """Replacements, late and extra members of a started gang go to the domain their unit runs in (or is
        reserved in)."""
        placed_in = self._placed(gang)
        assert not isinstance(placed_in, Unknown), "anchored only once the gang's root is known (_running)"
        return self.fitting.anchored(members, gang, placed_in[0], self.books.slot_nodes(gang))

    def _fits_into(self, pod: PodView, gang: Gang, member: Member, node: str, room: Resources, held: Held) -> bool:
        """The member fits on ``node`` with ``room`` held for it there counted as free."""
        if node not in member.nodes:
            return False
        base = self.fitting.nodes(gang, [node], held, None)[0]
        return not check_placement([member], [NodeFree(node, add(base.free, room), base.used_ports)], {pod.name: node})

    def _into_room(self, pod: PodView, gang: Gang, slots: list[tuple[str, Expected]], held: Held) -> str:
        """The node of an open slot this late member fits (its own slot's room counts as free)."""
        member = self.fitting.member(pod, gang)
        for index, (node, slot) in enumerate(slots):
            if slot.child and pod.child and slot.child != pod.child:
                continue  # a child Job's members take the slots planned for it (together, in its own domain)
            if self._fits_into(pod, gang, member, node, slot.usage, held):
                slots.pop(index)
                self.books.take(gang.key, node, slot.usage, held)
                return node
        return ""

    def _into_vacancy(self, pod: PodView, gang: Gang, held: Held, now: float) -> str:
        """A replacement takes the room its failed or deleted predecessor left."""
        vacancies = self.state.live_vacancies(gang.key, now)
        member = self.fitting.member(pod, gang)
        for vacancy in vacancies:
            if self._fits_into(pod, gang, member, vacancy.node, vacancy.usage, held):
                vacancies.remove(vacancy)
                self.state.vacancies[gang.key] = vacancies
                self.books.take(gang.key, vacancy.node, vacancy.usage, held)
                return vacancy.node
        return ""

    # --- gangs that wait -----------------------------------------------------------------------------

    def _waiting(self, gang: Gang, held: Held, claims: dict[str, Resources], now: float, releases: list[Release],
                 evictions: list[Eviction]) -> GangDecision:
        """Release the gang when all of it has a plan. Members already bound (they escaped admission, or someone
        else released them) count as present and placed, and so do those that already succeeded (they cannot run
        again: waiting for them would be waiting for ever); the gated ones are planned around them."""
        live = sorted(gang.live, key=lambda p: (p.created, p.name))
        placed = [p for p in live if p.node]
        live = [p for p in live if not p.node]
        done = sum(1 for p in gang.members if p.terminal and not p.failed and not p.deleting)
        if not placed:
            self.books.partial.pop(gang.key, None)
        needed = max(gang.needed - len(placed) - done, 0)
        expected_note = f" ({len(gang.expected)} more expected later)" if gang.expected else ""
        root = self.state.roots.constraints(gang.sample)
        known = root if not isinstance(root, Unknown) else {}
        timeout = _seconds(known.get(keys.SCHEDULE_TIMEOUT_SECONDS)) or self.config.schedule_timeout_seconds
        result = self._base(gang, now, Verdict.WAIT, "")
        result.timed_out = result.waited > timeout and not isinstance(root, Unknown)  # its own timeout is unknown
        lag = isinstance(root, Unknown) and root.unseen and result.waited < ROOT_LAG_SECONDS
        if isinstance(root, Unknown) and not lag:  # fail closed: never planned with fewer constraints than it asks
            result.cause = Cause.ROOT
            result.reason = f"not planned: {root.reason}; it waits until they can be read"
            return self._hold(gang, result, placed, now, evictions)
        request = result.topology = request_of(root) if not isinstance(root, Unknown) else ()
        if len(live) < needed:  # (a root that may be a watch event away is no news while members are missing)
            result.cause = Cause.MEMBERS
            result.short = needed - len(live)
            result.reason = f"{len(live) + len(placed) + done}/{gang.needed} members present{expected_note}"
            return self._hold(gang, result, placed, now, evictions)
        if isinstance(root, Unknown):
            result.cause = Cause.ROOT_UNSEEN
            result.reason = f"not planned: {root.reason}; it waits until they can be read"
            return self._hold(gang, result, placed, now, evictions)
        held_back = self.schedulers.holds(gang.sample.scheduler, now)
        if held_back is not None:
            result.cause, result.reason = Cause.NO_SCHEDULER, held_back
            return self._hold(gang, result, placed, now, evictions)
        priorities = sorted({p.priority for p in gang.live})
        if len(priorities) > 1:  # which would it be ordered, preempt and be preempted by?
            result.decision = Verdict.NOT_CERTIFIABLE
            result.reason = (f"members have different priorities ({', '.join(map(str, priorities))}): give all the "
                             "job's pods one PriorityClass")
            return self._hold(gang, result, placed, now, evictions)
        if self.preemption.remaining(gang.key):  # no second round while the victims of the first go
            result.cause, result.preemption = Cause.PREEMPTING, self.preemption.inflight[gang.key]
            left = len(self.preemption.remaining(gang.key))
            result.reason = (f"preempting: {left} of the {len(result.preemption.victims)} pods it evicts are not gone "
                             f"yet (round {result.preemption.round}); the room they free is held for it")
            return self._hold(gang, result, placed, now, evictions)
        if gang.key in self.preemption.inflight:  # they are gone: the room held for it is its own
            held = {key: per_node for key, per_node in held.items() if key != gang.key}
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
        queue = self.quota.of.get(gang.key)
        if isinstance(queue, QueueProblem):
            result.cause, result.reason = Cause.QUEUE_UNKNOWN, f"not planned: {queue.reason}"
            return self._hold(gang, result, placed, now, evictions)
        if queue is not None:
            quota = self._within_quota(queue, gang, live, needed)
            if isinstance(quota, str):
                result.cause, result.reason = Cause.QUOTA, quota
                if not self.quota.behind(queue):  # over quota, not behind a StrictFIFO head: its Queue may reclaim
                    self._reclaim(gang, queue, live[:needed], request, held, result, now)
                return self._hold(gang, result, placed, now, evictions)
            live = quota
        expected = self.fitting.expected_members(gang)
        found, chosen, members, domains = self._plan_waiting(gang, live, needed, expected, held, claims, request)
        result.domains = domains
        if found.placement is not None:
            queued = self._queued_in_the_way(found.placement, members, now)
            if queued:
                result.cause = Cause.QUEUE
                result.reason = (f"all {len(found.placement)} members fit, but {len(queued)} pod(s) queued for other "
                                 f"schedulers could take the planned room before the gang binds (e.g. "
                                 f"{queued[0].namespace}/{queued[0].name}): released once they are placed")
                return self._hold(gang, result, placed, now, evictions)
            self.books.partial.pop(gang.key, None)
            if queue is not None:
                self.quota.charge(queue, demand_of(chosen, gang.expected), gang.key)
            reserved = tuple(found.placement[m.name] for m in expected)
            if reserved:
                self.books.reserve_slots(gang, reserved, held)
            for pod in chosen:
                self._release(pod, found.placement[pod.name], releases, reserved)
                self.backfill.count(pod, found.placement[pod.name], claims)
            result.decision = Verdict.RELEASE
            result.plan = dict(found.placement)
            result.released = [p.name for p in chosen]
            nodes = len(set(found.placement.values()))
            result.reason = f"all {len(found.placement)} members fit on {nodes} node(s){_where(request, domains)}" \
                            f"{expected_note}"
            self._placed_in[gang.key] = (request, domains)
            self.preemption.done(gang.key)
            if reasons:
                result.reason += (f"; best effort: members with {'; '.join(reasons)} are released unpinned, "
                                  "for the scheduler to place")
            return result
        members = [self.fitting.member(p, gang) for p in chosen] + expected
        roles = self.fitting.roles(gang) if request and not request[0].whole else None
        never = self.feasibility.never_fits(gang.key, members, request, roles)
        if never:
            result.decision = Verdict.NEVER_FITS
            result.reason = never
            return self._hold(gang, result, placed, now, evictions)
        result.cause = Cause.CAPACITY
        result.reason = found.shortfall
        if placed and any(t.required for t in request):
            where = ", ".join(f"{p.name} on {p.node}" for p in placed[:3]) + (", ..." if len(placed) > 3 else "")
            result.reason += (f"; bound without the controller's release ({where}), members keep the rest of their "
                              f"unit to their {'/'.join(sorted({t.key for t in request if t.required}))} domain")
        result.short = max(len(members) - found.placed_max, 0)
        if self.preemption.may(gang) and self._preempt(gang, members, request, held, result, now):
            return self._hold(gang, result, placed, now, evictions)
        if self.preemption.declined(gang):
            result.reason += "; its preemptionPolicy is Never: it waits for room, preempting nothing"
        elif self.preemption.used_up(gang.key):
            result.reason += (f"; its {MAX_ROUNDS} rounds of preemption are used up (each time other pods took the "
                              "room its victims freed): it waits for room like any gang, preempting nothing and "
                              "holding no room")
        elif queue is not None and self._reclaim(gang, queue, chosen, request, held, result, now):
            return self._hold(gang, result, placed, now, evictions)
        if result.waited >= self.config.starvation_seconds:
            shadow = result.shadow = self.backfill.shadow(gang.key, members, claims, held, request, roles)
            result.reason += (f"; waiting longer than {self.config.starvation_seconds:g}s: capacity is held for it "
                              f"on {len(set(shadow.values()))} node(s) as it frees up" if shadow else
                              "; starving, but no shadow plan exists over capacity that will free up")
        return self._hold(gang, result, placed, now, evictions)

    def _within_quota(self, queue: str, gang: Gang, live: list[PodView], needed: int) -> list[PodView] | str:
        """The gated members the gang's Queue admits (all of them, else the ``needed`` oldest: the plan takes no
        more), or why it admits none: behind its StrictFIFO head, or over quota (with numbers)."""
        ahead = self.quota.behind(queue)
        if ahead:
            return f"queued behind gang {ahead}, the head of StrictFIFO queue {queue}"
        denied: Denied | None = None
        for chosen in (live, live[:needed]) if len(live) > needed else (live,):
            denied = self.quota.check(queue, demand_of(chosen, gang.expected), gang.key)
            if denied is None:
                return chosen
        assert denied is not None
        return denied.reason

    def _reclaim(self, gang: Gang, queue: str, pods: list[PodView], request: Request, held: Held,
                 result: GangDecision, now: float) -> bool:
        """Take what its Queue's policy lets it take (``controller/queue_preemption.py``) if its whole gang then fits
        its quota and the nodes; True when it preempts, False otherwise (why, in the reason, when it would not help)."""
        if not self.preemption.enabled or not all(p.preempts for p in gang.live) \
                or not self.reclaim.possible(gang, queue) or self.preemption.rounds_left(gang.key) == 0:
            return False
        members = [self.fitting.member(p, gang) for p in pods] + self.fitting.expected_members(gang)
        if any(p.node for p in gang.live) and request:
            members = self.fitting.anchored(members, gang, request)
        later = self.preemption.deferred()
        if later is not None:
            result.reason += f"; {later.reason}"
            return False
        with self.preemption.searching():
            found = self.reclaim.find(gang, queue, members, demand_of(pods, gang.expected), request, held)
        if found is None:
            return False
        if isinstance(found, Futile):
            result.reason += f"; {found.reason}"
            return False
        self._evict_victims(gang, found, members, held, now, f"as its Queue {queue} allows")
        flight = result.preemption = self.preemption.inflight[gang.key]
        result.cause = Cause.PREEMPTING
        result.reason = (f"preempting as its Queue {queue} allows {len(found.units)} gang(s), {len(found.pods)} pod(s) "
                         f"in all ({named(found.units)}) to place its {len(members)} members on "
                         f"{len(set(found.placement.values()))} node(s) within its quota (round {flight.round}); it is "
                         "released once they are gone")
        return True

    def _preempt(self, gang: Gang, members: list[Member], request: Request, held: Held, result: GangDecision,
                 now: float) -> bool:
        """Evict lower-priority units for the gang if that lets it fit (``controller/preemption.py``); True when it
        preempts (or waits for pods preempted earlier), False when preemption would not help (said in the reason)."""
        if any(p.node for p in gang.live) and request:  # members bound without a release fix their unit's domain
            members = self.fitting.anchored(members, gang, request)
        base = self._token(gang.key)
        token: Hashable = base
        spared: frozenset[GangKey] = frozenset()
        if isinstance(self.quota.of.get(gang.key), str):  # gangs of Queues go only as its Queue's policy says
            spared, token = self.quota.spared, (*base, self.state.queues.version)
        found = self.preemption.find(gang, members, request, held, token, spared)
        if isinstance(found, Futile):
            result.reason += f"; {found.reason}"
            return False
        result.cause = Cause.PREEMPTING
        if isinstance(found, str):
            result.reason += f"; {found}"
            return True
        self._evict_victims(gang, found, members, held, now)
        flight = result.preemption = self.preemption.inflight[gang.key]
        result.reason = (f"preempting {len(found.units)} unit(s) of lower priority, {len(found.pods)} pod(s) in all "
                         f"({named(found.units)}) "
                         f"to place its {len(members)} members on {len(set(found.placement.values()))} node(s) "
                         f"(round {flight.round}); it is released once they are gone")
        return True

    def _evict_victims(self, gang: Gang, victims: Victims, members: list[Member], held: Held, now: float,
                       why: str = LOWER_PRIORITY) -> None:
        """The preemption's bookkeeping: the victims out of their gangs' views (never replaced, no vacancy; their
        room no other preemption's), the victim gangs told who preempted them, the room held for the preemptor from
        now on (later gangs of this pass plan around it too), and the evictions to carry out."""
        self.preemption.start(gang, victims, members, now)
        held[gang.key] = dict(self.preemption.inflight[gang.key].room)
        note = f"preempted by gang {gang.key[0]}/{gang.key[1]} (priority {gang.priority})" + (
            "" if why == LOWER_PRIORITY else f", {why}")
        for unit in victims.units:
            if unit.gang is not None:
                self._forget(unit.gang)
                self.state.whole.discard(unit.gang)  # its run is over: recreated members start whole again
                self.state.preempted[unit.gang] = (note, now)
        self.state.mark_evicted(victims.pods)
        self._preemptions.append(Preempting(gang.key, gang.owner, gang.sample, victims.units,
                                            len(set(victims.placement.values())), len(members),
                                            self.preemption.inflight[gang.key].round, why))

    def _token(self, key: GangKey) -> _Token:
        """What a gang's "not yet" depends on (``_Token``)."""
        return self.state.gang_versions.get(key), self.state.freed, self.state.shape_version, self.books.held_version

    def _plan_waiting(self, gang: Gang, live: list[PodView], needed: int, expected: list[Member], held: Held,
                      claims: dict[str, Resources], request: Request
                      ) -> tuple[PlanResult, list[PodView], list[Member], tuple[str, ...]]:
        """A plan for the gated members (all of them, else the ``needed`` oldest) and the expected ones; when none
        fits, the reason for the oldest ``needed``. Returns the plan, the pods it releases, the members planned
        (those of a cached "not yet" are not rebuilt) and, with a topology, the domains of the plan (or of the best
        domain's partial plan)."""
        chosen = live if len(live) == needed else live[:needed]
        candidates = [live, chosen] if len(live) > needed else [live]
        limits = self.backfill.limits(gang.key, held, claims) if claims else None
        # Nothing freed, no member changed, no held room given back: the last "not yet" still holds.
        token: _Token | None = self._token(gang.key) if not claims else None
        cached = self._not_yet.get(gang.key)
        if token is not None and cached is not None and cached[0] == token:
            return cached[1], cached[2], [], cached[3]
        self._not_yet.pop(gang.key, None)
        shapes = [shape_of(e.key, e.usage) for e in gang.expected]
        domains: tuple[str, ...] = ()
        # Members bound without the controller's release (escaped, or released by someone else) fix their unit's
        # domain: the rest may only join them there (else the gang waits and, bound in part, is evicted in time).
        bound = bool(request) and any(p.node for p in gang.live)
        for group in candidates:
            members = [self.fitting.member(p, gang) for p in group] + expected
            if bound:
                members = self.fitting.anchored(members, gang, request)
            group_shapes = [shape_of(p.key, p.usage) for p in group] + shapes
            if not request:
                found = self.fitting.plan_guided(members, group_shapes, gang, held, limits)
            else:
                planned = self.fitting.plan_topology(members, group_shapes, gang, held, limits, request)
                found, domains = planned.result, planned.domains
            if found.fits:
                return found, group, members, domains
        if token is not None:
            self._not_yet[gang.key] = (token, found, chosen, domains)
        return found, chosen, members, domains

    def _hold(self, gang: Gang, result: GangDecision, placed: list[PodView], now: float,
              evictions: list[Eviction]) -> GangDecision:
        """A gang that waits while some of its members run (bound without this controller's release): all or nothing,
        so after ``controller.bindTimeoutSeconds`` of that it is evicted."""
        if not placed:
            return result
        since = self.books.partial.setdefault(gang.key, now)
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
                if fits(pod.usage, free) and not fits(pod.usage, subtract(free, usage)) and \
                        self.feasibility.admits(pod, node):
                    found.append(pod)
                    break
        return found


def _seconds(value: str | None) -> float:
    try:
        number = float(value) if value else 0.0
    except ValueError:
        return 0.0
    return number if number > 0 else 0.0


def _where(request: Request, domains: tuple[str, ...]) -> str:
    """Where a released gang's plan lies, for its reason."""
    if not request:
        return ""
    topology = request[0]
    if not topology.whole:
        return f", each of its units in one domain ({', '.join(domains)})"
    if len(domains) == 1:
        return f" in {topology.key} domain {domains[0]}"
    if not domains:
        return f" (preferred {topology.key}: no node of the plan has that label)"
    return f" across {len(domains)} {topology.key} domains (preferred: no fewer could hold it now)"

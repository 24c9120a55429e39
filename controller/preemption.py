"""Gang preemption: a waiting gang that does not fit takes the room of strictly lower-priority work, whole, minimal,
and only when it then fits.

A gated pod never reaches kube-scheduler, so its priority-based preemption never acts for a gang; this restores it,
without the failures users meet elsewhere (a victim gang broken in part, evictions that do not let the preemptor
start, more victims than needed, a second round while the first still terminates):

- **Units.** A candidate victim is a *unit*: a gang of ours with all its live members (never some of them), or any
  other pod on its own; of strictly lower priority than the preemptor; charged to a node (bound, or released onto
  it); never a DaemonSet or static pod, never one already terminating.
- **Only what helps, plan-verified.** The preemptor's whole gang (present and expected members, topology requests,
  pins) is planned first with every candidate gone (``Fitting.plan_with_room``): no plan, and nothing is evicted
  (``Futile``, with the planner's numbers). With a plan, each node of it that lacks room gets units from those on it,
  the least important first (``choose``); then the chosen units, most important first, are reprieved while the plan
  still holds; and the plan is checked against the nodes with exactly those units gone (``check_placement``) before
  anything is evicted. Among plans, the one whose victims ``cost`` least, as kube-scheduler picks a node
  (``_fewer``, for plans with victims on a few nodes).
- **Order** (``importance``): a unit whose eviction a PodDisruptionBudget forbids is more important than one it does
  not; then the higher its priority, a gang over a pod, the more pods, the older (its newest member created earlier)
  the more important. Victims are taken least important first and reprieved most important first, as kube-scheduler's
  ``SelectVictimsOnNode`` does with pods.
- **No second round while victims terminate**: pods preempted or evicted earlier (``PodView.disrupted``) still
  terminating on a node of the plan make the gang wait for them (``Pending``), as kube-scheduler waits for its
  nominated node's.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from controller.bookkeeping import Gang, HeldRoom
from controller.capacity import PODS, add, shortfall, subtract
from controller.fitting import Fitting, held_on
from controller.members import GangKey, PodView
from controller.planner import check_placement
from controller.problem import Member, NodeFree, RequestsMemo, member_requests
from controller.state import ClusterState
from controller.topology import Request
from gang.resources import Resources

_ZERO = Decimal(0)


@dataclass(frozen=True)
class Unit:
    """One candidate victim: a gang of ours (``gang``, all its live members) or one other pod."""

    name: str  # "gang <namespace>/<name>" or "pod <namespace>/<name>"
    pods: tuple[PodView, ...]
    priority: int
    newest: float  # when its newest member was created
    gang: GangKey | None = None
    violations: int = 0  # pods a PodDisruptionBudget forbids evicting now
    freed: Mapping[str, Resources] = field(default_factory=dict)  # node -> the room it frees there

    @property
    def importance(self) -> tuple[bool, int, bool, int, float]:
        """Greater is more important (module docstring): evicted last, reprieved first."""
        return self.violations > 0, self.priority, self.gang is not None, len(self.pods), -self.newest


@dataclass(frozen=True)
class Victims:
    """The units to evict and the placement their room makes for the preemptor's members."""

    units: tuple[Unit, ...]
    placement: Mapping[str, str]

    @property
    def pods(self) -> tuple[PodView, ...]:
        return tuple(pod for unit in self.units for pod in unit.pods)


@dataclass(frozen=True)
class Futile:
    """Why no preemption helps (nothing is evicted)."""

    reason: str


def unit_of(pods: Sequence[PodView], gang: GangKey | None, violations: int, charged: Callable[[str], str]) -> Unit:
    """The unit of ``pods`` (a gang's live members, or one pod) with the room it frees per node: its priority is
    its members' highest, its age its newest member's. One loop: a preemption builds thousands of units."""
    freed: dict[str, Resources] = {}
    first = pods[0]
    priority, newest = first.priority, first.created
    for pod in pods:
        node = charged(pod.uid)
        if node:
            freed[node] = add(freed[node], pod.usage) if node in freed else dict(pod.usage)
        if pod.priority > priority:
            priority = pod.priority
        if pod.created > newest:
            newest = pod.created
    name = f"gang {gang[0]}/{gang[1]}" if gang is not None else f"pod {first.namespace}/{first.name}"
    return Unit(name, tuple(pods), priority, newest, gang, violations, freed)


def named(units: Sequence[Unit], limit: int = 3) -> str:
    """The units as events and reasons name them: ``gang ml/nightly (priority 100, 2 pods), pod ml/x (priority 0)``."""
    shown = [f"{u.name} (priority {u.priority}" + (f", {len(u.pods)} pods)" if u.gang else ")") for u in units[:limit]]
    return ", ".join(shown) + (", ..." if len(units) > limit else "")


def need_per_node(members: Sequence[Member], placement: Mapping[str, str]) -> dict[str, Resources]:
    """What the placement puts on each node (requests and one pod slot each)."""
    need: dict[str, Resources] = {}
    memo: RequestsMemo = {}
    for member in members:
        node = placement[member.name]
        need[node] = add(need.get(node, {}), member_requests(member, memo))
    return need


def choose(need: Mapping[str, Resources], free: Mapping[str, Resources],
           on_node: Mapping[str, Sequence[Unit]]) -> list[Unit] | None:
    """The units whose room lets every node hold what ``need`` puts on it beside ``free``: per node short of room, the
    least important units on it until it has enough (a unit's room on other nodes counts there too); then every
    chosen unit, most important first, reprieved while every node still has enough. None when the units on some node
    cannot make enough room. Units are told apart by name (unique among one gang's candidates): thousands of victims
    compared field by field cost seconds."""
    freed: dict[str, Resources] = {}
    chosen: list[Unit] = []
    taken: set[str] = set()
    for node in sorted(need):
        if _fits_beside(need[node], free.get(node, {}), freed.get(node, {})):
            continue
        for unit in sorted(on_node.get(node, ()), key=lambda u: u.importance):
            if unit.name in taken:
                continue
            chosen.append(unit)
            taken.add(unit.name)
            for where, room in unit.freed.items():
                freed[where] = add(freed.get(where, {}), room)
            if _fits_beside(need[node], free.get(node, {}), freed.get(node, {})):
                break
        else:
            return None
    reprieved: set[str] = set()
    for unit in sorted(chosen, key=lambda u: u.importance, reverse=True):
        without = {where: subtract(freed[where], room) for where, room in unit.freed.items()}
        if all(_fits_beside(need[where], free.get(where, {}), without[where]) for where in without if where in need):
            reprieved.add(unit.name)
            freed.update(without)
    return [unit for unit in chosen if unit.name not in reprieved]


def cost(units: Sequence[Unit]) -> tuple[int, int, int, int, float]:
    """How much a set of victims costs, in kube-scheduler's order of nodes for preemption (smaller is better): fewest
    units a PodDisruptionBudget protects, the lowest highest priority, fewest units, fewest pods, the latest start of
    the oldest among the highest-priority ones."""
    if not units:
        return 0, -(2**63), 0, 0, 0.0
    top = max(u.priority for u in units)
    return (sum(1 for u in units if u.violations), top, len(units), sum(len(u.pods) for u in units),
            -min(u.newest for u in units if u.priority == top))


def _without(room: Callable[[str], Resources], nodes: frozenset[str]) -> Callable[[str], Resources]:
    """``room`` but none on ``nodes`` (what is free there stays usable)."""
    return lambda node: {} if node in nodes else room(node)


def _fits_beside(need: Resources, free: Resources, freed: Resources) -> bool:
    """``fits(need, add(free, freed))``, without making the sum (``choose`` asks thousands of times)."""
    return all(value <= 0 or value <= free.get(name, _ZERO) + freed.get(name, _ZERO) for name, value in need.items())


def verified(members: Sequence[Member], nodes: Iterable[NodeFree], units: Sequence[Unit],
             placement: Mapping[str, str]) -> list[str]:
    """``check_placement`` of the plan against ``nodes`` with exactly ``units`` gone: their room freed, their host
    ports released. Empty when the plan holds."""
    freed: dict[str, Resources] = {}
    ports: dict[str, set[object]] = {}
    for unit in units:
        for where, room in unit.freed.items():
            freed[where] = add(freed.get(where, {}), room)
        for pod in unit.pods:
            ports.setdefault(pod.node or pod.planned_node, set()).update(pod.ports)
    after = [NodeFree(node.name, add(node.free, freed.get(node.name, {})),
                      frozenset(node.used_ports) - ports.get(node.name, set())) for node in nodes]
    return check_placement(members, after, placement)


def _holds(requests: Sequence[tuple[str, Decimal]], free: Resources, room: Resources,
           held: Resources | None) -> int:
    """How many members of ``requests`` fit ``free`` plus ``room`` minus ``held``."""
    most: int | None = None
    for name, value in requests:
        if value > 0:
            have = free.get(name, _ZERO) + room.get(name, _ZERO) - (held.get(name, _ZERO) if held else _ZERO)
            fit = int(have // value)
            if fit <= 0:
                return 0
            most = fit if most is None or fit < most else most
    return most if most is not None else 0


def short_text(need: Mapping[str, Resources], free: Mapping[str, Resources]) -> str:
    """What the nodes of a plan lack, summed (for reasons)."""
    total: Resources = {}
    for node, wanted in need.items():
        total = add(total, shortfall(wanted, free.get(node, {})))
    return ", ".join(f"{value} {name}" for name, value in sorted(total.items()) if value > 0) or "nothing"


@dataclass
class InFlight:
    """A preemption under way: its victims (until the watch says they are gone), the room its plan needs per node
    (held for it meanwhile: no other gang of ours takes it), its round, and since when."""

    victims: frozenset[str]
    room: dict[str, Resources]
    round: int
    started: float
    units: tuple[Unit, ...] = ()


# Preemption searches per pass, at most this long (then the gangs after are weighed in a later pass, ahead of which
# the gangs searched already preempt, wait for their victims or answer from the kept "no"): a pass over thousands of
# gangs that may preempt, after a restart, still ends and releases what fits.
SEARCH_SECONDS = 1.0
FEWER_NODES = 8  # plans with victims on at most so many nodes are searched for fewer victims (``_fewer``)
MAX_ROUNDS = 3  # per gang: an interloper may take the room its victims freed; then it preempts again, at most so often
FORGET_SECONDS = 3600.0  # how long a victim gang that does not come back is remembered as preempted


class Preemption:
    """The engine's unit: whether a gang may preempt, its victims for a plan over the room they would free, and the
    preemptions under way (held room, no second round while victims terminate)."""

    def __init__(self, state: ClusterState, fitting: Fitting, enabled: bool) -> None:
        self.state, self.fitting, self.enabled = state, fitting, enabled
        self.inflight: dict[GangKey, InFlight] = {}
        self._futile: dict[GangKey, tuple[Hashable, Futile]] = {}  # the last "no preemption helps", per gang
        self._slots: dict[tuple[Any, frozenset[str], int], tuple[int, bool]] = {}  # (slots, exact): _too_few_slots
        self._slots_token: Hashable = None
        self._held_on: dict[str, Resources] = {}  # the room held for gangs per node, as the slots were counted
        self._started = 0  # preemptions started: each holds more room
        self._spared: tuple[Hashable, Mapping[str, list[tuple[int, Resources]]]] = (None, {})  # _spared_on_nodes
        self._spent = 0.0  # seconds of preemption searches in this pass (SEARCH_SECONDS)

    def prune(self, now: float) -> None:
        """A new pass (its own search budget): forget preemptions of gangs that are gone, and what preempted a gang
        once it runs whole again (or has been gone for an hour)."""
        self._spent = 0.0
        for key in [k for k in self.inflight if k not in self.state.gangs]:
            del self.inflight[key]
        for key in [k for k in self._futile if k not in self.state.gangs]:
            del self._futile[key]
        preempted = self.state.preempted
        for key in [k for k, (_, at) in preempted.items()
                    if k in self.state.whole or (k not in self.state.gangs and now - at > FORGET_SECONDS)]:
            del preempted[key]

    def abandon(self, uid: str) -> None:
        """A victim could not be preempted (its DELETE refused): no preemption waits for it any more."""
        for key, flight in list(self.inflight.items()):
            if uid in flight.victims:
                self.inflight[key] = replace(flight, victims=flight.victims - {uid})

    def done(self, key: GangKey) -> None:
        """The preemptor is released: its preemption is over."""
        self.inflight.pop(key, None)

    def held(self) -> dict[GangKey, dict[str, Resources]]:
        """Per preemptor, the room its plan needs: no other gang of ours plans with it while its victims go."""
        return {key: dict(flight.room) for key, flight in self.inflight.items()}

    def demand(self) -> dict[GangKey, Resources]:
        """Per preemptor, all its plan needs: counted in its Queue's usage while its victims go
        (``controller/quota.py``), as the room they free is held for it on the nodes."""
        return {key: functools.reduce(add, flight.room.values(), {}) for key, flight in self.inflight.items()}

    def remaining(self, key: GangKey) -> list[PodView]:
        """The victims of the gang's preemption that are not gone yet."""
        flight = self.inflight.get(key)
        return [self.state.pods[uid] for uid in flight.victims if uid in self.state.pods] if flight else []

    def rounds_left(self, key: GangKey) -> int:
        flight = self.inflight.get(key)
        return MAX_ROUNDS - (flight.round if flight else 0)

    def used_up(self, key: GangKey) -> bool:
        """Its last round's victims are gone and it still does not fit: it preempts no more, and the room held for it
        is let go (kept, it would hold room for ever for a gang others keep taking it from)."""
        flight = self.inflight.get(key)
        if flight is None or flight.round < MAX_ROUNDS or self.remaining(key):
            return False
        if flight.room:
            self.inflight[key] = replace(flight, room={})
        return True

    def may(self, gang: Gang) -> bool:
        """Preemption is on, the gang's members may preempt (``preemptionPolicy`` not Never), something of lower
        priority runs somewhere, and it has rounds left."""
        lowest = self.state.lowest_priority()
        return (self.enabled and lowest is not None and lowest < gang.priority
                and all(p.preempts for p in gang.live) and self.rounds_left(gang.key) > 0)

    def declined(self, gang: Gang) -> bool:
        """The gang could preempt something of lower priority but its members say ``preemptionPolicy: Never``."""
        lowest = self.state.lowest_priority()
        return (self.enabled and lowest is not None and lowest < gang.priority
                and not all(p.preempts for p in gang.live))

    def find(self, gang: Gang, members: list[Member], request: Request, held: HeldRoom,
             token: Hashable, spared: frozenset[GangKey] = frozenset()) -> Victims | Futile | str:
        """The victims that let the whole gang fit, ``Futile`` when none would, or why it waits instead (pods
        disrupted earlier still terminate where its plan would go). ``spared``: gangs it may not take by priority
        (a preemptor in a Queue: gangs in Queues go only as its Queue's policy says, ``controller/queue_preemption.py``;
        ``token`` then changes with Queue membership)."""
        with self.searching():
            return self._find(gang, members, request, held, token, spared)

    @contextlib.contextmanager
    def searching(self) -> Iterator[None]:
        """A preemption search (by priority, or by Queue policy): its time counts against the pass's budget."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self._spent += time.perf_counter() - started

    def deferred(self) -> Futile | None:
        """Why no more preemption search happens in this pass (``SEARCH_SECONDS`` spent), or None."""
        if self._spent < SEARCH_SECONDS:
            return None
        return Futile(f"its preemption is weighed in a later pass: this one spent its {SEARCH_SECONDS:g} s of "
                      "preemption searches on gangs ahead of it")

    def _find(self, gang: Gang, members: list[Member], request: Request, held: HeldRoom,
              token: Hashable, spared: frozenset[GangKey]) -> Victims | Futile | str:
        planned = self._plan(gang, members, request, held, token, spared)
        if isinstance(planned, Futile):
            return planned
        placement, room = planned
        terminating = self._terminating(placement)
        if terminating:
            return (f"pods preempted or evicted earlier still terminate on the nodes its plan needs (e.g. "
                    f"{terminating[0].namespace}/{terminating[0].name} on {terminating[0].node}): it waits for them "
                    "before preempting more")
        found = self._victims(gang, members, placement, held, spared)
        if isinstance(found, Futile):
            return found
        return self._fewer(gang, members, request, held, spared, room, found)

    def _terminating(self, placement: Mapping[str, str]) -> list[PodView]:
        return [p for node in sorted(set(placement.values())) for p in self.state.charged_on(node)
                if p.deleting and p.disrupted]

    def _fewer(self, gang: Gang, members: list[Member], request: Request, held: HeldRoom, spared: frozenset[GangKey],
               room: Callable[[str], Resources], victims: Victims) -> Victims:
        """kube-scheduler's choice among nodes (``pickOneNodeForPreemption``), for a plan with victims on at most
        ``FEWER_NODES`` nodes: node by node, its victims' node the most important first, the plan is made again
        without the room preemption would make there; a plan whose victims ``cost`` less is kept. Larger plans keep
        the planner's first plan (its victims minimal node by node)."""
        used = set(victims.placement.values())
        costly = {node for unit in victims.units for node in unit.freed if node in used}
        if len(costly) > FEWER_NODES:
            return victims
        best, out = victims, frozenset[str]()
        for node in sorted(costly, key=lambda n: cost([u for u in victims.units if n in u.freed]), reverse=True):
            trial = out | {node}
            found = self.fitting.plan_with_room(members, gang, held, request, _without(room, trial)).result
            if found.placement is None or self._terminating(found.placement):
                continue
            other = self._victims(gang, members, found.placement, held, spared)
            if isinstance(other, Victims) and cost(other.units) < cost(best.units):
                best, out = other, trial
        return best

    def _victims(self, gang: Gang, members: list[Member], placement: Mapping[str, str], held: HeldRoom,
                 spared: frozenset[GangKey]) -> Victims | Futile:
        """The fewest, least important units that make room for ``placement``, verified, or why there are none."""
        need = need_per_node(members, placement)
        nodes = self.fitting.nodes(gang, sorted(need), held, None)
        free = {node.name: node.free for node in nodes}
        on_node: dict[str, list[Unit]] = {node: [] for node in need}
        for unit in self._units(sorted(need), gang.priority, gang.key, spared).values():
            for node in unit.freed:
                if node in on_node:
                    on_node[node].append(unit)
        chosen = choose(need, free, on_node)
        if chosen is None or (problems := verified(members, nodes, chosen, placement)):
            why = "no units of lower priority make room on every node of the plan" if chosen is None else problems[0]
            return Futile(f"no preemption verified for its plan over {len(need)} node(s): {why}")
        return Victims(tuple(chosen), placement)

    def _plan(self, gang: Gang, members: list[Member], request: Request, held: HeldRoom, token: Hashable,
              spared: frozenset[GangKey]) -> tuple[Mapping[str, str], Callable[[str], Resources]] | Futile:
        """The plan whose victims matter least, as kube-scheduler picks a node: over the room pods no
        PodDisruptionBudget protects would make, then any; up to the lowest priority that makes enough room (the
        lowest "highest-priority victim"); ``Futile`` when even every lower-priority pod would not. The room of
        ``spared`` gangs is never counted. Returns the plan and the room it was made over.

        The last try is over the most room there is (every lower-priority pod gone): when it holds no plan, no level
        does. Such a "no" is kept for the gang while ``token`` (what it depends on: its members and root, the room freed
        anywhere, the nodes' shapes, the room held for gangs) stays the same: room below a priority only grows when
        one of those moves, and a gang waiting in vain is otherwise searched for again on every pass."""
        cached = self._futile.get(gang.key)
        if cached is not None and cached[0] == token:
            return cached[1]
        state, priority = self.state, gang.priority
        levels = sorted({level for level in state.priorities() if level < priority})
        if not levels:
            return Futile(f"preempting every pod of lower priority than {priority} would not make room: nothing of "
                          "lower priority runs")
        short = self._too_few_slots(members, priority, held, token)
        if short:
            futile = Futile(f"preempting every pod of lower priority than {priority} would not make room: {short}")
            self._futile[gang.key] = (token, futile)
            return futile
        later = self.deferred()
        if later is not None:  # not kept: it is searched for in a later pass
            return later
        protected = self._protected(priority, spared)
        untouchable = self._spared_on_nodes(spared)

        def made(level: int, spare: bool) -> Callable[[str], Resources]:
            def room(node: str) -> Resources:
                made = state.room_below(node, level + 1)
                for below, usage in itertools.chain(protected.get(node, ()) if spare else (),
                                                    untouchable.get(node, ())):
                    if below <= level:
                        made = subtract(made, usage)
                return made

            return room

        tries = [(level, True) for level in levels] if protected else []
        for level, spare in tries + [(level, False) for level in levels]:
            room = made(level, spare)
            found = self.fitting.plan_with_room(members, gang, held, request, room).result
            if found.placement is not None:
                self._futile.pop(gang.key, None)
                return found.placement, room
        futile = Futile(f"preempting every pod of lower priority than {priority} would not make room: "
                        f"{found.shortfall}")
        self._futile[gang.key] = (token, futile)
        return futile

    def _too_few_slots(self, members: Sequence[Member], priority: int, held: HeldRoom, token: Hashable) -> str:
        """A "certainly not" before the search, for a gang that would wait in vain: per class of identical members
        (requests, allowed nodes), at most how many of them the nodes could hold with every pod of lower priority
        gone (free plus that room, minus the room held for gangs, node by node: an upper bound). Fewer than the class
        has members, and no plan exists: the reason, else "". Kept per class and priority while nothing freed, no
        node changed and the room held did not change (``token`` without the gang's own version, and the
        preemptions started since), as the bound only shrinks meanwhile; gangs of one shape share it."""
        state = self.state
        version = (token[1:] if isinstance(token, tuple) else token, state.static_version, self._started)
        if self._slots_token != version:
            self._slots, self._slots_token = {}, version
            self._held_on = held_on(held)
        on = self._held_on
        by_object: dict[tuple[int, frozenset[str]], tuple[Member, int]] = {}  # members share requests mappings
        for member in members:
            if member.pinned is None:
                first, count = by_object.get((id(member.requests), member.nodes), (member, 0))
                by_object[(id(member.requests), member.nodes)] = (first, count + 1)
        classes: dict[tuple[tuple[tuple[str, Decimal], ...], frozenset[str]], int] = {}
        for first, count in by_object.values():
            key = (tuple(sorted(member_requests(first).items())), first.nodes)
            classes[key] = classes.get(key, 0) + count
        for (requests, nodes), count in classes.items():
            where = (requests, nodes, priority)
            slots, exact = self._slots.get(where, (0, False))
            if not exact and slots < count:  # counted until there are enough: kept as exact, or as "at least"
                slots = 0
                for node in nodes:
                    slots += _holds(requests, state.free(node), state.room_below(node, priority), on.get(node))
                    if slots >= count:
                        break
                else:
                    exact = True
                self._slots[where] = (slots, exact)
            if slots < count:
                shown = ", ".join(f"{name} {value}" for name, value in requests if name != PODS)
                return (f"{count} of its members ask for {shown or 'a pod slot'} each and the nodes they may use "
                        f"could hold {slots} such member(s) at most")
        return ""

    def _protected(self, priority: int, spared: frozenset[GangKey]) -> dict[str, list[tuple[int, Resources]]]:
        """Per node, the (priority, usage) of lower-priority pods a PodDisruptionBudget forbids evicting now (those of
        ``spared`` gangs are left out: never counted at all)."""
        state = self.state
        protected: dict[str, list[tuple[int, Resources]]] = {}
        for pod in state.covered(allowed=0, below=priority):
            node = state.charged_node(pod.uid)
            if node and not pod.deleting and not pod.permanent and pod.gang not in spared:
                protected.setdefault(node, []).append((pod.priority, pod.usage))
        return protected

    def _spared_on_nodes(self, spared: frozenset[GangKey]) -> Mapping[str, list[tuple[int, Resources]]]:
        """Per node, the (priority, usage) of the members of ``spared`` gangs counted in ``room_below`` (charged,
        neither static nor terminating nor evicted): room priority preemption may not make. Kept while the state and
        ``spared`` stay the same (every gang of a Queue searching in a pass asks for the same)."""
        state = self.state
        if self._spared[0] == (state.version, spared):
            return self._spared[1]
        found: dict[str, list[tuple[int, Resources]]] = {}
        for key in spared:
            for pod in state.members(key):
                node = state.charged_node(pod.uid)
                if node and not pod.deleting and not pod.permanent and pod.uid not in state.evicted:
                    found.setdefault(node, []).append((pod.priority, pod.usage))
        self._spared = ((state.version, spared), found)
        return found

    def start(self, gang: Gang, victims: Victims, members: Sequence[Member], now: float) -> None:
        flight = self.inflight.get(gang.key)
        self._started += 1
        self.inflight[gang.key] = InFlight(frozenset(p.uid for p in victims.pods),
                                           need_per_node(members, victims.placement),
                                           flight.round + 1 if flight else 1, now, victims.units)

    def _units(self, nodes: Sequence[str], priority: int, own: GangKey,
               spared: frozenset[GangKey] = frozenset()) -> dict[str, Unit]:
        """The candidate units with a pod on ``nodes`` (module docstring), by name, but ``spared`` gangs. A pod of at
        least ``priority`` is passed over at once: its unit (its gang's priority is its own) could not be one."""
        state = self.state
        units: dict[str, Unit] = {}
        seen: set[object] = set()
        for node in nodes:
            for pod in state.charged_on(node):
                if pod.priority >= priority:
                    continue
                key: object = pod.gang if pod.gang is not None and pod.gang in state.gangs else pod.uid
                if key in seen or pod.permanent or pod.deleting or pod.terminal or pod.gang == own \
                        or pod.uid in state.evicted or key in spared:
                    continue
                seen.add(key)
                if isinstance(key, tuple):
                    pods = [p for p in state.members(key) if p.live and state.charged_node(p.uid)]
                    unit = unit_of(pods, key, state.violations(pods), state.charged_node)
                    if unit.priority < priority and not any(p.deleting or p.permanent for p in unit.pods):
                        units[unit.name] = unit
                else:  # its priority and state are checked above
                    unit = unit_of([pod], None, state.violations([pod]), state.charged_node)
                    units[unit.name] = unit
        return units

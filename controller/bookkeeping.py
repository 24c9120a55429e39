"""The engine's bookkeeping between passes: gangs assembled from their members, the slots reserved for expected
members, the room held for gangs, and since when members run that the gate controller did not release.

A gang's view is rebuilt only when a member changed (``ClusterState.gang_versions``). Room held for a gang (open
slots of its expected members, vacancies its failed members left) is room no other gang may plan with; every change
to it bumps ``held_version``, so that a waiting gang's cached "not yet" is looked at again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from controller.capacity import add, subtract
from controller.integrity import Stuck
from controller.members import Expected, GangKey, PodView
from controller.state import ClusterState
from gang.resources import Resources

# Per gang, per node: room held for the gang that others must not use (the pass's own, and read-only views of it).
Held = dict[GangKey, dict[str, Resources]]
HeldRoom = Mapping[GangKey, Mapping[str, Resources]]


@dataclass
class Gang:
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
    started: bool | None = None  # some member released (see Bookkeeping.started), once computed
    # Members that may be stuck (released and unbound, or rejected) and that escaped (loose), once computed: both
    # change only with a member, which makes a new view.
    suspects: list[PodView] | None = None
    loose: list[Stuck] | None = None

    def late(self, pod: PodView) -> bool:
        """A member created after the first stage: it does not announce the expected members."""
        return bool(self.expected) and not pod.expected_text

    @property
    def needed(self) -> int:
        """Members of the first stage the gang needs: its size less the expected later members, at least one."""
        return max(self.min_available - len(self.expected), 1)


def assemble(key: GangKey, members: list[PodView]) -> Gang:
    """The gang of ``members`` (at least one): its size from their min-available label (all live members when no
    member has one), the expected later members from the first-stage member that announces the most of them."""
    announcing = [p for p in members if p.expected_text]
    live = [p for p in members if p.live] or members
    min_available = max((p.min_available for p in members), default=0) or len(live)
    # At least one member of the first stage announces the rest: never more expected than that leaves.
    expected = max((p.expected for p in announcing), key=len, default=())[:max(min_available - 1, 0)]
    return Gang(
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


class Bookkeeping:
    """Gang views, reserved slots, held room and partial starts, kept across passes."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.slots: dict[GangKey, tuple[str, ...]] = {}  # reserved nodes decided in memory
        self.partial: dict[GangKey, float] = {}  # since when members run that the gate controller did not release
        self.held_version = 0  # bumps when room held for gangs changes: cached "not yet"s may be stale
        self._views: dict[GangKey, tuple[int, Gang | None]] = {}  # per gang, as of its members' last change
        self._held_seen: Held = {}

    def prune(self) -> None:
        """Forget gangs that have no member left."""
        gangs = self.state.gangs
        for cache in (self.slots, self._views, self.partial):
            for key in [k for k in cache if k not in gangs]:
                del cache[key]

    def gang(self, key: GangKey) -> Gang | None:
        """The gang as of its members' last change (rebuilt only then), without the members being evicted; None
        when that leaves none."""
        version = self.state.gang_versions.get(key, 0)
        cached = self._views.get(key)
        if cached is None or cached[0] != version:
            evicted = self.state.evicted
            members = [p for p in self.state.members(key) if p.uid not in evicted]
            cached = self._views[key] = (version, assemble(key, members) if members else None)
        return cached[1]

    def started(self, gang: Gang) -> bool:
        """Released by this controller (some member, not on its way out), or known to have run whole: members
        someone else released, or that escaped admission, never start a gang, they only count as placed."""
        if gang.key in self.slots or gang.key in self.state.whole:
            return True
        if gang.started is None:  # fixed for this view: a release or a watch event makes a new one
            gang.started = any(p.uid in self.state.pending or (p.released and not p.deleting)
                               for p in gang.members if p.live or p.node)
        return gang.started

    # --- reservations that are not pods: slots for expected members, vacancies --------------------

    def slot_nodes(self, gang: Gang) -> tuple[str, ...]:
        if gang.key in self.slots:
            return self.slots[gang.key]
        return next((p.reserved_nodes for p in gang.members if p.reserved_nodes), ())

    def open_slots(self, gang: Gang) -> list[tuple[str, Expected]]:
        """Reserved slots of expected members that no released late member has taken yet."""
        nodes = self.slot_nodes(gang)
        return [(nodes[i], gang.expected[i]) for i in self.open_slot_indexes(gang)]

    def open_slot_indexes(self, gang: Gang) -> list[int]:
        if not gang.expected or not any(p.live and not gang.late(p) for p in gang.members):
            return []
        nodes = self.slot_nodes(gang)
        open_ = list(range(min(len(nodes), len(gang.expected))))
        for pod in gang.members:
            if gang.late(pod) and not (pod.gated and pod.uid not in self.state.pending):
                where = pod.node or pod.planned_node or self.state.pending.get(pod.uid, "")
                if open_:
                    open_.remove(_slot_taken(pod, where, open_, nodes, gang.expected))
        return open_

    def held(self, gangs: Sequence[Gang], now: float) -> Held:
        """Per gang, per node: room held for it (open slots and vacancies) that others must not use."""
        held: Held = {}
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

    def observe(self, held: Held) -> None:
        """The room held at the start of a pass: a change since the last pass makes cached "not yet"s stale."""
        if held != self._held_seen:
            self.held_version += 1
            self._held_seen = {key: dict(per_node) for key, per_node in held.items()}

    def reserve_slots(self, gang: Gang, reserved: tuple[str, ...], held: Held) -> None:
        """A released gang's expected members get slots on ``reserved`` (one node each, in order), held from now."""
        self.slots[gang.key] = reserved
        self.held_version += 1
        per_node = held.setdefault(gang.key, {})
        for member, node in zip(gang.expected, reserved, strict=True):
            per_node[node] = add(per_node.get(node, {}), member.usage)

    def move_slots(self, gang: Gang, nodes: tuple[str, ...], held: Held, now: float) -> None:
        """Open slots moved (the room reserved for them was taken): hold the room on their new nodes."""
        self.slots[gang.key] = nodes
        self.held_version += 1
        held.pop(gang.key, None)
        held.update(self.held([gang], now))

    def take(self, key: GangKey, node: str, usage: Resources, held: Mapping[GangKey, dict[str, Resources]]) -> None:
        """A member released into room held for its gang on ``node`` (a slot, a vacancy): no longer held."""
        self.held_version += 1
        per_node = held.get(key, {})
        if node in per_node:
            per_node[node] = subtract(per_node[node], usage)

    def forget(self, key: GangKey) -> None:
        """A gang evicted as a whole holds nothing any more: its operator recreates it through admission."""
        self.slots.pop(key, None)
        self.partial.pop(key, None)
        self.held_version += 1


def _slot_taken(pod: PodView, where: str, open_: list[int], nodes: Sequence[str], expected: Sequence[Expected]) -> int:
    """The open slot a released late member took: one on its node, of its child Job if any, else the first."""
    def other(i: int) -> tuple[bool, bool]:
        child = expected[i].child
        return nodes[i] != where, bool(child and pod.child and child != pod.child)

    return min(open_, key=other)

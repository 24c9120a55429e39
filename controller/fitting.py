"""One gang against the cluster as it sees it: its members as the planner's, each node's free capacity less what
others hold, and plans that the room indexes guide (``controller/rooms.py``: "certainly not" without a walk over
every node, and the few nodes to try before all of them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any

from controller.bookkeeping import Gang, HeldRoom
from controller.capacity import add, subtract
from controller.explain import slots_text, too_big_text
from controller.feasibility import Feasibility
from controller.members import PodView
from controller.planner import PlanResult, plan
from controller.predicates import HostPort, gang_member_port
from controller.problem import Member, NodeFree, Unplaceable, no_node_of
from controller.rooms import RoomIndex, Rooms, Shape, prefix, room
from controller.state import ClusterState
from controller.topology import (
    DomainTable,
    Request,
    TopologyPlan,
    anchored,
    domains_used,
    plan_in_table,
    plan_request,
    table_of,
)
from gang.resources import Resources

_NO_PORTS: frozenset[HostPort] = frozenset()


def usable(members: Sequence[Member]) -> list[str]:
    """Every node some member may use, by name."""
    return sorted(set().union(*{m.nodes for m in members})) if members else []


def held_on(held: HeldRoom) -> dict[str, Resources]:
    """The room held for gangs, per node."""
    on: dict[str, Resources] = {}
    for per_node in held.values():
        for node, room_held in per_node.items():
            on[node] = add(on[node], room_held) if node in on else room_held
    return on


_ZERO = Decimal(0)


def slots_beside(index: RoomIndex, count: int, held: HeldRoom | None, free: Callable[[str], Resources]) -> int:
    """``index.slots(count)`` with the room ``held`` taken off the nodes: below ``count`` only when the true number
    (each node capped at ``count``) is, and then never below it: a certain "no". The nodes holding room lose
    ``lost`` slots; asked for ``count + lost``, the index is exact below that, so ``slots - lost`` bounds what is
    left; at or above it, it says only "maybe"."""
    plain = index.slots(count)
    if plain < count or not held:  # free room alone says "no" (held room only takes more), or nothing is held
        return plain
    on = {node: room_held for node, room_held in held_on(held).items() if node in index.nodes}
    lost = sum(min(index.room_of(node), count) - min(room(index.usage, subtract(free(node), h)), count)
               for node, h in on.items())
    return index.slots(count + lost) - lost if lost > 0 else plain


class Fitting:
    """Members and node capacity as one gang sees them, and its plans."""

    def __init__(self, state: ClusterState, feasibility: Feasibility, rooms: Rooms) -> None:
        self.state = state
        self.feasibility = feasibility
        self.rooms = rooms
        self._now: dict[str, NodeFree] = {}  # per node, the state's free capacity (see ``_free_now``)
        self._most: dict[tuple[RoomIndex, int, tuple[Any, ...]], dict[str, Decimal]] = {}  # see ``_most_beside``

    # --- members ---------------------------------------------------------------------------------------

    def member(self, pod: PodView, gang: Gang) -> Member:
        ports = pod.ports | {_apart_port(gang, pod.name, pod.apart)} if gang.apart else pod.ports
        nodes = self.feasibility.nodes(pod.key, pod.spec or {}, pod.usage)
        if nodes:
            return Member(pod.name, pod.usage, nodes, ports)
        return Unplaceable(pod.name, pod.usage, nodes, ports,
                           no_node=self.feasibility.no_node(pod.key, pod.spec or {}, pod.usage))

    def expected_members(self, gang: Gang) -> list[Member]:
        return [self.expected_member(gang, i) for i in range(len(gang.expected))]

    def expected_member(self, gang: Gang, index: int) -> Member:
        e = gang.expected[index]
        name = _expected_name(gang, index)
        ports = frozenset({_apart_port(gang, name, e.apart)}) if gang.apart else frozenset()
        nodes = self.feasibility.nodes(e.key, e.spec, e.usage)
        if nodes:
            return Member(name, e.usage, nodes, ports)
        return Unplaceable(name, e.usage, nodes, ports, no_node=self.feasibility.no_node(e.key, e.spec, e.usage))

    def _members_on(self, gang: Gang) -> dict[str, set[HostPort]]:
        """Per node, the pseudo ports of the gang's members already there (bound or released) if it keeps apart."""
        on: dict[str, set[HostPort]] = {}
        for pod in gang.members if gang.apart else ():
            node = self.state.charged_node(pod.uid)
            if node:
                on.setdefault(node, set()).add(_apart_port(gang, pod.name, pod.apart))
        return on

    # --- capacity as one gang sees it --------------------------------------------------------------

    def nodes(self, gang: Gang, names: Sequence[str], held: HeldRoom,
              limits: Mapping[str, Resources] | None) -> list[NodeFree]:
        """Free capacity as ``gang`` sees it on ``names``: minus nominated pods of at least its priority, room held
        for gangs (its own too), and a starving gang's limits."""
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

    def plan(self, members: Sequence[Member], gang: Gang, held: HeldRoom,
             limits: Mapping[str, Resources] | None) -> PlanResult:
        """``plan`` over every node some member may use, as ``gang`` sees them."""
        return plan(members, self.nodes(gang, usable(members), held, limits))

    def roles(self, gang: Gang) -> dict[str, tuple[str, str]]:
        """Per member name (present and expected): its role and child Job, for per-role and exclusive requests."""
        roles = {pod.name: (pod.role, pod.child) for pod in gang.members}
        roles.update((_expected_name(gang, i), (e.role, e.child)) for i, e in enumerate(gang.expected))
        return roles

    def plan_topology(self, members: list[Member], shapes: list[Shape], gang: Gang, held: HeldRoom,
                      limits: Mapping[str, Resources] | None, request: Request) -> TopologyPlan:
        """``plan_in_table`` over the state's domains cut to the nodes some member may use (a whole-gang request:
        sums kept by the state, slot bounds and each domain's plan guided by the room indexes), ``plan_request`` for
        per-role and exclusive units, as ``gang`` sees the nodes; a preferred gang that fits in no few domains is
        planned anywhere (``plan_guided``)."""
        demand: dict[RoomIndex, list[Member]] = {}
        if not any(m.host_ports for m in members):
            demand, shapes_of = self._demand(members, shapes)
            no_room = self._rooms_say_no(demand, shapes_of, len(members))
            if no_room is not None:  # not even the whole cluster has room now: no domain has
                return TopologyPlan(no_room)
        labeller = self.state.labeller

        def view(nodes: Sequence[NodeFree]) -> list[NodeFree]:
            return self.nodes(gang, [node.name for node in nodes], held, limits)

        def solve(chosen: Sequence[Member], nodes: Sequence[NodeFree]) -> PlanResult:
            return self._guided(chosen, demand, [node.name for node in nodes], gang, held, limits)

        if request[0].whole:
            table = self._table(members, request[0].key)
            if demand:
                table = replace(table, room=lambda names: _room(demand, names))
            found = plan_in_table(members, table, request[0], solve)
        else:
            found = plan_request(members, [self._free_now(name) for name in usable(members)], labeller, request,
                                 self.roles(gang), view=view)
        if not found.fallback:
            return found
        anywhere = self.plan_guided(members, shapes, gang, held, limits)
        return TopologyPlan(anywhere, domains_used(anywhere.placement or {}, labeller(request[0].key)))

    def _table(self, members: Sequence[Member], key: str) -> DomainTable:
        """The domains of label ``key`` cut to the nodes some member may use, with their free totals (kept by the
        state: no walk over the nodes)."""
        sets = {m.nodes for m in members}  # interned: one per placement key
        reach = next(iter(sets)) if len(sets) == 1 else frozenset().union(*sets)
        sums = self.state.domain_sums(key, reach)
        return DomainTable(sums.nodes, self._free_now, sums.totals, reach, sums.total)

    def _free_now(self, name: str) -> NodeFree:
        """The node with the state's free capacity, for a topology's sums and order. Kept per node: the state
        updates its dicts in place, so a node is wrapped again only when its dict is replaced."""
        free = self.state.free(name)
        node = self._now.get(name)
        if node is None or node.free is not free:
            if len(self._now) > 2 * len(self.state.nodes) + 64:
                self._now.clear()
            node = self._now[name] = NodeFree(name, free, _NO_PORTS)  # the state's own dict: only read
        return node

    def anchored(self, members: Sequence[Member], gang: Gang, request: Request, slots: Sequence[str] = ()
                 ) -> list[Member]:
        """``anchored``: members of a started gang only on the domain their unit runs in; the expected members'
        ``slots`` (their reserved nodes, in order) count as where they are (an extra member of a role that so far
        has only slots joins them), except for the members being planned: slots that move together (a repair) are
        not held to where they were."""
        if not request:
            return list(members)
        placed = {pod.name: node for pod in gang.members if (node := self.state.charged_node(pod.uid))}
        placed.update((_expected_name(gang, i), node) for i, node in enumerate(slots[:len(gang.expected)]))
        for member in members:
            placed.pop(member.name, None)
        return anchored(members, request, self.roles(gang), placed, self.state.labeller, usable(members))

    def plan_with_room(self, members: list[Member], gang: Gang, held: HeldRoom, request: Request,
                       room: Callable[[str], Resources]) -> TopologyPlan:
        """A plan as if ``room(node)`` more were free on every node some member may use (the room preemption could
        make): over every such node, without the room indexes and the state's domain sums, which count only what is
        free now."""
        nodes = [NodeFree(node.name, add(node.free, room(node.name)), node.used_ports)
                 for node in self.nodes(gang, usable(members), held, None)]
        if not request:
            return TopologyPlan(plan(members, nodes))
        by_name = {node.name: node for node in nodes}

        def view(chosen: Sequence[NodeFree]) -> list[NodeFree]:
            return [by_name[node.name] for node in chosen]

        def solve(chosen: Sequence[Member], where: Sequence[NodeFree]) -> PlanResult:
            return plan(chosen, view(where))

        labeller = self.state.labeller
        if request[0].whole:
            found = plan_in_table(members, table_of(nodes, labeller(request[0].key)), request[0], solve)
        else:
            found = plan_request(members, nodes, labeller, request, self.roles(gang), view=view)
        if not found.fallback:
            return found
        anywhere = plan(members, nodes)
        return TopologyPlan(anywhere, domains_used(anywhere.placement or {}, labeller(request[0].key)))

    def plan_guided(self, members: list[Member], shapes: list[Shape], gang: Gang, held: HeldRoom,
                    limits: Mapping[str, Resources] | None) -> PlanResult:
        """``plan`` over the nodes as ``gang`` sees them; the room indexes first say "certainly not" cheaply or
        name the few nodes to try before all of them. Members with host ports (or kept apart) are planned directly."""
        if any(m.host_ports for m in members):
            return self.plan(members, gang, held, limits)
        demand, shapes_of = self._demand(members, shapes)
        no_room = self._rooms_say_no(demand, shapes_of, len(members), held)
        if no_room is not None:
            return no_room
        sets = {m.nodes for m in members}  # interned: one per placement key
        order = self.rooms.sorted_nodes(next(iter(sets)) if len(sets) == 1 else frozenset().union(*sets))
        return self._guided(members, demand, order, gang, held, limits)

    def _guided(self, members: Sequence[Member], demand: Mapping[RoomIndex, list[Member]], order: Sequence[str],
                gang: Gang, held: HeldRoom, limits: Mapping[str, Resources] | None) -> PlanResult:
        """``plan`` over the nodes of ``order`` as ``gang`` sees them: first over the fewest that the room indexes
        of ``demand`` say have room for every member, then (no ``demand``, or that failed) over all of them."""
        names = prefix(order, {index: len(group) for index, group in demand.items()}, held_on(held),
                       self.state.free) if demand else []
        if names and len(names) < len(order):
            found = plan(members, self.nodes(gang, names, held, limits))
            if found.fits:
                return found
        return plan(members, self.nodes(gang, order, held, limits))

    def _demand(self, members: Sequence[Member], shapes: Sequence[Shape]
                ) -> tuple[dict[RoomIndex, list[Member]], dict[RoomIndex, Shape]]:
        """The members by the room index of their shape and node set, and each index's shape."""
        groups: dict[Shape, list[Member]] = {}
        for member, shape in zip(members, shapes, strict=True):
            groups.setdefault(shape, []).append(member)
        shapes_of = {self.rooms.index(shape, group[0].nodes): shape for shape, group in groups.items()}
        return {index: groups[shape] for index, shape in shapes_of.items()}, shapes_of

    def _rooms_say_no(self, demand: Mapping[RoomIndex, list[Member]], shapes: Mapping[RoomIndex, Shape],
                      total: int, held: HeldRoom | None = None) -> PlanResult | None:
        """"Certainly not" from the room indexes (too few slots for some shape), or None: maybe. The indexes count
        free room; room ``held`` for gangs (a preemptor's, a staged gang's) is taken off node by node, so that the
        nodes a preemptor holds do not make every gang of that shape plan over all nodes in vain."""
        slots = {index: index.slots(len(group)) for index, group in demand.items()}
        if any(slots[index] < len(group) for index, group in demand.items()):
            return self._no_room(demand, slots, total, shapes)
        if not held:
            return None
        slots = {index: slots_beside(index, len(group), held, self.state.free) for index, group in demand.items()}
        if any(slots[index] < len(group) for index, group in demand.items()):  # the room held is what is missing
            return self._no_room(demand, slots, total, shapes, held_on(held))
        return None

    def _no_room(self, demand: Mapping[RoomIndex, list[Member]], slots: Mapping[RoomIndex, int],
                 total: int, shapes: Mapping[RoomIndex, Shape], held: Mapping[str, Resources] | None = None
                 ) -> PlanResult:
        """The planner's reason, from the room indexes: a member no node can hold, or too few slots for a class;
        with ``held`` (per node), beside the room held for gangs there."""
        short = [(index, group) for index, group in demand.items() if slots[index] < len(group)]
        index, group = next(((i, g) for i, g in short if not slots[i]), short[0])
        if not slots[index] and no_node_of(group[0]):
            reason = f"member {group[0].name} can run on no node: {no_node_of(group[0])}"
        elif not slots[index]:
            if held:  # what the planner sees: free minus held, node by node
                most = self._most_beside(index, held)
            else:
                most = {resource: index.most(resource) for resource in index.usage}
            reason = too_big_text(group[0].name, index.usage, len(index.nodes), most, "free")
        elif held:
            reason = slots_text(len(group), group[0].name, index.usage, len(index.nodes), slots[index], (), "")
        else:
            limit = self._limiting(shapes[index], index.nodes, slots[index])
            reason = slots_text(len(group), group[0].name, index.usage, len(index.nodes), slots[index], (), limit)
        placed = sum(min(slots[i], len(g)) for i, g in demand.items())
        if len(demand) == 1:  # one class: first-fit places exactly that many
            return PlanResult(None, placed, f"{reason}; the largest placement found holds {placed} of {total} members")
        return PlanResult(None, 0, f"{reason}; at most {placed} of {total} members have room now")

    def _most_beside(self, index: RoomIndex, held: Mapping[str, Resources]) -> dict[str, Decimal]:
        """The most of each resource free beside the room held, on any one of the index's nodes: a walk over them,
        kept while the state and the room held on them stay the same (every gang of that shape asks in a pass)."""
        on = tuple(sorted((node, tuple(sorted(room_held.items()))) for node, room_held in held.items()
                          if node in index.nodes))
        key = (index, self.state.version, on)
        found = self._most.get(key)
        if found is None:
            free = self.state.free
            found = {resource: max((free(n).get(resource, _ZERO) - held.get(n, {}).get(resource, _ZERO)
                                    for n in index.nodes), default=_ZERO) for resource in index.usage}
            if len(self._most) > 64:
                self._most.clear()
            self._most[key] = found
        return found

    def _limiting(self, shape: Shape, nodes: frozenset[str], slots: int) -> str:
        """``explain.limiting`` from room indexes of the shape's resources one at a time: an index stops walking
        once it has found room for more than ``slots``, so only the resource that runs out walks every node."""
        for resource, quantity in shape[1]:
            if quantity > 0 and self.rooms.index((shape[0], ((resource, quantity),)), nodes).slots(slots + 1) <= slots:
                return resource
        return ""


def _room(demand: Mapping[RoomIndex, list[Member]], names: Sequence[str]) -> bool:
    """The nodes have room for every member of ``demand``, each room index's members counted alone (an upper bound:
    ``RoomIndex.slots`` over these nodes)."""
    for index, group in demand.items():
        count, slots = len(group), 0
        for name in names:
            slots += min(index.room_of(name), count)
            if slots >= count:
                break
        else:
            return False
    return True


def _expected_name(gang: Gang, index: int) -> str:
    return f"{gang.expected[index].role} (expected #{index + 1})"


def _apart_port(gang: Gang, name: str, with_term: bool) -> HostPort:
    return gang_member_port(gang.key[0], gang.key[1], None if with_term else name)

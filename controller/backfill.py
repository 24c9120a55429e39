"""Starvation and backfill: a gang that has waited past the starvation threshold gets a shadow plan over capacity
that will free up, and lower-ranked work may only use what such plans leave.

A shadow plan places the starving gang on room that is there once running workloads finish (bound or only released),
less what is promised already: room held for gangs, higher-ranked shadow plans, and backfill into their slack. Work
released onto a node a shadow plan claims is written into the backfill ledger and keeps counting against that
plan's slack while it is charged to the node; a restart forgets the ledger, and such work then counts as work that
will finish (the shadow plan stays feasible, backfill waits).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from controller.bookkeeping import HeldRoom
from controller.capacity import add, subtract
from controller.members import GangKey, PodView
from controller.planner import check_placement, plan
from controller.problem import Member, NodeFree
from controller.state import ClusterState
from controller.topology import Request, Roles, plan_request
from gang.resources import Resources


class Backfill:
    """Shadow plans of starving gangs and the backfill ledger, kept across passes.

    A pass's ``claims`` (per node: what the shadow plans decided so far in the pass claim there) start empty and
    grow as starving gangs are looked at in rank order.
    """

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._shadows: dict[GangKey, dict[str, str]] = {}
        self._ledger: dict[str, dict[str, Resources]] = {}  # per node, per pod uid: backfill into a shadow's slack

    def shadow(self, key: GangKey, members: Sequence[Member], claims: dict[str, Resources],
               held: HeldRoom, request: Request = (), roles: Roles | None = None) -> dict[str, str]:
        """The starving gang's shadow plan (its previous one while that still holds), added to ``claims``; empty
        when no plan exists over capacity that will free up. With a topology ``request`` it honours it as a plan now
        would (``plan_request``; ``roles``: the members' roles and child Jobs)."""
        names = sorted(set().union(*{m.nodes for m in members}))
        future = self._future(names, claims, held)
        nodes = [NodeFree(n, future[n], self.state.permanent_ports(n)) for n in names if n in future]
        previous = self._shadows.get(key)
        if previous and set(previous) == {m.name for m in members} and not check_placement(members, nodes, previous):
            placement = previous
        elif request:
            within = plan_request(members, nodes, self.state.labeller, request, roles or {})
            placement = (plan(members, nodes) if within.fallback else within.result).placement or {}
        else:
            placement = plan(members, nodes).placement or {}
        if placement:
            self._shadows[key] = placement
            by_name = {m.name: m for m in members}
            for name, node in placement.items():
                claims[node] = add(claims.get(node, {}), by_name[name].requests)
        return placement

    def limits(self, key: GangKey, held: HeldRoom, claims: Mapping[str, Resources]) -> dict[str, Resources]:
        """What a lower-ranked gang may use on nodes where a starving gang's shadow plan holds room."""
        return self._future(list(claims), claims, {k: v for k, v in held.items() if k != key})

    def count(self, pod: PodView, node: str, claims: Mapping[str, Resources]) -> None:
        """A lower-ranked pod released onto a node a shadow plan claims takes from that plan's slack."""
        if node in claims:
            self._ledger.setdefault(node, {})[pod.uid] = pod.usage

    def keep_charged(self) -> None:
        """Backfill counts while it is charged to its node (reserved or bound): forget the rest."""
        charged = self.state.charged_node
        self._ledger = {node: kept for node, pods in self._ledger.items()
                        if (kept := {uid: u for uid, u in pods.items() if charged(uid) == node})}

    def end_pass(self, waiting: Iterable[GangKey]) -> None:
        """Shadow plans of gangs no longer waiting end; without any, there is no slack to backfill into."""
        still = set(waiting)
        for key in [k for k in self._shadows if k not in still]:
            del self._shadows[key]
        if not self._shadows:
            self._ledger.clear()

    def forget(self, key: GangKey) -> None:
        """The gang was evicted: its shadow plan ends."""
        self._shadows.pop(key, None)

    def _future(self, names: Sequence[str], claims: Mapping[str, Resources], held: HeldRoom) -> dict[str, Resources]:
        """Capacity that will be there once running workloads finish (bound or only released), minus what
        is promised already: room held for gangs, higher-ranked shadow plans, backfill into their slack."""
        future = {}
        for name in names:
            node = self.state.nodes.get(name)
            if node is None:
                continue
            room = subtract(node.allocatable, self.state.permanent(name))
            for usage in self._ledger.get(name, {}).values():
                room = subtract(room, usage)
            for per_node in held.values():
                if name in per_node:
                    room = subtract(room, per_node[name])
            future[name] = subtract(room, claims.get(name, {}))
        return future

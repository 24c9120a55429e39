"""Static feasibility for the engine, cached on the state's ``shape_version``: which nodes pass every filter for
members of one placement key, and which gangs could never fit even on an otherwise empty cluster.

The filters (``controller/predicates.py``) are evaluated once per node kind (``NodeView.kind``: everything they read
but the node's name and hostname label), node by node only for pods whose selector or affinity names nodes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from controller.capacity import PODS, subtract
from controller.explain import no_node_text
from controller.members import GangKey, NodeView, PodView
from controller.planner import never_fits
from controller.predicates import HostPort, PodInfo, feasible
from controller.problem import Member, NodeFree, no_node_of
from controller.state import ClusterState
from controller.topology import Request, Roles, never_fits_request

# A gang's shape as never-fits sees it: the node shapes' version, per member shape how many members, and its
# topology request with how many members of each role and child Job.
GangShape = tuple[int, frozenset[tuple[tuple[frozenset[str], tuple[tuple[str, Decimal], ...], frozenset[HostPort]],
                                       int]], Request, frozenset[tuple[tuple[str, str], int]]]
_NEVER_LIMIT = 10_000  # cached never-fits answers, then start over
_ALLOCATABLE_SETS = 16  # node lists kept for never-fits proofs, then start over


class Feasibility:
    """Feasible node sets per placement key, and never-fits proofs per gang shape."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._nodes: dict[str, frozenset[str]] = {}
        self._no_node: dict[str, str] = {}  # per placement key whose members pass no node: what every node fails
        self._version = -1
        self._kinds: dict[str, list[NodeView]] = {}  # nodes by kind, as of _version
        self._never: dict[tuple[GangKey, GangShape], str | None] = {}
        self._fits_somewhere: set[GangShape] = set()  # gang shapes proven able to fit on an otherwise empty cluster
        self._allocatables: dict[frozenset[frozenset[str]], list[NodeFree]] = {}  # see ``_allocatable``
        self._allocatable_version = (-1, -1)

    def nodes(self, key: str, spec: Mapping[str, Any], usage: Mapping[str, Decimal]) -> frozenset[str]:
        """The nodes that pass every filter for members of this placement key; evaluated once per node kind (nodes
        that differ only in name), node by node only when the pod names nodes."""
        if self._version != self.state.shape_version:
            self._refresh()
        nodes = self._nodes.get(key)
        if nodes is None:
            pod = PodInfo.of(spec, {r: v for r, v in usage.items() if r != PODS})
            views = self._views(pod)
            names = feasible(pod, [view.info for view in views])
            if len(views) < len(self.state.nodes):
                passed = set(names)
                names = [view.name for same in self._kinds.values() if same[0].name in passed for view in same]
            found = frozenset(names)
            # One object per distinct set: sets of frozensets then compare by identity, not element by element.
            nodes = self._nodes[key] = next((s for s in self._nodes.values() if s == found), found)
        return nodes

    def _refresh(self) -> None:
        self._nodes.clear()
        self._no_node.clear()
        self._kinds.clear()
        self._version = self.state.shape_version

    def _views(self, pod: PodInfo) -> list[NodeView]:
        """The nodes to evaluate the filters on for ``pod``: one per node kind, unless it names nodes."""
        if pod.names_nodes:
            return list(self.state.nodes.values())
        if not self._kinds:
            for view in self.state.nodes.values():
                self._kinds.setdefault(view.kind, []).append(view)
        return [same[0] for same in self._kinds.values()]

    def no_node(self, key: str, spec: Mapping[str, Any], usage: Mapping[str, Decimal]) -> str:
        """What rules out every node for members of this placement key (``explain.no_node_text``), "" when some node
        passes; cached like ``nodes``."""
        if self.nodes(key, spec, usage):
            return ""
        found = self._no_node.get(key)
        if found is None:
            pod = PodInfo.of(spec, {r: v for r, v in usage.items() if r != PODS})
            looks = [(view.info, 1 if pod.names_nodes else len(self._kinds[view.kind])) for view in self._views(pod)]
            found = self._no_node[key] = no_node_text(pod, looks)
        return found

    def admits(self, pod: PodView, node: str) -> bool:
        """The node passes the pod's filters (taints, selector, affinity, resource kinds)."""
        spec = pod.spec or {}
        info = PodInfo.of(spec, {r: v for r, v in pod.usage.items() if r != PODS})
        if not info.names_nodes:
            return node in self.nodes(pod.key, spec, pod.usage)
        view = self.state.nodes.get(node)
        return view is not None and bool(feasible(info, [view.info]))

    def never_fits(self, key: GangKey, members: Sequence[Member], request: Request = (),
                   roles: Roles | None = None) -> str | None:
        """Cached per gang shape and node shape: a proof that it cannot fit even on an otherwise empty cluster (with a
        topology ``request``: as it asks; ``roles``: the members' roles and child Jobs)."""
        homeless = next((m for m in members if not m.nodes), None)
        if homeless is not None:
            return f"member {homeless.name} can run on no node: {no_node_of(homeless) or 'no node passes its filters'}"
        shape = self._shape(members, request, roles)
        if shape in self._fits_somewhere:  # another gang of this shape was proven able to fit: so is this one
            return None
        signature = (key, shape)
        if signature not in self._never:
            if len(self._never) > _NEVER_LIMIT:
                self._never.clear()
                self._fits_somewhere.clear()
            nodes = self._allocatable(members)
            plain = self._shape(members) if request else shape  # a topology only narrows where the gang may go
            reason = None if plain in self._fits_somewhere else never_fits(members, nodes)
            if reason is None:
                self._fits_somewhere.add(plain)
                if request:
                    reason = never_fits_request(members, nodes, self.state.labeller, request, roles or {})
            self._never[signature] = reason
            if reason is None:
                self._fits_somewhere.add(shape)
        return self._never[signature]

    def _shape(self, members: Sequence[Member], request: Request = (), roles: Roles | None = None) -> GangShape:
        return (self.state.shape_version, frozenset(Counter(
            (m.nodes, tuple(sorted(m.requests.items())), m.host_ports) for m in members).items()),
            request, frozenset(Counter((roles or {}).values()).items()))

    def _allocatable(self, members: Sequence[Member]) -> list[NodeFree]:
        """The members' nodes with only what never leaves subtracted (DaemonSet and static pods and their ports),
        in name order; kept per set of node sets while no node's allocatable or permanent usage changes (gangs of
        many shapes share their nodes)."""
        sets = frozenset({m.nodes for m in members})
        version = (self.state.shape_version, self.state.static_version)
        if self._allocatable_version != version or len(self._allocatables) > _ALLOCATABLE_SETS:
            self._allocatable_version = version
            self._allocatables.clear()
        found = self._allocatables.get(sets)
        if found is None:
            state = self.state
            found = self._allocatables[sets] = [
                NodeFree(n, subtract(state.nodes[n].allocatable, state.permanent(n)), state.permanent_ports(n))
                for n in sorted(set().union(*sets)) if n in state.nodes]
        return found

"""Keeping released gangs whole: members that will not bind where they were planned, and pods that escaped.

A release is a promise the controller cannot enforce: schedulers and kubelets it does not control,
other schedulers' pods, admins and a fail-open webhook all act between the release and the bind.
This module recognises what went wrong, from the state alone (pure, no API calls); the engine
decides what to do about it (``controller/engine.py``: evict a gang that never ran whole, follow
the replacement path for one that did) and the controller carries it out (``controller/evict.py``).

- **Unplaceable**: a member released onto a node that can no longer take it — the node is gone,
  the pods bound there since leave too little room, or it no longer admits the member (cordoned,
  tainted, relabelled). A node that is merely NotReady may come back: the bind timeout covers it.
- **Bind timeout**: a released member still unbound ``controller.bindTimeoutSeconds`` after its release (unless no
  scheduler serves its schedulerName at all: ``controller/schedulers.py``).
- **Rejected**: the kubelet refused to run a bound member (OutOfcpu and the like).
- **Loose**: a gang member whose gate someone else removed and that is not bound: it would start
  without its gang. It is deleted so its operator recreates it through admission, gated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum

from controller.capacity import PODS, fits, shortfall
from controller.explain import needs_text
from controller.members import PodView
from controller.predicates import NodeInfo, NodeReadiness, PodInfo, Unfit, unfit
from controller.state import ClusterState

_ZERO = Decimal(0)


class StuckReason(StrEnum):
    """Why a member is stuck (a small fixed set: the values are metric label values)."""

    UNPLACEABLE = "unplaceable"
    BIND_TIMEOUT = "bind-timeout"
    REJECTED = "rejected"
    INCOMPLETE = "incomplete"  # members still gated after the gang started, and no room for them
    ESCAPED = "escaped"  # a member let through by someone else than the gate controller


@dataclass(frozen=True)
class Stuck:
    pod: PodView
    reason: StuckReason
    message: str  # for users, with the numbers


class Integrity:
    """The checks, with a per-pod cache of the static check at the planned node (it only changes with the node)."""

    def __init__(self, state: ClusterState, bind_timeout: float) -> None:
        self.state = state
        self.bind_timeout = bind_timeout
        self._admits: dict[str, tuple[str, Unfit | None]] = {}  # uid -> (node shape, why the node refuses it)

    def stuck(self, pod: PodView, now: float) -> Stuck | None:
        """Why a member the controller released will not bind where it was planned, else None."""
        if pod.node or not pod.live or (pod.gated and pod.uid not in self.state.pending):
            return None
        node = pod.planned_node or self.state.pending.get(pod.uid, "")
        if pod.pinned:
            view = self.state.nodes.get(node)
            if view is None:
                return Stuck(pod, StuckReason.UNPLACEABLE, f"{pod.name} was released onto node {node}, which is gone")
            refused = self._refuses(pod, view.shape, view.info)
            if refused is not None and not isinstance(refused.filter, NodeReadiness):
                return Stuck(pod, StuckReason.UNPLACEABLE, f"{pod.name} was released onto node {node}, which no "
                                                           f"longer admits it: {refused.reason}")
            room = self.state.bound_free(node)
            if not fits(pod.usage, room):
                short = shortfall(pod.usage, room)
                left = {r: max(room.get(r, _ZERO), _ZERO) for r in short}
                return Stuck(pod, StuckReason.UNPLACEABLE, f"{pod.name} was released onto node {node} and needs "
                                                           f"{needs_text(pod.usage)}; the pods bound there since "
                                                           f"leave only {needs_text(left, set(short))}")
        since = self.state.released_at.get(pod.uid)
        # no scheduler serves its name (controller/schedulers.py): deleting it would bring it back to the same nobody
        if since is not None and now - since > self.bind_timeout and not self.state.stranded(pod):
            return Stuck(pod, StuckReason.BIND_TIMEOUT, f"{pod.name} was released {now - since:.0f}s ago onto node "
                                                        f"{node} and is still not bound (bind timeout "
                                                        f"{self.bind_timeout:g}s)")
        return None

    @staticmethod
    def rejected(pod: PodView) -> Stuck | None:
        if not pod.rejected:
            return None
        return Stuck(pod, StuckReason.REJECTED, f"the kubelet of node {pod.node} rejected {pod.name}: {pod.rejected}")

    def loose(self, pod: PodView) -> Stuck | None:
        """A live member ungated by someone else than the controller and not bound: it would start alone."""
        if pod.gated or pod.node or not pod.live or pod.released or pod.uid in self.state.pending:
            return None
        return Stuck(pod, StuckReason.ESCAPED, f"{pod.name} was released by someone else than the gate controller "
                                               "and is not bound; it is recreated through admission so that it starts "
                                               "with its gang")

    def _refuses(self, pod: PodView, shape: str, node: NodeInfo) -> Unfit | None:
        """The first filter the planned node fails for the pod, cached until the node's shape changes."""
        cached = self._admits.get(pod.uid)
        if cached is None or cached[0] != shape:
            requests = {r: v for r, v in pod.usage.items() if r != PODS}
            cached = self._admits[pod.uid] = (shape, unfit(PodInfo.of(pod.spec or {}, requests), node))
        return cached[1]

    def prune(self, alive: Callable[[str], bool]) -> None:
        for uid in [u for u in self._admits if not alive(u)]:
            del self._admits[uid]

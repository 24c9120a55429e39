"""The controller's picture of the cluster, updated one watch event at a time.

Every pod is charged to at most one node, exactly once: a bound pod that is not terminal is
*used* on its node (terminating pods too, until they are gone); a gang member released by this
controller and not bound yet is *reserved* on its planned node (from the planned-node
annotation, or from memory between the decision and the watch event that confirms the PATCH);
everything else is charged nowhere: a pod that is not a gang member never holds room by its
annotations, and an unbound pod being deleted will never bind. Free capacity per node is kept
up to date incrementally so that a decision never has to walk all pods. Vacancies remember where
a failed or deleted member of a running gang was, so that its replacement gets its room back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from controller.capacity import add, subtract
from controller.members import GangKey, NodeView, PodView, node_view, pod_view
from controller.predicates import HostPort
from controller.queues import QueueInputs
from controller.roots import Roots
from gang.resources import Resources
from gang.selectors import selector_matches

_ZERO = Decimal(0)
_LABEL_KEYS = 64  # topology label keys whose domains are kept, then start over
_REACHES = 16  # per label key, the node sets whose domain sums are kept current, then start over
# What a pod takes from others: its charge (node, bound or not, usage, ports) and its nomination (node, priority,
# usage); a change in either may free room.
_Footprint = tuple[tuple[str, bool, Resources, frozenset[HostPort]] | None, tuple[str, int, Resources] | None]


@dataclass(frozen=True)
class DomainSums:
    """The domains of one label key as the nodes of one reach (the nodes some gang's members may use) cut them:
    each domain's nodes in reach, by name, and the sum of their free capacity per resource."""

    reach: frozenset[str]
    nodes: dict[str, list[str]]  # domain -> its nodes in reach, by name
    totals: dict[str, dict[str, Decimal]]  # domain -> resource -> free on those nodes, summed
    total: dict[str, Decimal]  # resource -> free on every domain's nodes in reach, summed


class Domains:
    """The domains of one node label key: each labelled node's value (its domain), each domain's nodes by name,
    and their free totals per reach asked for (``sums``). Built once per node-shape version; the sums are kept
    current with every charge (``ClusterState``), so a topology's plan never walks every node to add them up."""

    def __init__(self, key: str, nodes: Mapping[str, NodeView]) -> None:
        self.label = {name: value for name, view in nodes.items() if (value := view.info.labels.get(key)) is not None}
        self.nodes: dict[str, list[str]] = {}  # domain -> its nodes, by name
        for name in sorted(self.label):
            self.nodes.setdefault(self.label[name], []).append(name)
        self._sums: dict[frozenset[str], DomainSums] = {}

    def sums(self, reach: frozenset[str], free: Mapping[str, Resources]) -> DomainSums:
        """The domains cut to ``reach``, with their totals (summed once, then kept current by ``shift``)."""
        found = self._sums.get(reach)
        if found is not None and found.reach is not reach:
            # An equal set made by a later engine: keep it under the caller's object, or every later lookup would
            # compare thousands of node names instead of identities.
            del self._sums[reach]
            found = self._sums[reach] = replace(found, reach=reach)
        if found is None:
            if len(self._sums) >= _REACHES:
                self._sums.clear()
            cut: dict[str, list[str]] = {}
            totals: dict[str, dict[str, Decimal]] = {}
            for domain, names in self.nodes.items():
                inside = names if reach.issuperset(names) else [name for name in names if name in reach]
                if inside:
                    cut[domain] = inside
                    sums: dict[str, Decimal] = {}
                    for name in inside:
                        for resource, amount in free.get(name, {}).items():
                            sums[resource] = sums.get(resource, _ZERO) + amount
                    totals[domain] = sums
            everything: dict[str, Decimal] = {}
            for sums in totals.values():
                _add(everything, sums, 1)
            found = self._sums[reach] = DomainSums(reach, cut, totals, everything)
        return found

    def shift(self, node: str, usage: Resources, sign: int) -> None:
        """The node's free capacity grew (sign 1) or shrank (sign -1) by ``usage``."""
        domain = self.label.get(node)
        if domain is not None:
            for sums in self._sums.values():
                if node in sums.reach:
                    _add(sums.totals[domain], usage, sign)
                    _add(sums.total, usage, sign)


@dataclass(frozen=True)
class Budget:
    """A PodDisruptionBudget as preemption weighs it: the pods it covers, and how many may go now."""

    selector: Any
    allowed: int


@dataclass(frozen=True)
class Vacancy:
    """Room a failed or deleted member of a running gang left on ``node``, held for its replacement."""

    node: str
    usage: Resources
    until: float


def _charge_node(pod: PodView, pending: Mapping[str, str], stranded: bool) -> str:
    if pod.terminal:
        return ""
    if pod.node:
        return pod.node
    if pod.deleting:
        return ""
    if pod.released:  # a released pod no scheduler picks up holds nothing (controller/schedulers.py)
        return "" if stranded else pod.planned_node
    return pending.get(pod.uid, "")


def _in_flight(pod: PodView, pending: Mapping[str, str]) -> bool:
    """Queued for a scheduler and not ours: ungated, unbound, not released by us, not (yet) found unschedulable."""
    return not (pod.node or pod.gates or pod.terminal or pod.deleting or pod.released or pod.unschedulable
                or pod.uid in pending)


class ClusterState:
    """Nodes, pods, gangs and per-node free capacity; not thread-safe (one decision loop owns it)."""

    def __init__(self, replacement_grace: float = 120.0) -> None:
        self.nodes: dict[str, NodeView] = {}
        self.pods: dict[str, PodView] = {}
        self.gangs: dict[GangKey, set[str]] = {}
        self.unresolved: set[str] = set()
        self.pending: dict[str, str] = {}  # uid -> node ("" when released without a pin), not yet confirmed
        self.vacancies: dict[GangKey, list[Vacancy]] = {}
        self.replacement_grace = replacement_grace
        self.released_at: dict[str, float] = {}  # uid -> when released (or first seen released), until bound
        self.whole: set[GangKey] = set()  # gangs that had min-available members running at once
        self.in_flight: dict[str, PodView] = {}  # pods queued for some scheduler that we did not release
        self.escapable: set[str] = set()  # pods with an owner toward a supported root but no gang labels
        self.evicted: set[str] = set()  # pods the controller is deleting: they leave no vacancy
        self._bound_live: Counter[GangKey] = Counter()
        self._running_live: Counter[GangKey] = Counter()
        self._charged: dict[str, Resources] = {}
        self._unbound: dict[str, Resources] = {}  # the reserved part of _charged
        self._free: dict[str, Resources] = {}
        self._ports: dict[str, Counter[HostPort]] = {}
        self._port_sets: dict[str, frozenset[HostPort]] = {}  # used_ports per node, until its ports change
        self._permanent: dict[str, Resources] = {}
        self._permanent_ports: dict[str, Counter[HostPort]] = {}
        self._permanent_port_sets: dict[str, frozenset[HostPort]] = {}  # permanent_ports per node, likewise
        self._nominated: dict[str, dict[str, tuple[int, Resources]]] = {}
        self._charged_at: dict[str, str] = {}  # uid -> node it is charged to
        self._on_node: dict[str, set[str]] = {}  # node -> the uids charged to it
        self._priorities: Counter[int] = Counter()  # the priorities of the charged pods that may leave their node
        # node -> priority -> what the charged pods of that priority hold there, but those that never leave their node
        # (DaemonSet, static) or are leaving already (terminating): the room preemption could make
        self._below: dict[str, dict[int, Resources]] = {}
        self.shape_version = 0  # bumps when static feasibility of any node may have changed
        self.static_version = 0  # bumps when a node's allocatable or what never leaves it (permanent pods) changes
        self._domains: dict[str, Domains] = {}  # per topology label key, under the current shape_version
        self.version = 0  # bumps on every change
        self.freed = 0  # bumps when room may have grown anywhere: a decision "not yet" may have changed
        self.gang_versions: dict[GangKey, int] = {}  # the version at which a member of the gang last changed
        self.dirty: set[str] = set()  # nodes whose free capacity or ports changed; the engine takes them
        self.roots = Roots()  # the gangs' root objects: their constraints
        # PodDisruptionBudgets by namespace and name: which victims preemption prefers. By namespace, since a budget
        # covers pods of its own namespace only, and a preemption weighs thousands of pods against thousands of them.
        self.budgets: dict[str, dict[str, Budget]] = {}
        # gangs preempted (controller/preemption.py): by whom, and when; told in their PodGroup until they run again
        self.preempted: dict[GangKey, tuple[str, float]] = {}
        self.scheduler_seen: dict[str, float] = {}  # schedulerName -> when a scheduler last acted on one of its pods
        self.absent: dict[str, float] = {}  # schedulerName -> since when none serves it (controller/schedulers.py)
        self._owned: dict[str, set[GangKey]] = {}  # root uid -> its gangs (a root's change concerns them)
        self.queues = QueueInputs()  # Queues and the namespaces they select (controller/queues.py)

    # --- PodDisruptionBudgets ------------------------------------------------------------------------

    def upsert_budget(self, obj: Mapping[str, Any]) -> None:
        meta, status = obj.get("metadata") or {}, obj.get("status") or {}
        allowed = status.get("disruptionsAllowed")
        self.budgets.setdefault(str(meta.get("namespace") or ""), {})[str(meta.get("name") or "")] = Budget(
            (obj.get("spec") or {}).get("selector"), allowed if isinstance(allowed, int) else 0)

    def delete_budget(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        budgets = self.budgets.get(namespace)
        if budgets is not None:
            budgets.pop(str(meta.get("name") or ""), None)
            if not budgets:
                del self.budgets[namespace]

    def covered(self, allowed: int, below: int) -> list[PodView]:
        """The pods of lower priority than ``below`` covered by a PodDisruptionBudget that allows at most ``allowed``
        disruptions now (a walk over every pod: the priority, the cheaper test, first)."""
        tight = {namespace: found for namespace, budgets in self.budgets.items()
                 if (found := [budget for budget in budgets.values() if budget.allowed <= allowed])}
        if not tight:
            return []
        return [pod for pod in self.pods.values() if pod.priority < below and pod.namespace in tight and pod.labels
                and any(selector_matches(budget.selector, pod.labels) for budget in tight[pod.namespace])]

    def priorities(self) -> Iterable[int]:
        """The priorities of the charged pods that may leave their node."""
        return self._priorities.keys()

    def violations(self, pods: Iterable[PodView]) -> int:
        """How many of ``pods`` a PodDisruptionBudget forbids evicting together now (its ``disruptionsAllowed``)."""
        if not self.budgets:
            return 0
        total = 0
        by_namespace: dict[str, list[PodView]] = {}
        for pod in pods:
            by_namespace.setdefault(pod.namespace, []).append(pod)
        for namespace, members in by_namespace.items():  # a budget elsewhere covers none of them
            for budget in self.budgets.get(namespace, {}).values():
                if budget.allowed < len(members):  # else it allows them all, whichever it covers
                    covered = sum(1 for pod in members if selector_matches(budget.selector, pod.labels))
                    total += max(covered - budget.allowed, 0)
        return total

    # --- roots -------------------------------------------------------------------------------------

    def upsert_root(self, group: str, kind: str, obj: Mapping[str, Any]) -> None:
        self._root_changed(self.roots.upsert(group, kind, obj))

    def delete_root(self, group: str, kind: str, obj: Mapping[str, Any]) -> None:
        self._root_changed(self.roots.delete(group, kind, obj))

    def _root_changed(self, uid: str | None) -> None:
        """What a root asks of its gangs changed: they are decided again (their cached "not yet" is stale)."""
        self.version += 1
        for key in self._owned.get(uid or "", ()):
            self.gang_versions[key] = self.version

    # --- nodes -----------------------------------------------------------------------------------

    def upsert_node(self, obj: Mapping[str, Any]) -> None:
        view = node_view(obj)
        old = self.nodes.get(view.name)
        self.nodes[view.name] = view
        if old is None or old.shape != view.shape:
            self._reshaped()
            self.freed += 1
        if old is None or old.allocatable != view.allocatable:
            self.static_version += 1
            before = self._free.get(view.name, {})
            free = self._free[view.name] = subtract(view.allocatable, self._charged.get(view.name, {}))
            for domains in self._domains.values():
                domains.shift(view.name, before, -1)
                domains.shift(view.name, free, 1)
            self.dirty.add(view.name)
            self.freed += 1
        self.version += 1

    def delete_node(self, name: str) -> None:
        if self.nodes.pop(name, None) is not None:
            self._free.pop(name, None)
            self.dirty.add(name)
            self._reshaped()
            self.version += 1

    def _reshaped(self) -> None:
        """Static feasibility of some node may have changed: node shapes, labels, the set of nodes."""
        self.shape_version += 1
        self._domains.clear()

    # --- pods ------------------------------------------------------------------------------------

    def upsert_pod(self, obj: Mapping[str, Any], now: float = 0.0) -> PodView:
        pod = pod_view(obj)
        old = self.pods.get(pod.uid)
        if old is not None and pod.touched and not old.touched:  # a scheduler acted on it: bound, nominated, tried
            self.scheduler_seen[pod.scheduler] = now
        before = self._footprint(old)
        if old is not None:
            self._forget(old)
        was_charged = self._charged_at.get(pod.uid, "")
        self._uncharge(pod.uid, old)
        if not pod.gated:
            self.pending.pop(pod.uid, None)
        self.pods[pod.uid] = pod
        self._remember(pod)
        self._charge(pod)
        if pod.node or pod.terminal or pod.deleting or not (pod.released or pod.uid in self.pending):
            self.released_at.pop(pod.uid, None)
        else:
            self.released_at.setdefault(pod.uid, now)
        if old is not None and was_charged and pod.failed and not old.failed:
            self._vacate(old, was_charged, now)
        self._changed(before, self._footprint(pod) if before is not None else None, old, pod)
        return pod

    def delete_pod(self, uid: str, now: float = 0.0) -> None:
        old = self.pods.get(uid)
        before = self._footprint(old)
        self.pods.pop(uid, None)
        self.pending.pop(uid, None)
        self.released_at.pop(uid, None)
        if old is None:
            return
        was_charged = self._charged_at.get(uid, "")
        self._forget(old)
        self._uncharge(uid, old)
        if was_charged and not old.terminal:
            self._vacate(old, was_charged, now)
        self.evicted.discard(uid)
        self._changed(before, None, old, None)

    def stranded(self, pod: PodView) -> bool:
        """Released (or being), untouched by any scheduler, no scheduler serves its name (controller/schedulers.py),
        and none of its gang is bound (a scheduler that bound some of them is there: that is a bind timeout)."""
        return (pod.scheduler in self.absent and not pod.touched and pod.live
                and not (pod.gang is not None and self._bound_live.get(pod.gang)))

    def set_absent(self, scheduler: str, since: float | None) -> None:
        """No scheduler serves ``scheduler`` since ``since`` (None: one does again): the released pods of it that no
        scheduler has touched hold nothing meanwhile (charged again once it is back)."""
        if since is None:
            self.absent.pop(scheduler, None)
        else:
            self.absent[scheduler] = since
        for uid in list(self.released_at):
            pod = self.pods.get(uid)
            if pod is not None and pod.scheduler == scheduler and not pod.touched and not pod.node:
                before = self._footprint(pod)
                self._uncharge(uid, pod)
                self._charge(pod)
                self._changed(before, self._footprint(pod), pod, pod)
        self.freed += 1

    def reserve(self, pod: PodView, node: str, now: float = 0.0) -> None:
        """Charge a pod this loop is releasing to ``node`` now, before any API write."""
        before = self._footprint(pod)
        self._uncharge(pod.uid, pod)
        self.in_flight.pop(pod.uid, None)
        self.pending[pod.uid] = node
        self.released_at[pod.uid] = now
        self._charge(pod)
        self._changed(before, self._footprint(pod), pod, pod)

    def mark_evicted(self, pods: Iterable[PodView], evicted: bool = True) -> None:
        """Pods the controller is deleting (``evicted``), or no longer (the DELETE failed): out of their gang's view
        until the watch says they are gone, and they leave no vacancy behind."""
        self.version += 1
        for pod in pods:
            if (pod.uid in self.evicted) != evicted:  # its room is no other preemption's to take: held for its own
                stored, node = self.pods.get(pod.uid), self._charged_at.get(pod.uid, "")
                if stored is not None and node and not stored.permanent and not stored.deleting:
                    _add(self._below[node][stored.priority], stored.usage, -1 if evicted else 1)
            if evicted:
                self.evicted.add(pod.uid)
            else:
                self.evicted.discard(pod.uid)
            if pod.gang is not None and pod.gang in self.gangs:
                self.gang_versions[pod.gang] = self.version

    def _footprint(self, pod: PodView | None) -> _Footprint | None:
        """What a pod takes from others: its charge (node, bound or not, usage, ports) and its nomination."""
        if pod is None:
            return None
        node = self._charged_at.get(pod.uid, "")
        charge = (node, bool(pod.node), pod.usage, pod.ports) if node else None
        nomination = (pod.nominated, pod.priority, pod.usage) if pod.nominated and not pod.node and not pod.terminal \
            else None
        return charge, nomination

    def _changed(self, before: _Footprint | None, after: _Footprint | None, old: PodView | None,
                 new: PodView | None) -> None:
        """Bump the versions a change concerns: ``freed`` only when a charge or nomination was given up or shrank
        (a released member that binds gives up its reservation: room beyond it may now be planned)."""
        self.version += 1
        for pod in (old, new):
            if pod is not None and pod.gang in self.gangs:
                self.gang_versions[pod.gang] = self.version
        if before is None:
            return
        after = after or (None, None)
        if (before[0] is not None and before[0] != after[0]) or (before[1] is not None and before[1] != after[1]):
            self.freed += 1

    def _remember(self, pod: PodView) -> None:
        if pod.gang is not None:
            if pod.gang not in self.gangs:
                self._owned.setdefault(pod.gang[2], set()).add(pod.gang)
            self.gangs.setdefault(pod.gang, set()).add(pod.uid)
            if pod.node and pod.live:
                self._bound_live[pod.gang] += 1
                if pod.running:  # bound is not enough: a kubelet may still reject it
                    self._running_live[pod.gang] += 1
                    if pod.min_available and self._running_live[pod.gang] >= pod.min_available \
                            and not pod.disrupted and pod.uid not in self.evicted:  # a victim's update: its run ends
                        self.whole.add(pod.gang)
        if _in_flight(pod, self.pending):
            self.in_flight[pod.uid] = pod
        if pod.escapable:
            self.escapable.add(pod.uid)
        if pod.unresolved and pod.gated and pod.gang is None:
            self.unresolved.add(pod.uid)
        if pod.nominated and not pod.node and not pod.terminal:
            self._nominated.setdefault(pod.nominated, {})[pod.uid] = (pod.priority, pod.usage)
        if pod.permanent and pod.node and not pod.terminal:
            self.static_version += 1
            _shift(self._permanent, pod.node, pod.usage, 1)
            self._permanent_ports.setdefault(pod.node, Counter()).update(pod.ports)
            self._permanent_port_sets.pop(pod.node, None)

    def _forget(self, pod: PodView) -> None:
        if pod.gang is not None:
            if pod.node and pod.live:
                for counter in (self._bound_live, self._running_live) if pod.running else (self._bound_live,):
                    counter[pod.gang] -= 1
                    if not counter[pod.gang]:
                        del counter[pod.gang]
            members = self.gangs.get(pod.gang)
            if members is not None:
                members.discard(pod.uid)
                if not members:
                    del self.gangs[pod.gang]
                    owned = self._owned.get(pod.gang[2])
                    if owned is not None:
                        owned.discard(pod.gang)
                        if not owned:
                            del self._owned[pod.gang[2]]
                    self.gang_versions.pop(pod.gang, None)
                    self.whole.discard(pod.gang)
        self.unresolved.discard(pod.uid)
        self.in_flight.pop(pod.uid, None)
        self.escapable.discard(pod.uid)
        if pod.nominated:
            nominated = self._nominated.get(pod.nominated)
            if nominated is not None:
                nominated.pop(pod.uid, None)
                if not nominated:
                    del self._nominated[pod.nominated]
        if pod.permanent and pod.node and not pod.terminal:
            self.static_version += 1
            _shift(self._permanent, pod.node, pod.usage, -1)
            self._permanent_ports[pod.node].subtract(pod.ports)
            self._permanent_port_sets.pop(pod.node, None)

    def _charge(self, pod: PodView) -> None:
        node = _charge_node(pod, self.pending, self.stranded(pod))
        if not node:
            return
        self._charged_at[pod.uid] = node
        self._on_node.setdefault(node, set()).add(pod.uid)
        if not pod.permanent:
            self._priorities[pod.priority] += 1
            if not pod.deleting and pod.uid not in self.evicted:
                _add(self._below.setdefault(node, {}).setdefault(pod.priority, {}), pod.usage, 1)
        self.dirty.add(node)
        _shift(self._charged, node, pod.usage, 1)
        if not pod.node:
            _shift(self._unbound, node, pod.usage, 1)
        if node in self._free:
            _shift(self._free, node, pod.usage, -1)
            for domains in self._domains.values():
                domains.shift(node, pod.usage, -1)
        if pod.ports:
            self._ports.setdefault(node, Counter()).update(pod.ports)
            self._port_sets.pop(node, None)

    def _uncharge(self, uid: str, pod: PodView | None) -> None:
        node = self._charged_at.pop(uid, "")
        if not node or pod is None:
            return
        on_node = self._on_node.get(node)
        if on_node is not None:
            on_node.discard(uid)
        if not pod.permanent:
            self._priorities[pod.priority] -= 1
            if not self._priorities[pod.priority]:
                del self._priorities[pod.priority]
            if not pod.deleting and uid not in self.evicted:
                _add(self._below[node][pod.priority], pod.usage, -1)
        self.dirty.add(node)
        _shift(self._charged, node, pod.usage, -1)
        if not pod.node:
            _shift(self._unbound, node, pod.usage, -1)
        if node in self._free:
            _shift(self._free, node, pod.usage, 1)
            for domains in self._domains.values():
                domains.shift(node, pod.usage, 1)
        if pod.ports:
            self._ports[node].subtract(pod.ports)
            self._port_sets.pop(node, None)

    def _vacate(self, pod: PodView, node: str, now: float) -> None:
        if pod.gang is None or pod.uid in self.evicted:
            return
        vacancy = Vacancy(node, pod.usage, now + self.replacement_grace)
        self.vacancies.setdefault(pod.gang, []).append(vacancy)

    # --- queries ---------------------------------------------------------------------------------

    def members(self, gang: GangKey) -> list[PodView]:
        return [self.pods[uid] for uid in sorted(self.gangs.get(gang, ()), key=lambda u: self.pods[u].name)]

    def free(self, node: str) -> Resources:
        """allocatable − every pod charged to the node (nominations and slots are the caller's).

        The state's own dict, updated in place by later events: read it, never keep or change it."""
        return self._free.get(node, {})

    def unbound(self, node: str) -> Resources:
        """What released members not bound yet hold on the node."""
        return self._unbound.get(node, {})

    def bound_free(self, node: str) -> Resources:
        """allocatable − the pods bound to the node: the room a released member pinned there can still bind into."""
        return add(self._free.get(node, {}), self._unbound.get(node, {}))

    def bound_members(self, gang: GangKey) -> int:
        """Live members of the gang bound to nodes."""
        return self._bound_live.get(gang, 0)

    def used_ports(self, node: str) -> frozenset[HostPort]:
        return _live_ports(self._ports, self._port_sets, node)

    def permanent(self, node: str) -> Resources:
        return self._permanent.get(node, {})

    def permanent_ports(self, node: str) -> frozenset[HostPort]:
        return _live_ports(self._permanent_ports, self._permanent_port_sets, node)

    def nominated(self, node: str) -> Iterable[tuple[str, int, Resources]]:
        for uid, (priority, usage) in (self._nominated.get(node) or {}).items():
            yield uid, priority, usage

    def nominated_nodes(self) -> list[str]:
        return list(self._nominated)

    def live_vacancies(self, gang: GangKey, now: float) -> list[Vacancy]:
        """Unexpired vacancies of a gang; expired ones are dropped."""
        vacancies = [v for v in self.vacancies.get(gang, ()) if v.until > now]
        if vacancies:
            self.vacancies[gang] = vacancies
        else:
            self.vacancies.pop(gang, None)
        return vacancies

    def charged_node(self, uid: str) -> str:
        return self._charged_at.get(uid, "")

    def charged_on(self, node: str) -> Iterable[PodView]:
        """The pods charged to ``node`` (bound there, or released onto it and not bound yet)."""
        return [self.pods[uid] for uid in self._on_node.get(node, ())]

    def room_below(self, node: str, priority: int) -> Resources:
        """What the pods of lower priority than ``priority`` hold on ``node`` (neither DaemonSet or static pods nor
        already terminating): the most room preemption could make there for a gang of that priority."""
        room: dict[str, Decimal] = {}
        for level, usage in (self._below.get(node) or {}).items():
            if level < priority:
                _add(room, usage, 1)
        return room

    def lowest_priority(self) -> int | None:
        """The lowest priority of a charged pod that may leave its node (not a DaemonSet or static pod), if any: a
        gang of at most this priority preempts nothing."""
        return min(self._priorities) if self._priorities else None

    def labeller(self, key: str) -> Mapping[str, str]:
        """Each labelled node's value of label ``key`` (its topology domain), kept until a node's shape changes.
        The state's own dict: read it, never keep or change it."""
        return self.domains(key).label

    def domains(self, key: str) -> Domains:
        """The domains of label ``key``, kept until a node's shape changes; ``Domains.sums(reach, free)`` with the
        state's ``_free`` through ``domain_sums``."""
        found = self._domains.get(key)
        if found is None:
            if len(self._domains) >= _LABEL_KEYS:
                self._domains.clear()
            found = self._domains[key] = Domains(key, self.nodes)
        return found

    def domain_sums(self, key: str, reach: frozenset[str]) -> DomainSums:
        """The domains of label ``key`` cut to the nodes of ``reach``, with their free totals kept current. The
        state's own object, updated in place by later events: read it, never keep or change it."""
        return self.domains(key).sums(reach, self._free)


def _shift(table: dict[str, Resources], node: str, usage: Resources, sign: int) -> None:
    """table[node] += usage (sign 1) or -= usage (sign -1), in place: one pod event must not copy the node's totals."""
    _add(table.setdefault(node, {}), usage, sign)


def _add(totals: dict[str, Decimal], usage: Resources, sign: int) -> None:
    """totals += usage (sign 1) or -= usage (sign -1), in place."""
    for name, value in usage.items():
        totals[name] = totals.get(name, _ZERO) + (value if sign > 0 else -value)


def _live_ports(counts: Mapping[str, Counter[HostPort]], cache: dict[str, frozenset[HostPort]],
                node: str) -> frozenset[HostPort]:
    """The ports with a positive count on ``node``, cached until the caller drops the node's entry."""
    ports = cache.get(node)
    if ports is None:
        ports = cache[node] = frozenset(port for port, count in (counts.get(node) or {}).items() if count > 0)
    return ports

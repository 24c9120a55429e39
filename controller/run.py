"""The gate controller process: watches in, one decision loop, releases out.

Informers deliver pod and node events onto one queue; a single loop thread applies them to
the state and, while this replica leads, runs the engine and hands releases to the patcher.
Only that thread touches the state, so a decision and the reservations it makes are never
interleaved with another. A standby replica keeps its state warm and takes over from the Lease;
after a crash the new leader's first pass sees released-unbound pods at their planned nodes and
half-released gangs, and completes those before anything new is released.

Repairs run beside releases: evictions the engine decides (a gang that cannot start whole) are
DELETEs on a small pool (``controller/evict.py``); pods that may have escaped admission (no gang
labels, an owner toward a supported root) are decided again off the loop with admission's own
code, and joined to their gang when bound, recreated through admission when not.
"""

from __future__ import annotations

import functools
import gc
import json
import logging
import os
import queue
import signal
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from controller import slim
from controller.announce import EVICT, JOIN, PREEMPT, Announcer, Tell
from controller.engine import (
    LOWER_PRIORITY,
    Cause,
    Cycle,
    Engine,
    Eviction,
    GangDecision,
    Preempting,
    Release,
    Verdict,
)
from controller.evict import DONE, GONE, Evictor
from controller.health import HealthServer
from controller.integrity import StuckReason
from controller.members import GangKey, PodView
from controller.metrics import Metrics, new_metrics
from controller.owners import Step, resolve, root_exists, root_reference
from controller.patcher import Patcher
from controller.podgroups import PodGroupWriter
from controller.preemption import named
from controller.queue_status import QueueStatusWriter
from controller.state import ClusterState
from controller.status import Tracker
from gang import queues
from gang.adapters.table import RootResource
from gang.config import Config
from kube.client import api_request
from kube.events import EventRecorder
from kube.informer import Informer
from kube.leader import LeaderElector
from kube.owner_cache import CachedSource
from kube.root_watch import RootWatch, path_of
from kube.source import ApiSource

log = logging.getLogger("kubenexus.controller")
LEASE_NAME = "kubenexus-controller"
RESYNC_SECONDS = 2.0  # a pass at least this often: timeouts, starvation and vacancies depend on time
RESOLVE_RETRY_SECONDS = 10.0
# An unbound pod that may have escaped admission is decided at once and again this often while unbound (it could
# start alone); a bound one only while a gang of its namespace waits for members (it may be one of them), this often.
ESCAPE_RECHECK_SECONDS = (60.0, 5.0)
CHECKS_PER_PASS = 64  # pods decided again per pass, at most: a rebuild does not flood the owner lookups
# While admission is down, a recreated pod escapes again: deleting it over and over would burn its Job's backoffLimit.
# An escaped pod created after the last deletion of its gang's escaped pods is deleted only once ESCAPE_BACKOFF has
# passed since (doubling from 5 s to 5 min); meanwhile it may bind, and is then counted in its gang instead.
ESCAPE_BACKOFF = (5.0, 300.0)
# The gang states of the gangs gauge, per verdict (every other verdict is "waiting").
GANG_STATE = {Verdict.RUNNING: "running", Verdict.RELEASE: "releasing", Verdict.NEVER_FITS: "never_fits",
              Verdict.NOT_CERTIFIABLE: "not_certifiable", Verdict.EVICT: "evicting", Verdict.OPTED_OUT: "opted_out"}
ESCAPE_MEMORY_SECONDS = 600.0
# What the controller watches: (queue tag, collection, decoder keeping only what the state reads).
WATCHED = (("node", "/api/v1/nodes", slim.NODES), ("pod", "/api/v1/pods", slim.PODS))
BUDGETS = "/apis/policy/v1/poddisruptionbudgets"
QUEUES = f"/apis/{queues.GROUP}/{queues.VERSION}/{queues.PLURAL}"
NAMESPACES = "/api/v1/namespaces"
MEMBER_EVENTS = 20  # events about a gang also go to at most this many gated members
PREEMPTION_REASON = "PreemptionByGangAdmission"  # the DisruptionTarget reason of the pods preempted for a gang
STALL_SECONDS = 60.0  # /healthz fails when the loop has not turned for this long


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}"


class Controller:
    """Wires informers, state, engine, patcher, events, metrics and (optionally) leader election."""

    def __init__(self, api_client: Any, config: Config, *, identity: str | None = None, leader_elect: bool = False,
                 port: int | None = None, lease: tuple[float, float, float] = (15.0, 10.0, 2.0),
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        self.metrics: Metrics = new_metrics()
        self.state = ClusterState(config.replacement_grace_seconds)
        self._client = api_client
        self._source = CachedSource(ApiSource(api_client, config.api_timeout_seconds),
                                    config.owner_cache_ttl_seconds, config.owner_cache_max_entries,
                                    config.owner_cache_max_bytes)
        self.engine = Engine(self.state, config)
        self._queue: queue.SimpleQueue[tuple[str, str, dict[str, Any]]] = queue.SimpleQueue()
        self._informers = [Informer(api_client, path, functools.partial(self._enqueue, what), decoder=decoder)
                           for what, path, decoder in WATCHED]
        self._roots = RootWatch(api_client, self._root_informer, self._root_status,
                                timeout=config.api_timeout_seconds * 5)
        # PodDisruptionBudgets: which victims preemption prefers; not waited for (a preference, never a condition)
        self._budgets = Informer(api_client, BUDGETS, functools.partial(self._enqueue, "budget"), backoff_max=30.0)
        # Queues and the namespaces they select (controller/queues.py): until listed, no gang is released (its quota
        # is unknown); a cluster that does not serve Queues (404) has none.
        self.state.queues.listing("not listed yet")
        self.state.queues.listing_namespaces("not listed yet")
        self._watches = [
            Informer(api_client, path, functools.partial(self._enqueue, what), backoff_max=30.0,
                     on_synced=functools.partial(self._enqueue, f"{what}-watch", "", {}),
                     on_error=functools.partial(self._watch_failed, what))
            for what, path in (("queue", QUEUES), ("namespace", NAMESPACES))]
        self.queue_status = QueueStatusWriter(api_client, lambda: self._leading.is_set(), config.api_timeout_seconds,
                                              lambda outcome: self.metrics.queue_status_writes.labels(outcome).inc())
        # Only watch events update the state: they arrive in order, patch responses would race them.
        self.patcher = Patcher(api_client, lambda reason: self.metrics.patch_errors.labels(reason).inc())
        self.evictor = Evictor(api_client, lambda reason: self.metrics.repair_errors.labels(reason).inc())
        self.events = EventRecorder(api_client, instance=identity or default_identity(),
                                    on_dropped=self.metrics.events_dropped.inc)
        # Each gang's PodGroup: the loop hands desired states over (controller/status.py), a writer writes them.
        fresh = ApiSource(api_client, config.api_timeout_seconds)  # whether a root still exists: never a cached answer
        self.podgroups = PodGroupWriter(api_client, leading=lambda: self._leading.is_set(),
                                        root_exists=lambda pod: root_exists(fresh, pod),
                                        on_request=lambda verb, outcome: self.metrics.podgroup_requests.labels(
                                            verb, outcome).inc())
        self._statuses = Tracker()
        self._resolver = ThreadPoolExecutor(max_workers=2, thread_name_prefix="resolve")
        # uid -> when first and last decided again, and whether it was bound then (binding makes it due again)
        self._checked: dict[str, tuple[float, float | None, bool]] = {}
        self._short: set[str] = set()  # namespaces where a gang waits for members, as of the last pass
        self._escapes: dict[tuple[str, str], tuple[float, float]] = {}  # gang -> (last deletion, backoff)
        self._escapes_lock = threading.Lock()
        self._leading = threading.Event()
        self._lost = threading.Event()
        self._stop = threading.Event()
        self._elector = None
        if leader_elect:
            duration, deadline, retry = lease
            self._elector = LeaderElector(api_client, config.namespace, LEASE_NAME, identity or default_identity(),
                                          lease_duration=duration, renew_deadline=deadline, retry_period=retry,
                                          on_started_leading=self._started, on_stopped_leading=self._stopped)
        self._health = HealthServer("0.0.0.0", port, self.metrics.registry, self.ready, self.healthy) \
            if port is not None else None
        self._heartbeat = time.monotonic()
        self._announcer = Announcer()
        self._last = self._announcer.gangs  # what was told per gang (pruned with the gangs)
        self._timed_out: set[GangKey] = set()  # counted in the timeouts metric
        self._gauged: set[str] = set()  # the Queues with gauges
        self._threads: list[threading.Thread] = []
        self.cycles = 0
        self.last_cycle: Cycle | None = None

    # --- lifecycle -------------------------------------------------------------------------------

    def _started(self) -> None:
        log.info("leading: deciding releases")
        self.metrics.is_leader.set(1)
        self._leading.set()

    def _stopped(self) -> None:
        if self._stop.is_set():  # our own stop() hands the Lease back: not a loss
            self._leading.clear()
            return
        log.warning("lost leadership: stopping")
        self.metrics.is_leader.set(0)
        self._leading.clear()
        self._lost.set()
        self._stop.set()

    @property
    def leading(self) -> bool:
        return self._leading.is_set()

    def synced(self) -> bool:
        return all(informer.synced.is_set() for informer in self._informers)

    def ready(self) -> bool:
        return self.synced()

    def healthy(self) -> bool:
        return time.monotonic() - self._heartbeat < STALL_SECONDS

    def start(self) -> Controller:
        if self._health is not None:
            self._health.start()
        for informer in self._informers:
            self._spawn(informer.run, f"informer{informer.path.replace('/', '-')}")
        self._roots.start()
        self._spawn(self._budgets.run, "informer-poddisruptionbudgets")
        for watch in self._watches:
            self._spawn(watch.run, f"informer{watch.path.replace('/', '-')}")
        self.podgroups.start()
        self.queue_status.start()
        if self._elector is not None:
            self._spawn(self._elector.run, "leader-election")
        else:
            self._started()
        self._spawn(self._loop, "decision-loop")
        return self

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def wait(self) -> bool:
        """Block until stopped; True when leadership was lost (the process should exit non-zero)."""
        while not self._stop.wait(1.0):
            pass
        return self._lost.is_set()

    def request_stop(self) -> None:
        """Ask ``wait()`` to return (safe from a signal handler)."""
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        if self._elector is not None:
            self._elector.stop()
        for informer in self._informers:
            informer.stop()
        self._roots.stop()
        self._budgets.stop()
        for watch in self._watches:
            watch.stop()
        self.queue_status.stop()
        self.patcher.stop()
        self.evictor.stop()
        self.podgroups.stop()
        self._resolver.shutdown(wait=False, cancel_futures=True)
        self.events.close(timeout=2.0)
        if self._health is not None:
            self._health.stop()

    @property
    def health_port(self) -> int | None:
        return self._health.port if self._health is not None else None

    # --- the loop ----------------------------------------------------------------------------------

    def _enqueue(self, what: str, kind: str, obj: dict[str, Any]) -> None:
        self._queue.put((what, kind, obj))

    def _root_informer(self, resource: RootResource) -> Informer:
        """The watch of one root resource: its objects' identity and annotations (``controller/roots.py``) go to the
        loop; a failure before it has listed them tells the loop why their gangs cannot be planned yet."""
        identity = {"group": resource.group, "kind": resource.kind}

        def on_error(message: str) -> None:
            if not informer.synced.is_set():  # once listed, what the state holds stays valid while it reconnects
                self._root_status(resource, message)

        informer = Informer(self._client, path_of(resource),
                            lambda event, obj: self._enqueue("root", event, {**identity, "object": obj}),
                            decoder=slim.ROOTS, on_synced=lambda: self._root_status(resource, ""), on_error=on_error,
                            request_timeout=self.config.api_timeout_seconds * 15, backoff_max=30.0)
        return informer

    def _watch_failed(self, what: str, message: str) -> None:
        """A Queue or namespace watch that fails before it has listed: why their gangs wait. A cluster that does not
        serve Queues (the CRD is not installed: 404) has none; the watch keeps trying, for when it is."""
        if what == "queue" and "HTTP 404" in message:
            message = ""
        self._enqueue(f"{what}-watch", message, {})

    def _root_status(self, resource: RootResource, problem: str) -> None:
        self._enqueue("root-watch", problem, {"group": resource.group, "version": resource.version,
                                              "kind": resource.kind})

    def _apply(self, what: str, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        now = self.clock()
        if what == "root":
            if kind == "DELETED":
                self.state.delete_root(obj["group"], obj["kind"], obj["object"])
            else:
                self.state.upsert_root(obj["group"], obj["kind"], obj["object"])
        elif what == "budget":
            if kind == "DELETED":
                self.state.delete_budget(obj)
            else:
                self.state.upsert_budget(obj)
        elif what == "queue":
            if kind == "DELETED":
                self.state.queues.delete(obj)
                self.queue_status.forget(str(meta.get("name")))
            else:
                self.state.queues.upsert(obj)
        elif what == "namespace":
            if kind == "DELETED":
                self.state.queues.delete_namespace(obj)
            else:
                self.state.queues.upsert_namespace(obj)
        elif what == "queue-watch":  # ``kind`` is the problem ("" once listed); once listed it stays valid
            if self.state.queues.problem is not None:
                self.state.queues.listing(kind)
        elif what == "namespace-watch":
            if self.state.queues.namespaces_problem is not None:
                self.state.queues.listing_namespaces(kind)
        elif what == "root-watch":  # ``kind`` is the problem ("" once listed)
            self.state.roots.watching(obj["group"], obj["version"], obj["kind"], kind)
        elif what == "preemption":  # a victim that could not be preempted: no longer waited for
            pod = self.state.pods.get(str(meta.get("uid")))
            if pod is not None:
                self.state.mark_evicted([pod], evicted=False)
            self.engine.preemption.abandon(str(meta.get("uid")))
        elif what == "eviction":  # a DELETE the apiserver refused: the pod is back in its gang's view
            pod = self.state.pods.get(str(meta.get("uid")))
            if pod is not None:
                self.state.mark_evicted([pod], evicted=False)
        elif what == "node":
            if kind == "DELETED":
                self.state.delete_node(str(meta.get("name")))
            else:
                self.state.upsert_node(obj)
        elif kind == "DELETED":
            self.state.delete_pod(str(meta.get("uid")), now)
        else:
            self.state.upsert_pod(obj, now)

    def _drain(self, timeout: float) -> bool:
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return False
        while True:
            self._apply(*item)
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return True

    def _loop(self) -> None:
        dirty, last = True, 0.0
        frozen = False
        while not self._stop.is_set():
            self._heartbeat = time.monotonic()
            try:
                dirty = self._drain(0.05 if dirty else 0.5) or dirty
                if not frozen and self.synced() and self._queue.empty():
                    # The state of the first lists lives as long as the process: keep the cyclic GC's full
                    # collections (~250 ms per 100k pods) from walking it again and again. No collection first:
                    # the lists were delivered with the GC paused and leave no cycles behind.
                    gc.freeze()
                    frozen = True
                if not (self._leading.is_set() and self.synced() and self.state.roots.heard()):
                    continue
                now = self.clock()
                if dirty or now - last >= RESYNC_SECONDS:
                    self.pass_once(now)
                    dirty, last = False, now
            except Exception:  # one bad pass must not end the controller
                log.exception("decision pass failed")
                time.sleep(0.5)

    def pass_once(self, now: float) -> Cycle:
        started = time.perf_counter()
        cycle = self.engine.cycle(now)
        self.metrics.decision_seconds.observe(time.perf_counter() - started)
        self.cycles += 1
        self.last_cycle = cycle
        self._dispatch(cycle, now)
        self._evict(cycle.evictions)
        self._preempt(cycle.preemptions)
        self._report(cycle)
        self._status(cycle, now)
        self._queues()
        self._short = {d.key[0] for d in cycle.gangs if d.cause == Cause.MEMBERS}
        self._check_pods(now)
        return cycle

    # --- releases ----------------------------------------------------------------------------------

    def _dispatch(self, cycle: Cycle, now: float) -> None:
        by_gang: dict[GangKey | None, list[Release]] = {}
        for release in cycle.releases:
            by_gang.setdefault(release.pod.gang, []).append(release)
        decided = time.monotonic()
        for releases in by_gang.values():
            remaining = [len(releases)]
            lock = threading.Lock()

            def done(ok: bool, remaining: list[int] = remaining, lock: threading.Lock = lock) -> None:
                with lock:
                    remaining[0] -= 1
                    last = remaining[0] == 0
                if last:
                    self.metrics.release_latency_seconds.observe(time.monotonic() - decided)

            for release in releases:
                self.patcher.submit(release, done)

    # --- evictions ------------------------------------------------------------------------------------

    def _evict(self, evictions: list[Eviction]) -> None:
        for eviction in evictions:
            pods = list(eviction.pods)
            if eviction.whole_gang:
                self.metrics.gang_evictions.labels(eviction.reason).inc()
                reason, message = "GangEvicted", (
                    f"gang {eviction.key[1]} could not start whole and is evicted: {eviction.message}; its "
                    f"{len(pods)} member(s) are deleted, their operator recreates them through admission, gated")
            else:
                self.metrics.member_evictions.labels(eviction.reason).inc(len(pods))
                escaped = eviction.reason == StuckReason.ESCAPED
                reason = "GangMemberEscaped" if escaped else "GangMemberEvicted"
                message = f"gang {eviction.key[1]}: {eviction.message}" + (
                    "" if escaped else "; deleted, its operator replaces it")
            log.warning("%s %s/%s: %s", reason, eviction.key[0], eviction.key[1], message)
            targets = [root] if (root := root_reference(pods[0])) is not None else []
            targets += [{"apiVersion": "v1", "kind": "Pod", "name": p.name, "namespace": p.namespace, "uid": p.uid}
                        for p in pods][:MEMBER_EVENTS]
            for target in targets:
                self.events.record(target, "Warning", reason, message, EVICT)
            for pod in pods:
                self.evictor.delete(pod.namespace, pod.name, pod.uid, functools.partial(self._deleted, pod.uid))

    def _preempt(self, preemptions: list[Preempting]) -> None:
        """Carry out the pass's preemptions: who preempts whom, told on both sides; each victim marked
        DisruptionTarget, then deleted with its own grace period."""
        for preempting in preemptions:
            self.metrics.preemptions.inc()
            key, victims = preempting.key, preempting.victims
            pods = sum(len(unit.pods) for unit in victims)
            note = (f"gang {key[1]} preempts {len(victims)} unit(s) {preempting.why}, {pods} pod(s) in all "
                    f"({named(victims, 5)}) to place its {preempting.members} members on {preempting.nodes} node(s) "
                    f"(round {preempting.round})")
            log.warning("GangPreempting %s/%s: %s", key[0], key[1], note)
            if (root := root_reference(preempting.sample)) is not None:
                self.events.record(root, "Normal", "GangPreempting", note, PREEMPT)
            policy = "" if preempting.why == LOWER_PRIORITY else f", {preempting.why}"
            told = (f"preempted by gang {key[0]}/{key[1]} (priority {preempting.sample.priority}){policy} to make room "
                    f"for its {preempting.members} members")
            for unit in victims:
                self.metrics.preempted_pods.labels("gang" if unit.gang else "pod").inc(len(unit.pods))
                first = unit.pods[0]
                target = root_reference(first) if unit.gang else None
                self.events.record(target or {"apiVersion": "v1", "kind": "Pod", "name": first.name,
                                              "namespace": first.namespace, "uid": first.uid},
                                   "Warning", "GangPreempted", f"{unit.name} {told}", PREEMPT)
                for pod in unit.pods:
                    self.evictor.disrupt(pod.namespace, pod.name, pod.uid, PREEMPTION_REASON, f"{told}",
                                         functools.partial(self._preempted, pod.uid))

    def _preempted(self, uid: str, status: int) -> None:
        if status not in GONE:  # refused: back into its gang's view; the preemptor decides again
            self._queue.put(("preemption", "FAILED", {"metadata": {"uid": uid}}))

    def _deleted(self, uid: str, status: int) -> None:
        if status not in GONE:  # refused or kept failing: back into the gang's view, the next pass decides again
            self._queue.put(("eviction", "FAILED", {"metadata": {"uid": uid}}))

    # --- pods admission could not resolve, and pods that escaped it --------------------------------

    def _check_pods(self, now: float) -> None:
        """Decide again, off the loop: gated pods whose owner admission could not read (every
        RESOLVE_RETRY_SECONDS), and pods with an owner toward a supported root but no gang labels (see
        ESCAPE_RECHECK_SECONDS; a cluster full of ordinary Jobs' running pods costs no reads)."""
        budget = CHECKS_PER_PASS
        for uids in (self.state.unresolved, self.state.escapable):
            for uid in list(uids):
                pod = self.state.pods[uid]
                if pod.escapable and pod.node and pod.namespace not in self._short:
                    continue
                interval = ESCAPE_RECHECK_SECONDS[not pod.node] if pod.escapable else RESOLVE_RETRY_SECONDS
                first, last, bound = self._checked.get(uid, (now, None, bool(pod.node)))
                if budget <= 0 or (last is not None and now - last < interval and bound == bool(pod.node)):
                    continue
                budget -= 1
                self._checked[uid] = (first, now, bool(pod.node))
                if pod.escapable:
                    self._resolver.submit(self._check_escaped, pod.namespace, pod.name, uid, pod.admission, first)
                else:
                    self._resolver.submit(self._resolve, pod.namespace, pod.name, uid)
        for uid in [u for u in self._checked if u not in self.state.unresolved and u not in self.state.escapable]:
            del self._checked[uid]

    def _check_escaped(self, namespace: str, name: str, uid: str, view: dict[str, Any] | None, seen: float) -> None:
        """A pod with no gang labels that admission would have made a gang member escaped it (admission was down
        or slow, the pod predates the installation or its namespace's opt-in, someone removed the gate): joined to
        its gang when bound (it counts as present and placed), deleted when not (its operator recreates it through
        admission, gated), so that no gang waits for it and it never starts alone."""
        try:
            pod = view or self._read_pod(namespace, name, uid)
            if pod is None:
                return
            meta, spec = pod["metadata"], pod.get("spec") or {}
            node = spec.get("nodeName")
            # decided as admission would have, at creation: before it was bound
            resolution = resolve(pod | {"spec": {k: v for k, v in spec.items() if k != "nodeName"}}, self._source,
                                 self.config)
        except Exception:
            log.exception("checking pod %s/%s", namespace, name)
            return
        if resolution.action is not Step.JOIN or not (node or self._may_recreate((namespace, resolution.group), seen)):
            return
        target = {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": namespace, "uid": uid}
        if node:
            message = (f"pod {name} escaped admission (created without the gang gate) and runs on {node}: counted in "
                       f"gang {resolution.group} as a placed member")
            action, write = "joined", functools.partial(self.evictor.patch, namespace, name, resolution.patch)
        else:
            message = (f"pod {name} escaped admission (created without the gang gate) and is not bound: deleted, so "
                       f"that its operator recreates it through admission, gated, in gang {resolution.group}")
            action, write = "recreated", functools.partial(self.evictor.delete, namespace, name, uid,
                                                           resource_version=str(meta.get("resourceVersion") or ""))

        def done(status: int) -> None:
            if status in DONE:  # not 409: the pod changed meanwhile (bound?), and is checked again
                self.metrics.escaped_pods.labels(action).inc()
                log.warning("GangMemberEscaped %s/%s: %s", namespace, name, message)
                self.events.record(target, "Warning", "GangMemberEscaped", message, JOIN if node else EVICT)

        write(done=done)

    def _may_recreate(self, gang: tuple[str, str], seen: float) -> bool:
        """Whether an escaped, unbound pod of ``gang``, first seen at ``seen``, may be deleted now (see
        ESCAPE_BACKOFF); records the deletion."""
        now = self.clock()
        with self._escapes_lock:
            for key in [k for k, (t, _) in self._escapes.items() if now - t > ESCAPE_MEMORY_SECONDS]:
                del self._escapes[key]
            last, backoff = self._escapes.get(gang, (0.0, 0.0))
            if last and seen <= last:  # seen before the last deletion: one burst of escapes, deleted together
                return True
            if last:  # it escaped again after a deletion: admission may still be down
                backoff = min(max(backoff * 2, ESCAPE_BACKOFF[0]), ESCAPE_BACKOFF[1])
                if now - last < backoff:
                    return False
            self._escapes[gang] = (now, backoff)
            return True

    def _read_pod(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        """The pod as stored now, if it still is ``uid`` (raises on transport errors)."""
        status, raw = api_request(self._client, "GET", f"/api/v1/namespaces/{namespace}/pods/{name}",
                                  self.config.api_timeout_seconds)
        pod = json.loads(raw) if status == 200 else None
        return pod if pod is not None and (pod.get("metadata") or {}).get("uid") == uid else None

    def _resolve(self, namespace: str, name: str, uid: str) -> None:
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        try:
            pod = self._read_pod(namespace, name, uid)
            if pod is None:
                return
            resolution = resolve(pod, self._source, self.config)
            if resolution.action is Step.RETRY:
                log.info("pod %s/%s still unresolved: %s", namespace, name, resolution.reason)
                return
            status, raw = api_request(self._client, "PATCH", path, self.config.api_timeout_seconds,
                                      resolution.patch, "application/json-patch+json")
            if status == 200:
                log.info("pod %s/%s resolved (%s): %s", namespace, name, resolution.action, resolution.reason)
            else:
                self.metrics.patch_errors.labels(f"http_{status}").inc()
        except Exception:
            log.exception("resolving pod %s/%s", namespace, name)

    # --- telling users ---------------------------------------------------------------------------

    def _report(self, cycle: Cycle) -> None:
        counts: dict[str, int] = {}
        seen: set[GangKey] = set()
        for decision in cycle.gangs:
            seen.add(decision.key)
            state = GANG_STATE.get(decision.decision, "waiting")
            counts[state] = counts.get(state, 0) + 1
            if decision.decision == Verdict.RELEASE and decision.released and decision.waited:
                self.metrics.gang_wait_seconds.observe(decision.waited)
            self._announce(decision)
        self.metrics.set_gang_counts(counts)
        self.metrics.gangs_not_scheduled.set(sum(1 for d in cycle.gangs if d.cause == Cause.NO_SCHEDULER))
        for key in [k for k in self._last if k not in seen]:
            del self._last[key]
        self._timed_out &= seen

    def _status(self, cycle: Cycle, now: float) -> None:
        """Hand the PodGroups of the gangs that changed to the writer (it never makes the loop wait)."""
        changed, gone = self._statuses.update(cycle, self.state, now)
        if changed or gone:
            self.podgroups.submit(changed, gone)
            self.metrics.set_gang_phases({str(phase): n for phase, n in self._statuses.counts.items()})

    def _queues(self) -> None:
        """Each Queue's status to its writer (written only when changed), and the per-Queue gauges."""
        quota = self.engine.quota
        for name, view in quota.queues.items():
            self.queue_status.want(name, quota.status(name))
            self.metrics.queue_gangs.labels(name, "admitted").set(view.admitted)
            self.metrics.queue_gangs.labels(name, "pending").set(view.pending)
        for name in self._gauged - set(quota.queues):
            for state in ("admitted", "pending"):
                self.metrics.queue_gangs.remove(name, state)
        self._gauged = set(quota.queues)

    def _announce(self, decision: GangDecision) -> None:
        """The gang's events, as ``controller/announce.py`` decides them: on phase transitions and material changes,
        aggregated per gang."""
        if decision.timed_out and decision.key not in self._timed_out:
            self._timed_out.add(decision.key)
            self.metrics.gang_timeouts.inc()
        key, now = decision.key, self.clock()
        counts = self._announcer.counts(key, self.state.gang_versions.get(key),
                                        lambda: (self.state.pods[uid] for uid in self.state.gangs.get(key, ())))
        vacancies = self.state.vacancies.get(key)
        replacing = bool(vacancies) and any(v.until > now for v in vacancies or ())
        tells = self._announcer.tells(decision, counts, key in self.state.whole, now, replacing)
        if not tells:
            return
        members = self.state.members(key)
        if not members:
            return
        for tell in tells:
            if self._event(members, tell):  # a dropped event (rate limit, full queue) is told again on a later pass
                self._announcer.told(key, tell, now)

    def _event(self, members: list[PodView], tell: Tell) -> bool:
        """Record the event on the root and, when ``tell.members``, on up to MEMBER_EVENTS gated members (without a
        root: on the first gated member at least); False when every one of them was dropped (the caller tells it
        again later)."""
        root = root_reference(members[0])
        targets = [root] if root is not None else []
        if tell.members or not targets:
            targets += [{"apiVersion": "v1", "kind": "Pod", "name": p.name, "namespace": p.namespace, "uid": p.uid}
                        for p in members if p.gated][:MEMBER_EVENTS if tell.members else 1]
        recorded = [self.events.record(target, tell.type, tell.reason, tell.note, tell.action) for target in targets]
        return any(recorded) or not targets


def run_controller(config: Config, api_client: Any, *, leader_elect: bool, identity: str | None,
                   port: int | None) -> int:
    """Run until SIGTERM/SIGINT (exit 0, the Lease handed back) or a lost leadership (exit 1: restart me)."""
    controller = Controller(api_client, config, identity=identity, leader_elect=leader_elect, port=port)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: controller.request_stop())
    lost = controller.start().wait()
    controller.stop()
    return 1 if lost else 0

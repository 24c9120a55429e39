"""Prometheus metrics of the gate controller.

They live in a registry of their own (not the process-wide default), so that every controller
built in one process, as tests do, counts apart and exposes only its own series. The gang
states are pre-set to zero, so a dashboard sees every state from the first scrape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from controller.integrity import StuckReason

GANG_STATES = ("waiting", "releasing", "running", "never_fits", "not_certifiable", "evicting", "opted_out")
# The PodGroup phases (controller/status.py Phase): the gangs_by_phase gauge, one series per phase.
GANG_PHASES = ("Pending", "Waiting", "Releasing", "Running", "Succeeded", "Failed", "NeverFits", "NotCertifiable",
               "Preempting")
PODGROUP_VERBS = ("create", "patch", "patch_status")
PODGROUP_OUTCOMES = ("ok", "conflict", "error")


@dataclass(frozen=True)
class Metrics:
    registry: CollectorRegistry
    gangs: Gauge  # {state}
    gangs_not_scheduled: Gauge  # gangs whose decision is Cause.NO_SCHEDULER
    gang_wait_seconds: Histogram
    release_latency_seconds: Histogram
    patch_errors: Counter  # {reason}: keep reasons a small fixed set (the API Status reason)
    decision_seconds: Histogram
    gang_timeouts: Counter
    is_leader: Gauge
    events_dropped: Counter
    gang_evictions: Counter  # {reason}: integrity.StuckReason
    member_evictions: Counter  # {reason}
    escaped_pods: Counter  # {action}: joined, recreated
    repair_errors: Counter  # {reason}
    gang_phases: Gauge  # {phase}: GANG_PHASES
    podgroup_requests: Counter  # {verb, outcome}
    preemptions: Counter  # preemptions started (controller/preemption.py)
    preempted_pods: Counter  # {kind}: gang (members of our gangs), pod (any other)
    queue_gangs: Gauge  # {queue, state}: admitted, pending (controller/quota.py)
    queue_status_writes: Counter  # {outcome}: written, gone, failed (controller/queue_status.py)

    def set_gang_phases(self, counts: Mapping[str, int]) -> None:
        """Every phase's gauge at once (phases missing from ``counts`` are zero)."""
        unknown = set(counts) - set(GANG_PHASES)
        if unknown:
            raise ValueError(f"unknown gang phases: {sorted(unknown)}")
        for phase in GANG_PHASES:
            self.gang_phases.labels(phase).set(counts.get(phase, 0))

    def set_gang_counts(self, counts: Mapping[str, int]) -> None:
        """Set every state's gauge at once: states missing from ``counts`` are zero, unknown ones an error."""
        unknown = set(counts) - set(GANG_STATES)
        if unknown:
            raise ValueError(f"unknown gang states: {sorted(unknown)}")
        for state in GANG_STATES:
            self.gangs.labels(state).set(counts.get(state, 0))


def new_metrics() -> Metrics:
    registry = CollectorRegistry()
    gangs = Gauge("kubenexus_controller_gangs", "Gangs known to the controller, by state", ["state"],
                  registry=registry)
    for state in GANG_STATES:
        gangs.labels(state)
    metrics = Metrics(
        registry=registry,
        gangs=gangs,
        gangs_not_scheduled=Gauge(
            "kubenexus_controller_gangs_not_scheduled",
            "Gangs no scheduler serves: released members nothing binds, or gangs held back until a scheduler of "
            "their schedulerName acts (GangNotScheduled)", registry=registry),
        gang_wait_seconds=Histogram(
            "kubenexus_controller_gang_wait_seconds", "From a gang's oldest member's creation to its release",
            buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600), registry=registry),
        release_latency_seconds=Histogram(
            "kubenexus_controller_release_latency_seconds", "From a release decision to all its gates removed",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=registry),
        patch_errors=Counter("kubenexus_controller_patch_errors_total", "Failed pod patches while releasing gates",
                             ["reason"], registry=registry),
        decision_seconds=Histogram(
            "kubenexus_controller_decision_seconds", "One pass of the decision loop",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=registry),
        gang_timeouts=Counter("kubenexus_controller_gang_timeouts_total",
                              "Gangs that waited longer than their schedule timeout", registry=registry),
        is_leader=Gauge("kubenexus_controller_is_leader", "1 while this replica holds the leader lease",
                        registry=registry),
        events_dropped=Counter("kubenexus_controller_events_dropped_total",
                               "Kubernetes Events not written: rate limit, full queue or API failure",
                               registry=registry),
        gang_evictions=Counter("kubenexus_controller_gang_evictions_total",
                               "Gangs that never ran whole, evicted as a whole (their members deleted) because a "
                               "member could not start with them", ["reason"], registry=registry),
        member_evictions=Counter("kubenexus_controller_member_evictions_total",
                                 "Single members deleted: stuck members of gangs that ran whole (their operator "
                                 "replaces them), members someone else released before the gang was placed",
                                 ["reason"], registry=registry),
        escaped_pods=Counter("kubenexus_controller_escaped_pods_total",
                             "Pods of opted-in workloads that escaped admission: joined to their gang when bound, "
                             "recreated through admission when not", ["action"], registry=registry),
        repair_errors=Counter("kubenexus_controller_repair_errors_total",
                              "Failed DELETE and PATCH requests of evictions and repairs", ["reason"],
                              registry=registry),
        gang_phases=Gauge("kubenexus_controller_gangs_by_phase",
                          "Gangs known to the controller, by the phase their PodGroup shows", ["phase"],
                          registry=registry),
        podgroup_requests=Counter("kubenexus_controller_podgroup_requests_total",
                                  "Requests writing PodGroups, by verb (create, patch, patch_status) and outcome",
                                  ["verb", "outcome"],
                                  registry=registry),
        preemptions=Counter("kubenexus_controller_preemptions_total",
                            "Preemptions started: a waiting gang evicting lower-priority units to fit",
                            registry=registry),
        preempted_pods=Counter("kubenexus_controller_preempted_pods_total",
                               "Pods preempted for gangs, by kind: gang (members of gangs, whole) or pod",
                               ["kind"], registry=registry),
        queue_gangs=Gauge("kubenexus_controller_queue_gangs", "Gangs per Queue: admitted (released) or pending",
                          ["queue", "state"], registry=registry),
        queue_status_writes=Counter("kubenexus_controller_queue_status_writes_total",
                                    "Queue status writes by outcome: written, gone (the Queue was deleted), failed",
                                    ["outcome"], registry=registry),
    )
    for kind in ("gang", "pod"):
        metrics.preempted_pods.labels(kind)
    for outcome in ("written", "gone", "failed"):
        metrics.queue_status_writes.labels(outcome)
    for reason in StuckReason:  # every series from the first scrape, like the gang states
        metrics.gang_evictions.labels(reason)
        metrics.member_evictions.labels(reason)
    for action in ("joined", "recreated"):
        metrics.escaped_pods.labels(action)
    for phase in GANG_PHASES:
        metrics.gang_phases.labels(phase)
    for verb in PODGROUP_VERBS:
        for outcome in PODGROUP_OUTCOMES:
            metrics.podgroup_requests.labels(verb, outcome)
    return metrics

"""The gate controller's metrics: names, labels and buckets as dashboards and alerts rely on them."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from controller.metrics import GANG_STATES, Metrics, new_metrics

pytestmark = pytest.mark.unit


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_every_metric_is_exposed_with_its_name() -> None:
    text = generate_latest(new_metrics().registry).decode()
    for name in ("kubenexus_controller_gangs", "kubenexus_controller_gang_wait_seconds",
                 "kubenexus_controller_release_latency_seconds", "kubenexus_controller_patch_errors_total",
                 "kubenexus_controller_decision_seconds", "kubenexus_controller_gang_timeouts_total",
                 "kubenexus_controller_is_leader", "kubenexus_controller_events_dropped_total",
                 "kubenexus_controller_gangs_by_phase", "kubenexus_controller_podgroup_requests_total",
                 "kubenexus_controller_gangs_not_scheduled"):
        assert f"# TYPE {name} " in text, name


def test_every_gang_state_is_exposed_at_zero_from_the_start() -> None:
    metrics = new_metrics()
    counts = {state: sample(metrics, "kubenexus_controller_gangs", state=state) for state in GANG_STATES}
    assert counts == dict.fromkeys(GANG_STATES, 0.0)


def test_set_gang_counts_zeroes_the_states_not_given_and_rejects_unknown_ones() -> None:
    metrics = new_metrics()
    metrics.set_gang_counts({"waiting": 3, "running": 2, "never_fits": 1})
    metrics.set_gang_counts({"waiting": 1, "releasing": 1})
    counts = {state: sample(metrics, "kubenexus_controller_gangs", state=state) for state in GANG_STATES}
    assert counts == {"waiting": 1, "releasing": 1, "running": 0, "never_fits": 0, "not_certifiable": 0,
                      "evicting": 0, "opted_out": 0}
    with pytest.raises(ValueError, match="gone"):
        metrics.set_gang_counts({"gone": 1})
    assert sample(metrics, "kubenexus_controller_gangs", state="waiting") == 1


def test_gangs_by_phase_every_phase_from_the_start_bounded_by_phase_not_by_gang() -> None:
    metrics = new_metrics()
    phases = ("Pending", "Waiting", "Releasing", "Running", "Succeeded", "Failed", "NeverFits", "NotCertifiable")
    assert {p: sample(metrics, "kubenexus_controller_gangs_by_phase", phase=p) for p in phases} == \
        dict.fromkeys(phases, 0.0)
    metrics.set_gang_phases({"Waiting": 2, "Running": 5})
    metrics.set_gang_phases({"Running": 4, "NeverFits": 1})
    assert {p: sample(metrics, "kubenexus_controller_gangs_by_phase", phase=p) for p in phases} == \
        {**dict.fromkeys(phases, 0.0), "Running": 4.0, "NeverFits": 1.0}
    with pytest.raises(ValueError, match="Gone"):
        metrics.set_gang_phases({"Gone": 1})
    assert sample(metrics, "kubenexus_controller_podgroup_requests_total", verb="patch_status", outcome="ok") == 0


def test_each_controller_counts_in_its_own_registry() -> None:
    one, two = new_metrics(), new_metrics()  # a second set must not collide with the first
    one.patch_errors.labels("Conflict").inc()
    one.events_dropped.inc(3)
    one.is_leader.set(1)
    assert sample(one, "kubenexus_controller_patch_errors_total", reason="Conflict") == 1
    assert sample(one, "kubenexus_controller_events_dropped_total") == 3
    assert sample(two, "kubenexus_controller_patch_errors_total", reason="Conflict") is None
    assert sample(two, "kubenexus_controller_events_dropped_total") == 0
    assert sample(two, "kubenexus_controller_is_leader") == 0


@pytest.mark.parametrize(("name", "smallest", "largest"), [
    ("kubenexus_controller_gang_wait_seconds", "0.1", "3600.0"),
    ("kubenexus_controller_release_latency_seconds", "0.001", "30.0"),
    ("kubenexus_controller_decision_seconds", "0.0001", "10.0"),
])
def test_histogram_buckets_span_the_documented_range(name: str, smallest: str, largest: str) -> None:
    metrics = new_metrics()
    buckets = [s.labels["le"] for family in metrics.registry.collect() if family.name == name
               for s in family.samples if s.name == f"{name}_bucket"]
    assert buckets[0] == smallest and buckets[-2:] == [largest, "+Inf"], buckets
    assert [float(b) for b in buckets] == sorted(float(b) for b in buckets)


def test_observations_land_in_their_buckets() -> None:
    metrics = new_metrics()
    metrics.gang_wait_seconds.observe(42)
    metrics.release_latency_seconds.observe(0.003)
    metrics.decision_seconds.observe(0.0002)
    metrics.gang_timeouts.inc()
    assert sample(metrics, "kubenexus_controller_gang_wait_seconds_bucket", le="30.0") == 0
    assert sample(metrics, "kubenexus_controller_gang_wait_seconds_bucket", le="60.0") == 1
    assert sample(metrics, "kubenexus_controller_release_latency_seconds_bucket", le="0.0025") == 0
    assert sample(metrics, "kubenexus_controller_release_latency_seconds_bucket", le="0.005") == 1
    assert sample(metrics, "kubenexus_controller_decision_seconds_bucket", le="0.00025") == 1
    assert sample(metrics, "kubenexus_controller_gang_timeouts_total") == 1

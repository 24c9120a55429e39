"""A slow apiserver never lets a pod escape: all API time for one admission is bounded by
``admissionDeadlineSeconds``, well inside the webhook's ``timeoutSeconds`` (5 s), and a pod whose owners
could not be read in time is gated as unresolved, never admitted ungated."""

from __future__ import annotations

import threading
import time

import pytest

from cluster.stub import path_of
from gang.config import Config
from gang.decide import Action, decide
from gang.kinds import JOB
from gang.objects import Deadline, LookupFailed
from kube.client import new_api_client
from kube.owner_cache import CachedSource
from kube.source import ApiSource
from tests.support.contract import GATE, OPT_IN, UNRESOLVED
from tests.support.operator_scenarios import trainjob

pytestmark = pytest.mark.e2e

DEADLINE = Config().admission_deadline_seconds  # the shipped default: 3 s
MARGIN = 1.0  # TLS, the decision and the test client, on a busy 2-core machine
WEBHOOK_TIMEOUT = 5.0  # timeoutSeconds of the shipped webhook configurations


def test_default_deadline_is_well_inside_the_webhook_timeout():
    assert DEADLINE + MARGIN < WEBHOOK_TIMEOUT


def test_trainjob_pod_is_gated_unresolved_in_time_when_the_apiserver_is_slow(start_webhook, apiserver, namespace):
    """pod -> Job -> JobSet -> TrainJob, then the namespace: four reads of 1.4 s each outlive the 5 s timeout."""
    webhook = start_webhook(admissionDeadlineSeconds=DEADLINE)  # the default, in a webhook of this module's own
    scenario = trainjob("node")(namespace, {OPT_IN: "true"})
    apiserver.put(*scenario.owners)
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    apiserver.slow(*scenario.owners, ns, seconds=1.4)
    started = time.monotonic()
    response, after = webhook.admit(scenario.pod, namespace)
    took = time.monotonic() - started
    assert took < DEADLINE + MARGIN, f"answered after {took:.2f}s"
    assert {"name": GATE} in after["spec"]["schedulingGates"]
    assert "deadline" in after["metadata"]["annotations"][UNRESOLVED] or "Timeout" in \
        after["metadata"]["annotations"][UNRESOLVED]


def test_namespace_read_past_the_deadline_is_unresolved_not_skipped(apiserver, namespace, tmp_path):
    """The owners answer at once; only the namespace read is slow: still unresolved, and in time."""
    scenario = trainjob("node")(namespace, {})
    apiserver.put(*scenario.owners)
    apiserver.slow({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}, seconds=2.5)
    client = new_api_client(apiserver.write_kubeconfig(str(tmp_path / "kubeconfig")), pool_size=4, retries=0)
    try:
        started = time.monotonic()
        decision = decide(scenario.pod, namespace, CachedSource(ApiSource(client, 2.0, retries=1), 30, 100),
                          Config(auto_inject="all"), Deadline(1.0))
        assert time.monotonic() - started < 1.0 + MARGIN
        assert decision.action is Action.UNRESOLVED
        assert f"reading namespace {namespace}" in decision.unresolved
    finally:
        client.close()


def test_one_read_with_its_retry_stays_within_the_deadline(apiserver, namespace, tmp_path):
    """apiTimeoutSeconds 2 and a retry would allow 4 s; the deadline of 0.6 s wins, retry included."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "slow", "namespace": namespace}}
    apiserver.put(job)
    apiserver.slow(job, seconds=3.0)
    client = new_api_client(apiserver.write_kubeconfig(str(tmp_path / "kubeconfig")), pool_size=4, retries=0)
    try:
        started = time.monotonic()
        try:
            ApiSource(client, 2.0, retries=1).get(JOB, "batch/v1", namespace, "slow", deadline=Deadline(0.6))
            raise AssertionError("a read of 3 s finished within a deadline of 0.6 s")
        except LookupFailed as exc:
            assert "Timeout" in str(exc), exc
        assert time.monotonic() - started < 0.6 + MARGIN
    finally:
        client.close()


def test_read_without_time_left_is_not_sent(apiserver, namespace, tmp_path):
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "late", "namespace": namespace}}
    apiserver.put(job)
    client = new_api_client(apiserver.write_kubeconfig(str(tmp_path / "kubeconfig")), pool_size=4, retries=0)
    path = path_of(job)
    try:
        deadline = Deadline(0.01)
        time.sleep(0.02)
        try:
            ApiSource(client, 2.0, retries=1).get(JOB, "batch/v1", namespace, "late", deadline=deadline)
            raise AssertionError("read sent after the deadline")
        except LookupFailed as exc:
            assert "deadline" in str(exc)
        assert apiserver.reads[path] == 0
    finally:
        client.close()


class _SlowSource:
    """Test equipment: an inner source that answers after ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def get(self, kind, api_version, namespace, name, uid=None, deadline=None):
        time.sleep(self.delay)
        return {"apiVersion": api_version, "kind": kind.kind, "metadata": {"name": name, "uid": "u"}}


def test_waiting_for_a_concurrent_read_respects_the_deadline():
    """Single flight: a second caller waits for the first one's read, but not past its own deadline."""
    source = CachedSource(_SlowSource(2.0), 30, 100)
    leader = threading.Thread(target=source.get, args=(JOB, "batch/v1", "ns", "j"))
    leader.start()
    time.sleep(0.1)  # the leader's read is in flight
    started = time.monotonic()
    try:
        source.get(JOB, "batch/v1", "ns", "j", deadline=Deadline(0.3))
        raise AssertionError("the waiter outlived its deadline")
    except LookupFailed as exc:
        assert "concurrent read" in str(exc) and "deadline" in str(exc)
    assert time.monotonic() - started < 0.3 + MARGIN
    leader.join()
    assert source.get(JOB, "batch/v1", "ns", "j", deadline=Deadline(0.01))["metadata"]["name"] == "j"  # cached

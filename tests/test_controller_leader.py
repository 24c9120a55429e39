"""Leader election against the local cluster's Lease API, with sub-second timings.

The timings (lease 1 s, renew deadline 0.7 s, retry 0.1 s) keep client-go's ordering: a leader
gives up before a candidate may take over. Every expectation is client-go's leaderelection
behaviour.
"""

from __future__ import annotations

import datetime
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from cluster.local import LocalCluster, NodeSpec
from kube.leader import LeaderElector
from tests.support.polling import wait_for

pytestmark = pytest.mark.e2e

FAST = {"lease_duration": 1.0, "renew_deadline": 0.7, "retry_period": 0.1}
LEASE = "kubenexus-gate-controller"
MICROTIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|\+00:00)")


class Candidate:
    """An elector running on its own thread, with the callbacks it received, in order."""

    def __init__(self, api: client.ApiClient, namespace: str, identity: str, **timing: float) -> None:
        self.identity = identity
        self.calls: list[str] = []
        self.elector = LeaderElector(api, namespace, LEASE, identity, **(FAST | timing),
                                     on_started_leading=lambda: self.calls.append("started"),
                                     on_stopped_leading=lambda: self.calls.append("stopped"))
        self.thread = threading.Thread(target=self.elector.run, daemon=True)

    def start(self) -> Candidate:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.elector.stop(timeout=5)
        self.thread.join(5)
        assert not self.thread.is_alive(), f"{self.identity}: run() did not return after stop()"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(nodes=[NodeSpec("node-a")]) as local:
        yield local


@pytest.fixture
def ns(api: client.ApiClient) -> str:
    name = f"le-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    return name


@pytest.fixture
def candidates(api: client.ApiClient, ns: str) -> Iterator[Any]:
    started: list[Candidate] = []

    def start(identity: str, **timing: float) -> Candidate:
        started.append(Candidate(api, ns, identity, **timing).start())
        return started[-1]

    yield start
    for candidate in started:
        candidate.stop()


def lease_spec(api: client.ApiClient, ns: str) -> dict[str, Any]:
    """The Lease's spec as the API returns it (raw JSON, not the client's parsed model)."""
    response = client.CoordinationV1Api(api).read_namespaced_lease(LEASE, ns, _preload_content=False)
    return json.loads(response.data)["spec"]


def write_foreign_lease(api: client.ApiClient, ns: str, holder: str, duration: int, renewed: datetime.datetime,
                        transitions: int = 0) -> None:
    """Another process's record: created, or written over the current one at its resourceVersion."""
    leases = client.CoordinationV1Api(api)
    spec = {"holderIdentity": holder, "leaseDurationSeconds": duration, "acquireTime": renewed,
            "renewTime": renewed, "leaseTransitions": transitions}
    try:
        current = leases.read_namespaced_lease(LEASE, ns)
    except client.ApiException as exc:
        assert exc.status == 404
        leases.create_namespaced_lease(ns, {"metadata": {"name": LEASE}, "spec": spec})
        return
    leases.replace_namespaced_lease(LEASE, ns, {"metadata": {"name": LEASE, "namespace": ns,
                                                             "resourceVersion": current.metadata.resource_version},
                                                "spec": spec})


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def test_a_single_elector_leads_and_renews_the_lease_under_its_name(api: client.ApiClient, ns: str,
                                                                    candidates: Any) -> None:
    a = candidates("replica-a")
    wait_for(lambda: a.elector.is_leader, timeout=3, what="replica-a leading")
    first = lease_spec(api, ns)
    assert first["holderIdentity"] == "replica-a"
    assert first["leaseDurationSeconds"] == 1 and first["leaseTransitions"] == 0
    assert MICROTIME.fullmatch(first["acquireTime"]) and MICROTIME.fullmatch(first["renewTime"]), first

    renewed = wait_for(lambda: (spec := lease_spec(api, ns))["renewTime"] != first["renewTime"] and spec,
                       timeout=2, what="a renewal")
    assert renewed["holderIdentity"] == "replica-a"
    assert renewed["acquireTime"] == first["acquireTime"], "renewals keep the acquisition time"
    assert renewed["leaseTransitions"] == 0
    assert datetime.datetime.fromisoformat(renewed["renewTime"]) > datetime.datetime.fromisoformat(first["renewTime"])
    assert a.calls == ["started"]


def test_stop_releases_the_lease_and_run_returns(api: client.ApiClient, ns: str, candidates: Any) -> None:
    a = candidates("replica-a")
    wait_for(lambda: a.elector.is_leader, timeout=3, what="replica-a leading")
    a.stop()
    assert not a.elector.is_leader
    assert a.calls == ["started", "stopped"]
    released = lease_spec(api, ns)
    assert released.get("holderIdentity", "") == "" and released["leaseDurationSeconds"] == 1, released


def test_stop_before_run_never_touches_the_lease(api: client.ApiClient, ns: str) -> None:
    candidate = Candidate(api, ns, "replica-a")
    candidate.elector.stop(timeout=1)
    candidate.start().stop()
    assert candidate.calls == []
    with pytest.raises(client.ApiException) as info:
        client.CoordinationV1Api(api).read_namespaced_lease(LEASE, ns)
    assert info.value.status == 404


def test_two_electors_never_lead_at_once(api: client.ApiClient, ns: str, candidates: Any) -> None:
    a, b = candidates("replica-a"), candidates("replica-b")
    leaders: set[str] = set()
    deadline = time.monotonic() + 1.5  # longer than the lease: renewals must keep the first leader
    while time.monotonic() < deadline:
        leading = [c.identity for c in (a, b) if c.elector.is_leader]
        assert len(leading) <= 1, leading
        leaders.update(leading)
        time.sleep(0.01)
    assert len(leaders) == 1, f"leadership flapped or never settled: {leaders}"
    leader = next(c for c in (a, b) if c.identity in leaders)
    other = b if leader is a else a
    assert leader.elector.is_leader and leader.calls == ["started"] and other.calls == []
    assert lease_spec(api, ns)["holderIdentity"] == leader.identity


def test_stopping_the_leader_hands_over_within_the_lease_duration(api: client.ApiClient, ns: str,
                                                                  candidates: Any) -> None:
    a = candidates("replica-a")
    wait_for(lambda: a.elector.is_leader, timeout=3, what="replica-a leading")
    b = candidates("replica-b")
    time.sleep(0.3)
    assert not b.elector.is_leader, "a candidate must not take a renewed lease"
    stopped = time.monotonic()
    a.stop()
    wait_for(lambda: b.elector.is_leader, timeout=3, what="replica-b taking over")
    assert time.monotonic() - stopped < FAST["lease_duration"]
    spec = lease_spec(api, ns)
    assert spec["holderIdentity"] == "replica-b" and spec["leaseTransitions"] == 1, spec
    assert a.calls == ["started", "stopped"] and b.calls == ["started"]


def test_a_crashed_holders_lease_is_taken_only_after_a_full_lease_duration(api: client.ApiClient, ns: str,
                                                                           candidates: Any) -> None:
    # renewTime an hour old: expiry is timed from when the candidate saw the record, not from renewTime.
    write_foreign_lease(api, ns, "crashed", duration=1, renewed=utcnow() - datetime.timedelta(hours=1),
                        transitions=4)
    began = time.monotonic()
    a = candidates("replica-a")
    wait_for(lambda: a.elector.is_leader, timeout=3, what="replica-a taking over")
    assert time.monotonic() - began >= 1.0
    spec = lease_spec(api, ns)
    assert spec["holderIdentity"] == "replica-a" and spec["leaseTransitions"] == 5, spec


def test_a_restarted_holder_resumes_its_own_lease_at_once(api: client.ApiClient, ns: str, candidates: Any) -> None:
    acquired = utcnow() - datetime.timedelta(minutes=5)
    write_foreign_lease(api, ns, "replica-a", duration=30, renewed=acquired, transitions=2)
    a = candidates("replica-a")
    wait_for(lambda: a.elector.is_leader, timeout=0.5, what="replica-a resuming")
    spec = lease_spec(api, ns)
    assert spec["leaseTransitions"] == 2, "holding on is not a transition"
    assert datetime.datetime.fromisoformat(spec["acquireTime"]) == acquired


def test_a_leader_whose_lease_is_taken_over_stops_leading(api: client.ApiClient, ns: str, candidates: Any) -> None:
    a = candidates("replica-a")
    wait_for(lambda: a.elector.is_leader, timeout=3, what="replica-a leading")
    write_foreign_lease(api, ns, "intruder", duration=30, renewed=utcnow(), transitions=1)
    # At its next renewal (a retry period away), not a renew deadline later: another holder is certain.
    wait_for(lambda: a.calls == ["started", "stopped"], timeout=0.4, what=lambda: f"replica-a stopping: {a.calls}")
    assert not a.elector.is_leader
    time.sleep(0.5)  # the intruder's lease is valid for 30 s: replica-a stays a candidate
    assert not a.elector.is_leader and a.calls == ["started", "stopped"]
    assert lease_spec(api, ns)["holderIdentity"] == "intruder"


def test_a_leader_that_cannot_renew_stops_within_the_renew_deadline(cluster: LocalCluster, api: client.ApiClient,
                                                                   ns: str) -> None:
    # Every renewal fails once the replica's credentials are revoked (401 from then on). Stopping the
    # emulator would not do: its HTTP server keeps serving established keep-alive connections.
    user = f"system:serviceaccount:{ns}:gate-controller"
    own_api = config.new_client_from_config(cluster.add_user(user))
    candidate = Candidate(own_api, ns, "replica-a").start()
    try:
        wait_for(lambda: candidate.elector.is_leader, timeout=3, what="replica-a leading")
        for token in [t for t, u in cluster.users.items() if u.username == user]:
            del cluster.users[token]
        lost = time.monotonic()
        wait_for(lambda: candidate.calls == ["started", "stopped"], timeout=3, what="replica-a stopping")
        assert time.monotonic() - lost < FAST["renew_deadline"] + 2 * FAST["retry_period"] + 0.3
        assert not candidate.elector.is_leader
        assert lease_spec(api, ns)["holderIdentity"] == "replica-a", "nobody else wrote the lease"
    finally:
        candidate.stop()  # returns although the lease cannot be released
        own_api.close()


@pytest.mark.parametrize("timing", [
    {"lease_duration": 1.0, "renew_deadline": 1.0, "retry_period": 0.1},  # no margin before a takeover
    {"lease_duration": 2.0, "renew_deadline": 1.0, "retry_period": 0.9},  # no second try before the deadline
    {"lease_duration": 2.0, "renew_deadline": 1.0, "retry_period": 0.0},
])
def test_inconsistent_timings_are_rejected(api: client.ApiClient, timing: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        LeaderElector(api, "default", LEASE, "replica-a", **timing,
                      on_started_leading=lambda: None, on_stopped_leading=lambda: None)


def test_an_empty_identity_is_rejected(api: client.ApiClient) -> None:
    with pytest.raises(ValueError):
        LeaderElector(api, "default", LEASE, "", on_started_leading=lambda: None, on_stopped_leading=lambda: None)

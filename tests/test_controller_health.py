"""The probe and metrics endpoints over real HTTP, as the kubelet and Prometheus reach them."""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CONTENT_TYPE_LATEST

from controller.health import HealthServer
from controller.metrics import new_metrics

pytestmark = pytest.mark.unit


class Checks:
    """Answers the server's questions; the tests change them between requests."""

    def __init__(self) -> None:
        self.ready = True
        self.healthy: bool | Exception = True

    def is_ready(self) -> bool:
        return self.ready

    def is_healthy(self) -> bool:
        if isinstance(self.healthy, Exception):
            raise self.healthy
        return self.healthy


@pytest.fixture
def checks() -> Checks:
    return Checks()


@pytest.fixture
def metrics() -> Any:
    return new_metrics()


@pytest.fixture
def server(checks: Checks, metrics: Any) -> Iterator[HealthServer]:
    running = HealthServer("127.0.0.1", 0, metrics.registry, ready=checks.is_ready, healthy=checks.is_healthy)
    running.start()
    yield running
    running.stop()


def get(server: HealthServer, path: str) -> tuple[int, str, str]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read().decode()
    finally:
        conn.close()


def test_an_ephemeral_port_is_chosen_and_reported(server: HealthServer) -> None:
    assert server.port > 0
    assert get(server, "/healthz")[0] == 200


def test_healthz_follows_the_liveness_check(server: HealthServer, checks: Checks) -> None:
    assert get(server, "/healthz")[::2] == (200, "ok")
    checks.healthy = False
    assert get(server, "/healthz")[::2] == (500, "unhealthy")
    checks.healthy = RuntimeError("decision loop stalled for 120s")
    status, _, body = get(server, "/healthz")
    assert status == 500 and "decision loop stalled for 120s" in body
    checks.healthy = True
    assert get(server, "/healthz?verbose")[::2] == (200, "ok")


def test_readyz_follows_the_readiness_check(server: HealthServer, checks: Checks) -> None:
    assert get(server, "/readyz")[::2] == (200, "ok")
    checks.ready = False
    assert get(server, "/readyz")[::2] == (503, "not ready")
    assert get(server, "/healthz")[0] == 200, "readiness and liveness are separate"


def test_metrics_are_the_registrys_text_exposition(server: HealthServer, metrics: Any) -> None:
    metrics.is_leader.set(1)
    metrics.patch_errors.labels("Conflict").inc(2)
    status, content_type, body = get(server, "/metrics")
    assert status == 200 and content_type == CONTENT_TYPE_LATEST
    assert "kubenexus_controller_is_leader 1.0" in body.splitlines()
    assert 'kubenexus_controller_patch_errors_total{reason="Conflict"} 2.0' in body.splitlines()


@pytest.mark.parametrize("path", ["/", "/health", "/metrics/extra", "/readyz/x"])
def test_other_paths_are_not_found(server: HealthServer, path: str) -> None:
    assert get(server, path)[0] == 404


def test_stop_closes_the_port(checks: Checks, metrics: Any) -> None:
    server = HealthServer("127.0.0.1", 0, metrics.registry, ready=checks.is_ready, healthy=checks.is_healthy)
    server.start()
    assert get(server, "/readyz")[0] == 200
    server.stop()
    with pytest.raises(ConnectionRefusedError):
        get(server, "/readyz")

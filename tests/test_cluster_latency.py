"""``LocalCluster.slow_down``: requests served over HTTP answered late, for chosen users, verbs or resources, set and
cleared at run time, each delayed in its own connection's thread so that other requests are served meanwhile."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, config

from cluster.local import LocalCluster

pytestmark = pytest.mark.e2e

DELAY = (1.0, 1.2)
FAST = 0.8  # well under the delay, with room for a busy machine


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster() as local:
        yield local


@pytest.fixture
def clients(cluster: LocalCluster) -> Iterator[Callable[[str], client.CoreV1Api]]:
    """A CoreV1Api per username, each with connections of its own; the delay is cleared afterwards."""
    made: list[client.ApiClient] = []

    def make(username: str) -> client.CoreV1Api:
        api = config.new_client_from_config(cluster.add_user(username) if username != "admin" else cluster.kubeconfig)
        made.append(api)
        return client.CoreV1Api(api)

    yield make
    cluster.slow_down(None)
    for api in made:
        api.close()


def timed(call: Callable[[], Any]) -> float:
    start = time.monotonic()
    call()
    return time.monotonic() - start


def test_requests_of_chosen_users_are_delayed_others_are_not(cluster: LocalCluster,
                                                             clients: Callable[[str], client.CoreV1Api]) -> None:
    slow, admin = clients("slow-user"), clients("admin")
    cluster.slow_down(DELAY, users=("slow-user",))
    assert timed(lambda: slow.list_namespace()) >= DELAY[0]
    assert timed(lambda: admin.list_namespace()) < FAST
    cluster.slow_down(None)
    assert timed(lambda: slow.list_namespace()) < FAST


def test_a_delayed_request_does_not_hold_up_the_others(cluster: LocalCluster,
                                                       clients: Callable[[str], client.CoreV1Api]) -> None:
    """Two delayed requests on two connections take one delay, not two; a fast one is served meanwhile."""
    first, second, admin = clients("slow-a"), clients("slow-b"), clients("admin")
    cluster.slow_down(DELAY, users=("slow-a", "slow-b"))
    threads = [threading.Thread(target=api.list_namespace) for api in (first, second)]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    time.sleep(0.2)
    assert timed(lambda: admin.list_namespace()) < FAST  # while both slow ones are waiting
    for thread in threads:
        thread.join()
    assert DELAY[0] <= time.monotonic() - start < 2 * DELAY[0]


def test_only_chosen_verbs_are_delayed(cluster: LocalCluster, clients: Callable[[str], client.CoreV1Api]) -> None:
    admin = clients("admin")
    cluster.slow_down(DELAY[0], verbs=("list",))
    assert timed(lambda: admin.list_namespace()) >= DELAY[0]
    assert timed(lambda: admin.read_namespace("default")) < FAST


def test_only_chosen_resources_are_delayed(cluster: LocalCluster, clients: Callable[[str], client.CoreV1Api]) -> None:
    admin = clients("admin")
    cluster.slow_down(DELAY[0], verbs=("list",), resources=("namespaces",))
    assert timed(lambda: admin.list_namespace()) >= DELAY[0]
    assert timed(lambda: admin.list_node()) < FAST


def test_a_delay_range_must_be_ordered(cluster: LocalCluster) -> None:
    with pytest.raises(ValueError, match="low <= high"):
        cluster.slow_down((2.0, 1.0))

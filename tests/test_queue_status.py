"""The Queue status writer (controller/queue_status.py), request by request against an in-memory API: the leader
only, one write per change (coalesced while a write is under way), nothing for an unchanged status, a deleted
Queue forgotten, a failed write retried; the condition's transition time kept while it holds."""

from __future__ import annotations

import copy
import json
import threading
from typing import Any

import jsonpatch
import pytest

from controller.queue_status import QueueStatusWriter
from tests.support.polling import wait_for

pytestmark = pytest.mark.unit

Obj = dict[str, Any]
BASE = "/apis/scheduling.kubenexus.io/v1alpha1/queues"


class Response:
    def __init__(self, status: int, body: Any) -> None:
        self.status, self._body = status, json.dumps(body).encode()

    def read(self) -> bytes:
        return self._body


class FakeApi:
    """Queues as an apiserver keeps them (JSON patches of the status subresource applied); every PATCH recorded;
    ``fail`` answers the next that many PATCHes with a 500; ``gate`` holds each PATCH until set."""

    def __init__(self, *names: str) -> None:
        self.queues: dict[str, Obj] = {name: {"metadata": {"name": name}} for name in names}
        self.patches: list[str] = []
        self.fail = 0
        self.gate = threading.Event()
        self.gate.set()

    def param_serialize(self, method: str, path: str, header_params: Obj, body: Any = None,
                        auth_settings: Any = None) -> tuple[str, str, Obj, Any, None]:
        return method, path, header_params, body, None

    def call_api(self, method: str, url: str, headers: Obj, body: Any, _request_timeout: Any = None) -> Response:
        assert method == "PATCH" and url.endswith("/status")
        assert headers["Content-Type"] == "application/json-patch+json"
        name = url.removeprefix(BASE + "/").removesuffix("/status")
        self.gate.wait(10)
        self.patches.append(name)
        if self.fail:
            self.fail -= 1
            return Response(500, {"message": "etcd timeout"})
        if name not in self.queues:
            return Response(404, {"reason": "NotFound"})
        self.queues[name] = jsonpatch.apply_patch(self.queues[name], body)
        return Response(200, self.queues[name])


def status(pending: int, reason: str = "Admitting") -> Obj:
    return {"usage": {"cpu": "4"}, "borrowing": {}, "pendingGangs": pending, "admittedGangs": 1, "weightedShare": 0,
            "usageSummary": "cpu 4/8", "observedGeneration": 1,
            "conditions": [{"type": "Active", "status": "True", "reason": reason, "message": f"{pending} pending"}]}


@pytest.fixture
def writer_for() -> Any:
    started: list[QueueStatusWriter] = []

    def start(api: FakeApi, leading: bool = True) -> QueueStatusWriter:
        writer = QueueStatusWriter(api, lambda: leading, timeout=5.0)
        writer.start()
        started.append(writer)
        return writer

    yield start
    for writer in started:
        writer.stop()


def test_one_write_per_change_and_none_for_an_unchanged_status(writer_for: Any) -> None:
    api = FakeApi("team-a")
    writer = writer_for(api)
    writer.want("team-a", status(1))
    assert writer.flush(5)
    assert api.patches == ["team-a"]
    written = copy.deepcopy(api.queues["team-a"]["status"])
    assert {k: v for k, v in written.items() if k != "conditions"} == {
        k: v for k, v in status(1).items() if k != "conditions"}
    writer.want("team-a", status(1))  # the next pass: nothing changed
    assert writer.flush(5) and api.patches == ["team-a"]
    writer.want("team-a", status(2))  # the message changed, the condition's status and reason did not
    assert writer.flush(5) and api.patches == ["team-a", "team-a"]
    after = api.queues["team-a"]["status"]
    assert after["pendingGangs"] == 2
    assert after["conditions"][0]["lastTransitionTime"] == written["conditions"][0]["lastTransitionTime"]


def test_statuses_wanted_while_a_write_is_under_way_are_coalesced(writer_for: Any) -> None:
    api = FakeApi("team-a")
    api.gate.clear()
    writer = writer_for(api)
    writer.want("team-a", status(1))
    wait_for(lambda: writer._writing, 5, "the first write under way")  # noqa: SLF001 - the state under test
    for pending in range(2, 12):  # ten passes while the first PATCH waits
        writer.want("team-a", status(pending))
    api.gate.set()
    assert writer.flush(5)
    assert api.patches == ["team-a", "team-a"], "the first, then only the latest"
    assert api.queues["team-a"]["status"]["pendingGangs"] == 11


def test_only_the_leader_writes(writer_for: Any) -> None:
    api = FakeApi("team-a")
    writer = writer_for(api, leading=False)
    writer.want("team-a", status(1))
    assert not writer.flush(1.5) and api.patches == []


def test_a_deleted_queue_is_forgotten_and_a_failed_write_retried(writer_for: Any) -> None:
    api = FakeApi("team-a")
    api.fail = 1
    writer = writer_for(api)
    writer.want("gone", status(1))
    writer.want("team-a", status(1))
    assert writer.flush(10)
    # "gone" first: a 500, retried after team-a's write; then a 404, and it is forgotten (not retried again)
    assert api.patches == ["gone", "team-a", "gone"]
    assert api.queues["team-a"]["status"]["pendingGangs"] == 1
    writer.want("team-a", status(1))
    assert writer.flush(5) and api.patches == ["gone", "team-a", "gone"]

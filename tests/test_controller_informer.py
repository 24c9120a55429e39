"""The gate controller's informer against the local cluster: list, watch, reconnect, relist after 410, stop.

Plus a scripted fake ApiClient for what the emulator does not do: paginated lists, transport
errors, HTTP 410 on a watch request.
"""

from __future__ import annotations

import io
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, config

from cluster.local import LocalCluster, NodeSpec
from controller import slim
from kube.informer import FINAL_STATE_UNKNOWN, Informer

pytestmark = pytest.mark.e2e

MERGE = "application/merge-patch+json"
WAIT = 10.0


# --- helpers ---------------------------------------------------------------------------------------------


class Recorder:
    """Collects (type, name, resourceVersion) of delivered events; waits for a condition on them."""

    def __init__(self, on_event: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.objects: list[tuple[str, dict[str, Any]]] = []
        self.synced_after = -1  # how many events had arrived when on_synced was called
        self.synced_calls = 0
        self.errors: list[str] = []
        self._cond = threading.Condition()
        self._hook = on_event

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        if self._hook:
            self._hook(kind, obj)
        with self._cond:
            meta = obj["metadata"]
            self.events.append((kind, meta["name"], meta.get("resourceVersion", "")))
            self.objects.append((kind, obj))
            self._cond.notify_all()

    def on_synced(self) -> None:
        with self._cond:
            self.synced_after = len(self.events)
            self.synced_calls += 1

    def on_error(self, message: str) -> None:
        with self._cond:
            self.errors.append(message)

    def wait(self, predicate: Callable[[list[tuple[str, str, str]]], bool], timeout: float = WAIT) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: predicate(self.events), timeout), self.events

    def names(self, kind: str | None = None) -> list[str]:
        return [name for k, name, _ in self.events if kind in (None, k)]


class Running:
    """An informer on its own thread, stopped (and checked to have stopped) on exit."""

    def __init__(self, api: Any, path: str, recorder: Recorder, **kwargs: Any) -> None:
        self.informer = Informer(api, path, recorder.on_event, on_synced=recorder.on_synced,
                                 on_error=recorder.on_error, **kwargs)
        self.thread = threading.Thread(target=self.informer.run, daemon=True)

    def __enter__(self) -> Informer:
        self.thread.start()
        assert self.informer.synced.wait(WAIT)
        return self.informer

    def __exit__(self, *exc: Any) -> None:
        self.informer.stop()
        self.thread.join(5)
        assert not self.thread.is_alive()


def pod(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}], **spec}}


def rv_of(obj: Any) -> str:
    return obj.metadata.resource_version


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(nodes=[NodeSpec("node-a"), NodeSpec("node-b")],
                      workdir=str(tmp_path_factory.mktemp("informer"))) as running:
        yield running


@pytest.fixture
def ns(core: client.CoreV1Api) -> str:
    name = f"inf-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    return name


# --- against the local cluster ---------------------------------------------------------------------------


def test_initial_list_delivers_existing_pods_then_synced(api: client.ApiClient, core: client.CoreV1Api,
                                                         ns: str) -> None:
    for name in ("a", "b", "c"):
        core.create_namespaced_pod(ns, pod(name))
    recorder = Recorder()
    with Running(api, f"/api/v1/namespaces/{ns}/pods", recorder) as informer:
        assert sorted(recorder.events) == sorted(
            ("ADDED", p.metadata.name, rv_of(p)) for p in core.list_namespaced_pod(ns).items)
        assert recorder.synced_after == 3 and recorder.synced_calls == 1
        assert informer.known() == 3 and informer.lists == 1
        # Plain dicts, as the apiserver sent them, not model objects.
        assert all(type(obj) is dict and obj["kind"] == "Pod" for _, obj in recorder.objects)
    assert recorder.synced_calls == 1 and recorder.errors == []


def test_cluster_scoped_nodes(api: client.ApiClient) -> None:
    recorder = Recorder()
    with Running(api, "/api/v1/nodes", recorder):
        assert sorted(recorder.names("ADDED")) == ["node-a", "node-b"]


def test_changes_after_sync_arrive_in_order(api: client.ApiClient, core: client.CoreV1Api, ns: str) -> None:
    recorder = Recorder()
    with Running(api, f"/api/v1/namespaces/{ns}/pods", recorder):
        assert recorder.events == []
        created = core.create_namespaced_pod(ns, pod("p"))
        patched = core.patch_namespaced_pod("p", ns, {"metadata": {"labels": {"x": "1"}}}, _content_type=MERGE)
        core.delete_namespaced_pod("p", ns, grace_period_seconds=0)
        other = core.create_namespaced_pod(ns, pod("q"))
        recorder.wait(lambda events: len(events) >= 4)
        time.sleep(0.2)  # nothing more, nothing twice
        deleted = recorder.events[2]
        assert recorder.events[:2] == [("ADDED", "p", rv_of(created)), ("MODIFIED", "p", rv_of(patched))]
        assert deleted[:2] == ("DELETED", "p") and int(deleted[2]) > int(rv_of(patched))
        assert recorder.events[3:] == [("ADDED", "q", rv_of(other))]
        assert recorder.objects[1][1]["metadata"]["labels"] == {"x": "1"}


def test_current_only_delivers_changes_from_now_after_a_reset(api: client.ApiClient, core: client.CoreV1Api,
                                                              ns: str) -> None:
    """The webhook's watch of roots (kube/fresh_roots.py): nothing listed is delivered, only RESET, then changes."""
    core.create_namespaced_pod(ns, pod("old"))
    seen: list[tuple[str, str]] = []
    informer = Informer(api, f"/api/v1/namespaces/{ns}/pods",
                        lambda kind, obj: seen.append((kind, (obj.get("metadata") or {}).get("name", ""))),
                        current_only=True)
    thread = threading.Thread(target=informer.run, daemon=True)
    thread.start()
    try:
        assert informer.synced.wait(WAIT) and seen == [("RESET", "")] and informer.known() == 0
        core.patch_namespaced_pod("old", ns, {"metadata": {"labels": {"x": "1"}}}, _content_type=MERGE)
        core.create_namespaced_pod(ns, pod("new"))
        deadline = time.monotonic() + WAIT
        while len(seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert seen == [("RESET", ""), ("MODIFIED", "old"), ("ADDED", "new")] and informer.known() == 0
    finally:
        informer.stop()
        thread.join(5)


def test_a_failing_callback_does_not_stop_the_informer(api: client.ApiClient, core: client.CoreV1Api,
                                                       ns: str) -> None:
    core.create_namespaced_pod(ns, pod("boom-listed"))

    def explode(kind: str, obj: dict[str, Any]) -> None:
        if obj["metadata"]["name"].startswith("boom"):
            raise RuntimeError("consumer bug")

    recorder = Recorder(explode)
    with Running(api, f"/api/v1/namespaces/{ns}/pods", recorder):
        core.create_namespaced_pod(ns, pod("boom-watched"))
        core.create_namespaced_pod(ns, pod("fine"))
        recorder.wait(lambda events: ("ADDED", "fine") in [e[:2] for e in events])
    # The exploding events were never recorded (the hook raised first) but the informer went on.
    assert recorder.names() == ["fine"] and recorder.synced_calls == 1


def test_field_selector_is_honoured_on_list_and_watch(api: client.ApiClient, core: client.CoreV1Api,
                                                      ns: str) -> None:
    core.create_namespaced_pod(ns, pod("bound", nodeName="node-a"))
    core.create_namespaced_pod(ns, pod("pending"))
    recorder = Recorder()
    with Running(api, f"/api/v1/namespaces/{ns}/pods", recorder, field_selector="spec.nodeName="):
        assert recorder.names() == ["pending"]
        core.create_namespaced_pod(ns, pod("bound-later", nodeName="node-b"))
        core.create_namespaced_pod(ns, pod("pending-later"))
        # Binding moves "pending" out of the selection: the watch says DELETED.
        response = core.create_namespaced_pod_binding(
            "pending", ns, {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "pending"},
                            "target": {"apiVersion": "v1", "kind": "Node", "name": "node-a"}}, _preload_content=False)
        assert response.status == 201
        recorder.wait(lambda events: len(events) >= 3)
        time.sleep(0.2)
        assert [e[:2] for e in recorder.events] == [("ADDED", "pending"), ("ADDED", "pending-later"),
                                                    ("DELETED", "pending")]


def test_label_selector_is_honoured_on_list_and_watch(api: client.ApiClient, core: client.CoreV1Api,
                                                      ns: str) -> None:
    core.create_namespaced_pod(ns, pod("in", {"app": "gang", "tier": "w"}))
    core.create_namespaced_pod(ns, pod("out", {"app": "web"}))
    recorder = Recorder()
    with Running(api, f"/api/v1/namespaces/{ns}/pods", recorder, label_selector="app in (gang),tier"):
        assert recorder.names() == ["in"]
        core.create_namespaced_pod(ns, pod("out-later", {"app": "gang"}))
        core.patch_namespaced_pod("out", ns, {"metadata": {"labels": {"app": "gang", "tier": "x"}}},
                                  _content_type=MERGE)
        core.create_namespaced_pod(ns, pod("in-later", {"app": "gang", "tier": "y"}))
        recorder.wait(lambda events: len(events) >= 3)
        time.sleep(0.2)
        assert [e[:2] for e in recorder.events] == [("ADDED", "in"), ("ADDED", "out"), ("ADDED", "in-later")]


def without_bookmarks(cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real apiserver sends a bookmark about once a minute, the emulator every second: turn them off."""
    watch = cluster.store.watch
    monkeypatch.setattr(cluster.store, "watch",
                        lambda *args, **kwargs: watch(*args, **{**kwargs, "bookmark_every": None}))


def test_watch_closed_by_the_server_reconnects_without_losing_or_repeating(
        cluster: LocalCluster, api: client.ApiClient, core: client.CoreV1Api, ns: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    without_bookmarks(cluster, monkeypatch)  # so the next watch starts from the last event's resourceVersion
    watches = []
    original = api.call_api

    def counting(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if f"/namespaces/{ns}/pods" in url and "watch=true" in url:
            watches.append(url)
        return original(method, url, *args, **kwargs)

    api.call_api = counting  # type: ignore[method-assign]
    try:
        recorder = Recorder()
        with Running(api, f"/api/v1/namespaces/{ns}/pods", recorder, timeout_seconds=1) as informer:
            expected = []
            for i in range(12):  # spread over ~3 s: across at least two server-side closes
                created = core.create_namespaced_pod(ns, pod(f"p{i}"))
                expected.append(("ADDED", f"p{i}", rv_of(created)))
                time.sleep(0.25)
            recorder.wait(lambda events: len(events) >= 12)
            time.sleep(1.2)  # one more reconnect: still nothing repeated
            assert recorder.events == expected
            assert informer.lists == 1
        assert len(watches) >= 3
        assert recorder.errors == []
    finally:
        del api.call_api


def test_gone_relists_and_deletes_what_vanished_meanwhile(tmp_path: Any) -> None:
    """410: the watch's resourceVersion left the emulator's bounded history while the informer was away."""
    with LocalCluster(nodes=[NodeSpec("solo")], workdir=str(tmp_path), history=5) as small:
        api_client = config.new_client_from_config(small.kubeconfig)
        core = client.CoreV1Api(api_client)
        for name in ("a", "b", "c"):
            core.create_namespaced_pod("default", pod(name))
        release = threading.Event()

        def hold(kind: str, obj: dict[str, Any]) -> None:
            if obj["metadata"]["name"] == "hold":  # keep the informer busy until its watch is long over
                assert release.wait(WAIT)

        recorder = Recorder(hold)
        with Running(api_client, "/api/v1/namespaces/default/pods", recorder, timeout_seconds=1) as informer:
            uid_a = core.read_namespaced_pod("a", "default").metadata.uid
            core.create_namespaced_pod("default", pod("hold"))
            time.sleep(1.6)  # the server has ended that watch by now; what follows is not streamed to it
            core.delete_namespaced_pod("a", "default", grace_period_seconds=0)
            modified = core.patch_namespaced_pod("b", "default", {"metadata": {"labels": {"v": "2"}}},
                                                 _content_type=MERGE)
            added = core.create_namespaced_pod("default", pod("d"))
            for i in range(8):  # push the informer's resourceVersion out of the retained history
                core.create_namespaced_config_map("default", {"metadata": {"name": f"churn-{i}"}})
            release.set()
            recorder.wait(lambda events: len(events) >= 7)
            time.sleep(0.3)
            assert informer.lists == 2
            after_hold = recorder.objects[4:]
            # Page by page, then what the new list no longer holds (as client-go's Replace).
            assert [e[:2] for e in recorder.events[4:]] == [("MODIFIED", "b"), ("ADDED", "d"), ("DELETED", "a")]
            stub = after_hold[2][1]
            assert stub[FINAL_STATE_UNKNOWN] is True
            assert stub["metadata"]["uid"] == uid_a and stub["metadata"]["namespace"] == "default"
            assert recorder.events[4][2] == rv_of(modified) and recorder.events[5][2] == rv_of(added)
            assert informer.known() == 4  # b, c, d, hold
            # ... and it is watching again: a change after the relist arrives.
            core.delete_namespaced_pod("c", "default", grace_period_seconds=0)
            recorder.wait(lambda events: events[-1][:2] == ("DELETED", "c"))
            assert FINAL_STATE_UNKNOWN not in recorder.objects[-1][1]
        assert recorder.synced_calls == 1
        api_client.close()


def test_stop_returns_promptly_from_a_quiet_watch(cluster: LocalCluster, api: client.ApiClient, ns: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    without_bookmarks(cluster, monkeypatch)  # else the reader wakes every second; a real apiserver's once a minute
    recorder = Recorder()
    running = Running(api, f"/api/v1/namespaces/{ns}/pods", recorder, timeout_seconds=300)
    with running as informer:
        time.sleep(0.5)  # well inside the watch
        began = time.monotonic()
        stopper = threading.Thread(target=informer.stop, daemon=True)  # a stop() that hangs fails, not hangs
        stopper.start()
        running.thread.join(2)
        stopper.join(0.1)
        assert not running.thread.is_alive() and not stopper.is_alive()
        assert time.monotonic() - began < 1.0


def test_emulator_watch_that_falls_behind_its_history_is_gone() -> None:
    """The emulator ends a watch whose position left the retained history with 410 (it used to skip events)."""
    from cluster.resources import Registry
    from cluster.store import ApiError, Store

    configmaps = Registry().get("", "v1", "configmaps")
    assert configmaps is not None
    store = Store(history=5)
    events = store.watch(configmaps, "default", store.resource_version, time.monotonic() + 5, lambda obj: True)
    store.create(configmaps, {"metadata": {"name": "first"}}, "default")
    assert next(events).obj["metadata"]["name"] == "first"
    for i in range(10):
        store.create(configmaps, {"metadata": {"name": f"cm-{i}"}}, "default")
    with pytest.raises(ApiError) as info:
        list(events)
    assert info.value.code == 410


# --- a scripted ApiClient: pagination, transport errors, HTTP 410 ------------------------------------------


class FakeResponse:
    """Both the kubernetes RESTResponse and the urllib3 response it wraps."""

    def __init__(self, status: int, body: bytes) -> None:
        self.status, self._body = status, io.BytesIO(body)
        self.response, self.chunked, self.connection = self, False, None

    def read(self) -> bytes:
        return self._body.read()

    def read1(self, amt: int) -> bytes:
        return self._body.read(min(amt, 7))  # small pieces: lines are split across reads

    def close(self) -> None:
        pass


class FakeApi:
    def __init__(self, script: list[Callable[[dict[str, str]], FakeResponse]]) -> None:
        self.script, self.requests = script, []
        self.done = threading.Event()

    def param_serialize(self, method: str, path: str, query_params: list[tuple[str, str]], **kwargs: Any) -> Any:
        return method, (path, dict(query_params)), {}, None, None

    def call_api(self, method: str, url: Any, headers: Any, _request_timeout: Any = None) -> FakeResponse:
        self.requests.append(url[1])
        if not self.script:
            self.done.set()
            raise ConnectionRefusedError("script over")
        return self.script.pop(0)(url[1])


def listing(rv: str, names: list[str], cont: str = "") -> Callable[[dict[str, str]], FakeResponse]:
    items = [{"metadata": {"name": n, "namespace": "ns", "uid": f"uid-{n}", "resourceVersion": v}}
             for n, v in (name.split("@") for name in names)]
    meta = {"resourceVersion": rv, **({"continue": cont} if cont else {})}
    return lambda query: FakeResponse(200, json.dumps({"metadata": meta, "items": items}).encode())


def watching(*events: tuple[str, dict[str, Any]]) -> Callable[[dict[str, str]], FakeResponse]:
    body = b"".join(json.dumps({"type": kind, "object": obj}).encode() + b"\n" for kind, obj in events)
    return lambda query: FakeResponse(200, body)


def failing(query: dict[str, str]) -> FakeResponse:
    raise ConnectionResetError("connection reset by peer")


def test_paginated_list_transport_errors_and_http_gone() -> None:
    def obj(name: str, rv: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": rv}}

    api = FakeApi([
        listing("", ["a@1", "b@2"], cont="page-2"),  # a paginated list: two pages
        listing("10", ["c@3"]),
        watching(("ADDED", obj("d", "11")), ("BOOKMARK", {"metadata": {"resourceVersion": "15"}})),
        failing,  # a transport error: back off, watch again from the bookmark
        lambda query: FakeResponse(410, b'{"kind":"Status","code":410,"reason":"Expired"}'),
        listing("20", ["b@2", "c@19", "e@18"]),  # the relist: a and d vanished, c changed, e is new
        watching(("ERROR", {"kind": "Status", "code": 500, "message": "internal"})),
    ])
    recorder = Recorder()
    informer = Informer(api, "/api/v1/pods", recorder.on_event, on_synced=recorder.on_synced,
                        on_error=recorder.on_error, backoff_initial=0.01, label_selector="x=y")
    thread = threading.Thread(target=informer.run, daemon=True)
    thread.start()
    assert api.done.wait(WAIT)
    began = time.monotonic()
    informer.stop()  # while backing off after the scripted refusals
    thread.join(2)
    assert not thread.is_alive() and time.monotonic() - began < 1.0

    lists = [q for q in api.requests if "watch" not in q]
    assert lists[0] == {"labelSelector": "x=y", "limit": "500"}
    assert lists[1] == {"labelSelector": "x=y", "limit": "500", "continue": "page-2"}
    watches = [q for q in api.requests if "watch" in q]
    assert [q["resourceVersion"] for q in watches[:4]] == ["10", "15", "15", "20"]
    assert all(q["allowWatchBookmarks"] == "true" and q["labelSelector"] == "x=y" for q in watches)
    assert recorder.events[:4] == [("ADDED", "a", "1"), ("ADDED", "b", "2"), ("ADDED", "c", "3"),
                                   ("ADDED", "d", "11")]
    assert recorder.synced_after == 3
    assert recorder.events[4:6] == [("MODIFIED", "c", "19"), ("ADDED", "e", "18")]
    assert sorted(recorder.events[6:]) == [("DELETED", "a", "1"), ("DELETED", "d", "11")]
    assert any("ConnectionResetError" in e for e in recorder.errors)
    assert any("internal" in e for e in recorder.errors)
    assert informer.lists == 2 and informer.known() == 3


def run_script(api: FakeApi, recorder: Recorder) -> Informer:
    """Run an informer with the slim pod decoder until the scripted API has nothing more to say."""
    informer = Informer(api, "/api/v1/pods", recorder.on_event, backoff_initial=0.01, decoder=slim.PODS)
    thread = threading.Thread(target=informer.run, daemon=True)
    thread.start()
    assert api.done.wait(WAIT)
    informer.stop()
    thread.join(WAIT)
    return informer


def test_relist_deletes_an_object_recreated_under_its_name_right_before_the_new_one() -> None:
    """A consumer keyed by name (nodes) must end with the new object, one keyed by uid (pods) without the old."""
    def listed(uid: str, rv: str) -> dict[str, Any]:
        return {"metadata": {"name": "a", "namespace": "ns", "uid": uid, "resourceVersion": rv}}

    def page(rv: str, *objects: dict[str, Any]) -> Callable[[dict[str, str]], FakeResponse]:
        body = {"metadata": {"resourceVersion": rv}, "items": list(objects)}
        return lambda query: FakeResponse(200, json.dumps(body).encode())

    api = FakeApi([
        page("5", listed("uid-old", "4")),
        lambda query: FakeResponse(410, b'{"kind":"Status","code":410,"reason":"Expired"}'),
        page("9", listed("uid-new", "8")),
    ])
    recorder = Recorder()
    informer = run_script(api, recorder)
    uids = [(kind, obj["metadata"]["uid"]) for kind, obj in recorder.objects]
    assert uids == [("ADDED", "uid-old"), ("DELETED", "uid-old"), ("ADDED", "uid-new")]
    assert recorder.objects[1][1][FINAL_STATE_UNKNOWN] is True
    assert informer.known() == 1


def test_slim_decoder_keeps_a_watch_error_status_whole() -> None:
    """An ERROR event carries a Status, not a pod: its 410 code must survive the slim decoder and force a relist."""
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "uid-p", "resourceVersion": "2",
                        "managedFields": [{"manager": "kubelet"}]},
           "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x", "env": [{"name": "A"}]}]}}
    api = FakeApi([
        listing("3", []),
        watching(("ADDED", pod), ("ERROR", {"kind": "Status", "code": 410, "message": "too old resource version"})),
        listing("7", []),
    ])
    recorder = Recorder()
    informer = run_script(api, recorder)
    assert informer.lists == 2  # the Gone error event made it list again
    delivered = recorder.objects[0][1]
    assert "managedFields" not in delivered["metadata"] and delivered["spec"]["containers"] == [{}]
    assert recorder.events[-1][:2] == ("DELETED", "p")  # the relist no longer holds it

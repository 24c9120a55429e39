"""Writing each Queue's status, off the decision loop: the leader only, coalesced, never more than needed.

The loop hands over what each pass leaves (``controller/quota.py`` ``Quota.status``) through ``want``; only a status
that differs from the last one written is queued, and only the latest per Queue is kept while a write is under way,
so a burst of passes costs one PATCH per Queue. A write replaces the status (a JSON patch of the status subresource:
what the controller computes is the whole status, so no key of an earlier one survives); a Queue
that is gone (404) is dropped; other failures are retried with backoff. The condition's ``lastTransitionTime`` is
kept while its status and reason stay, so an unchanged Queue is never written again.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gang.queues import GROUP, PLURAL, VERSION
from kube.client import api_request

log = logging.getLogger("kubenexus.controller.queues")

Obj = dict[str, Any]
RETRY_SECONDS = (0.5, 30.0)  # the first retry after a failed write, and the longest


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class QueueStatusWriter:
    """The loop's statuses for Queues, written by one thread while ``leading()``."""

    def __init__(self, api_client: Any, leading: Callable[[], bool], timeout: float = 10.0,
                 on_request: Callable[[str], None] | None = None) -> None:
        self._client, self._leading, self._timeout = api_client, leading, timeout
        self._on_request = on_request or (lambda outcome: None)
        self._written: dict[str, Obj] = {}  # name -> the status last written (with its transition times)
        self._pending: dict[str, Obj] = {}
        self._writing: dict[str, Obj] = {}  # statuses taken from _pending and being written
        self._failures: dict[str, int] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def want(self, name: str, status: Obj) -> None:
        """Queue ``status`` for Queue ``name`` unless it is what was last written (times aside)."""
        with self._lock:
            written = self._written.get(name)
            full = _with_times(status, written)
            if full != self._writing.get(name, written):
                self._pending[name] = full
                self._wake.set()

    def forget(self, name: str) -> None:
        """The Queue is gone: nothing more to write."""
        with self._lock:
            self._written.pop(name, None)
            self._pending.pop(name, None)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="queue-status", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def flush(self, timeout: float) -> bool:
        """Wait until nothing is pending or being written (tests, benchmarks); True when drained."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._pending and not self._writing:
                    return True
            time.sleep(0.02)
        return False

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(1.0)
            self._wake.clear()
            if not self._leading():
                continue
            with self._lock:
                batch, self._pending = self._pending, {}
                self._writing = dict(batch)
            retry = [name for name, status in batch.items() if not self._write(name, status)]
            with self._lock:
                for name in retry:
                    self._pending.setdefault(name, batch[name])
                self._writing = {}
            if retry:
                failures = max(self._failures.get(name, 0) for name in retry)
                self._stop.wait(min(RETRY_SECONDS[0] * 2 ** failures, RETRY_SECONDS[1]))
                self._wake.set()

    def _write(self, name: str, status: Obj) -> bool:
        path = f"/apis/{GROUP}/{VERSION}/{PLURAL}/{name}/status"
        body = [{"op": "add", "path": "/status", "value": status}]  # the whole status: no stale key survives
        try:
            code, raw = api_request(self._client, "PATCH", path, self._timeout, body, "application/json-patch+json")
        except Exception as exc:  # noqa: BLE001 - a transport failure: retried
            code, raw = 0, str(exc).encode()
        if code == 200:
            self._on_request("written")
            with self._lock:
                self._written[name] = status
                self._failures.pop(name, None)
            return True
        if code == 404:
            self._on_request("gone")
            self.forget(name)
            return True
        self._on_request("failed")
        self._failures[name] = self._failures.get(name, 0) + 1
        log.warning("Queue %s: status not written (HTTP %s): %s", name, code, raw[:200].decode(errors="replace"))
        return False


def _with_times(status: Obj, written: Obj | None) -> Obj:
    """``status`` with each condition's ``lastTransitionTime``: the written one while the condition's status and
    reason stay, now otherwise."""
    before = {c["type"]: c for c in (written or {}).get("conditions") or []}
    conditions = []
    for condition in status.get("conditions") or []:
        old = before.get(condition["type"])
        same = old is not None and (old["status"], old["reason"]) == (condition["status"], condition["reason"])
        conditions.append({**condition, "lastTransitionTime": old["lastTransitionTime"] if same and old else _now()})
    full: Obj = json.loads(json.dumps({**status, "conditions": conditions}))  # a deep copy the loop cannot change
    return full

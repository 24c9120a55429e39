"""Kubernetes Events that explain the gate controller's decisions, recorded like client-go records them.

``kubectl describe pod`` is where a user looks first when a pod stays gated, so the controller
says there why (and when it released the gang) in core/v1 Events. The decision loop reaches the
same verdict about a waiting gang on every pass, so identical events (same object, type, reason
and message) are written once per ``repeat_interval``; after that the existing Event's count and
lastTimestamp are patched instead of creating another (client-go's EventCorrelator). A token
bucket per involved object (client-go's EventSourceObjectSpamFilter) bounds the write rate, so
a chatty gang cannot starve the events of another. Writes happen on a background thread: recording never raises and
never waits for the API, since an event must never stall or break a release.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client import ApiException

log = logging.getLogger(__name__)

CACHE_SIZE = 4096  # distinct events remembered for deduplication (client-go's maxLruCacheEntries)
_REFERENCE = ("apiVersion", "kind", "namespace", "name", "uid", "resourceVersion", "fieldPath")
_STRATEGIC = "application/strategic-merge-patch+json"


@dataclasses.dataclass
class _Seen:
    """What was written for one distinct event: its name, the occurrences so far, when it was written."""

    name: str
    namespace: str
    first: datetime.datetime
    count: int = 1
    written_at: float = 0.0  # on the recorder's clock


class EventRecorder:
    """Records core/v1 Events on behalf of ``component``; see the module docstring for the rules.

    At most ``queue_size`` events wait for (or are being written by) the worker; more are dropped.
    ``on_dropped`` is called once per dropped event (e.g. a Prometheus counter's ``inc``).
    """

    def __init__(self, api_client: client.ApiClient, component: str = "kubenexus-controller", burst: int = 25,
                 per_second: float = 0.2, repeat_interval: float = 60.0, clock: Callable[[], float] = time.monotonic,
                 *, queue_size: int = 1000, request_timeout: float = 10.0,
                 on_dropped: Callable[[], None] | None = None) -> None:
        self._core = client.CoreV1Api(api_client)
        self._component = component
        self._burst, self._per_second = burst, per_second
        self._repeat_interval = repeat_interval
        self._clock = clock
        self._queue_size, self._request_timeout = queue_size, request_timeout
        self._on_dropped = on_dropped
        self._lock = threading.Condition()  # guards everything below; notified when the queue drains
        self._seen: collections.OrderedDict[tuple[str, ...], _Seen] = collections.OrderedDict()
        self._buckets: collections.OrderedDict[tuple[str, ...], tuple[float, float]] = collections.OrderedDict()
        self._pending = 0  # queued or being written
        self._dropped = 0
        self._closed = False
        self._queue: queue.SimpleQueue[tuple[bool, dict[str, Any]] | None] = queue.SimpleQueue()
        self._worker = threading.Thread(target=self._work, name="event-recorder", daemon=True)
        self._worker.start()

    @property
    def dropped(self) -> int:
        """Events not written: over the rate limit, queue full, closed, or the API failed."""
        with self._lock:
            return self._dropped

    def record(self, involved: Mapping[str, Any], type_: str, reason: str, message: str) -> bool:
        """Queue an event about ``involved`` (an ObjectReference); never raises, never blocks on the API.

        False when it was dropped (rate limit, full queue, closed): a caller that tells something once may
        try again later. True when queued, or when the same event was queued within the repeat interval.
        """
        try:
            return self._record(involved, type_, reason, message)
        except Exception:  # a malformed reference must not break the caller's decision
            log.exception("recording event %s failed", reason)
            self._drop()
            return False

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued event is written (or given up); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._lock.wait(remaining)
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (for at most ``timeout``) and drop whatever is recorded afterwards."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._queue.put(None)
        self._worker.join(timeout)

    # --- the caller's side -------------------------------------------------------------

    def _record(self, involved: Mapping[str, Any], type_: str, reason: str, message: str) -> bool:
        ref = {k: involved[k] for k in _REFERENCE if involved.get(k)}
        key = tuple(ref.get(k, "") for k in ("apiVersion", "kind", "namespace", "name", "uid")) + (
            type_, reason, message)
        with self._lock:
            if self._closed:
                self._drop()
                return False
            now = self._clock()
            seen = self._seen.get(key)
            if seen is not None:
                self._seen.move_to_end(key)
                seen.count += 1  # an occurrence, written or not: count is how often it happened
                if now - seen.written_at < self._repeat_interval:
                    return True
            if not self._take_token(key[:5], now) or self._pending >= self._queue_size:
                self._drop()
                return False
            wall = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
            if seen is None:
                # client-go's name: the object's name and the time in nanoseconds, in hex.
                seen = _Seen(f"{ref.get('name', '')}.{time.time_ns():x}", ref.get("namespace") or "default", wall)
                self._seen[key] = seen
                if len(self._seen) > CACHE_SIZE:
                    self._seen.popitem(last=False)
            seen.written_at = now
            event = {
                "metadata": {"name": seen.name, "namespace": seen.namespace},
                "involvedObject": ref, "type": type_, "reason": reason, "message": message,
                "source": {"component": self._component}, "reportingComponent": self._component,
                "firstTimestamp": seen.first, "lastTimestamp": wall, "count": seen.count,
            }
            self._pending += 1
            self._queue.put((seen.count > 1, event))
            return True

    def _take_token(self, obj: tuple[str, ...], now: float) -> bool:
        tokens, refilled = self._buckets.pop(obj, (float(self._burst), now))
        tokens = min(float(self._burst), tokens + (now - refilled) * self._per_second)
        taken = tokens >= 1
        self._buckets[obj] = (tokens - 1 if taken else tokens, now)
        if len(self._buckets) > CACHE_SIZE:
            self._buckets.popitem(last=False)
        return taken

    def _drop(self) -> None:
        with self._lock:
            self._dropped += 1
        if self._on_dropped is not None:
            self._on_dropped()

    # --- the worker's side -------------------------------------------------------------

    def _work(self) -> None:
        while (job := self._queue.get()) is not None:
            try:
                self._write(*job)
            finally:
                with self._lock:
                    self._pending -= 1
                    self._lock.notify_all()

    def _write(self, repeat: bool, event: dict[str, Any]) -> None:
        namespace, name = event["metadata"]["namespace"], event["metadata"]["name"]
        try:
            if repeat:
                try:
                    self._core.patch_namespaced_event(
                        name, namespace, {k: event[k] for k in ("count", "lastTimestamp", "message")},
                        _content_type=_STRATEGIC, _request_timeout=self._request_timeout)
                    return
                except ApiException as exc:
                    if exc.status != 404:  # deleted (events expire after an hour): create it again
                        raise
            body: Any = event  # a plain dict: the client serializes it as is
            self._core.create_namespaced_event(namespace, body, _request_timeout=self._request_timeout)
        except Exception as exc:  # whatever the API or the transport did, the worker must live on
            log.warning("writing event %s/%s (%s) failed: %s", namespace, name, event["reason"], exc)
            self._drop()

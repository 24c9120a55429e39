"""Kubernetes Events that explain the gate controller's decisions, recorded as client-go's events.k8s.io/v1 recorder
records them.

``kubectl describe pod`` is where a user looks first when a pod stays gated, so the controller says there why (and
when it released the gang) in events.k8s.io/v1 Events (the core/v1 view of the same objects is what ``kubectl
describe`` and ``kubectl get events`` read). An Event is identified by what it regards, its type, reason, action and
note: recorded again, the same Event's ``series`` counts up (``series.count``, ``series.lastObservedTime``) instead
of another Event being created. The apiserver refuses a changed note on update, so a note with new numbers is a new
Event; what to tell, and when, is the caller's (``controller/announce.py``). An Event recorded again within
``repeat_interval`` of its last write is counted but not written (the next write carries the count). A token bucket
per regarded object (client-go's EventSourceObjectSpamFilter) bounds the write rate, so a chatty gang cannot starve
the events of another. Writes happen on a background thread: recording never raises and never waits for the API,
since an event must never stall or break a release.
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

CACHE_SIZE = 4096  # distinct events remembered for series (client-go's maxLruCacheEntries)
NOTE_LIMIT = 1024  # bytes of a note the apiserver accepts (NoteLengthLimit)
REPORTING_INSTANCE_LIMIT = 128
REPORTING_CONTROLLER = "kubenexus-controller"  # the gate controller's events say so (kubenexus cluster serve reads it)
NAME_LIMIT = 253 - 17  # of the regarded object's name in an Event's name (a dot and 16 hex digits follow)
_REFERENCE = ("apiVersion", "kind", "namespace", "name", "uid", "resourceVersion", "fieldPath")
_MERGE = "application/merge-patch+json"


def micro_time(moment: datetime.datetime) -> str:
    """A MicroTime as the apiserver writes it: RFC 3339, microseconds, UTC."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def truncate(text: str, limit: int) -> str:
    """At most ``limit`` UTF-8 bytes, cut on a character boundary with an ellipsis."""
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[:limit - 3].decode(errors="ignore") + "..."


@dataclasses.dataclass
class _Seen:
    """One Event written: its name and namespace, the occurrences so far, when it was written."""

    name: str
    namespace: str
    event_time: str
    count: int = 1
    written_at: float = 0.0  # on the recorder's clock


class EventRecorder:
    """Records events.k8s.io/v1 Events as ``controller`` (reportingController) from ``instance`` (reportingInstance,
    e.g. the replica's identity); see the module docstring for the rules.

    At most ``queue_size`` events wait for (or are being written by) the worker; more are dropped.
    ``on_dropped`` is called once per dropped event (e.g. a Prometheus counter's ``inc``).
    """

    def __init__(self, api_client: client.ApiClient, controller: str = REPORTING_CONTROLLER, instance: str = "",
                 burst: int = 25, per_second: float = 0.2, repeat_interval: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, *, queue_size: int = 1000, request_timeout: float = 10.0,
                 on_dropped: Callable[[], None] | None = None) -> None:
        self._events = client.EventsV1Api(api_client)
        self._controller = controller
        self._instance = truncate(instance or controller, REPORTING_INSTANCE_LIMIT)
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
        self._written = 0
        self._last_name = 0
        self._closed = False
        self._queue: queue.SimpleQueue[tuple[bool, dict[str, Any]] | None] = queue.SimpleQueue()
        self._worker = threading.Thread(target=self._work, name="event-recorder", daemon=True)
        self._worker.start()

    @property
    def dropped(self) -> int:
        """Events not written: over the rate limit, queue full, closed, or the API failed."""
        with self._lock:
            return self._dropped

    @property
    def written(self) -> int:
        """Writes that succeeded: creates and series updates."""
        with self._lock:
            return self._written

    def record(self, regarding: Mapping[str, Any], type_: str, reason: str, note: str, action: str = "Observe") -> bool:
        """Queue an event about ``regarding`` (an ObjectReference); never raises, never blocks on the API.

        False when it was dropped (rate limit, full queue, closed): a caller that tells something once may
        try again later. True when queued, or when the same event was written within the repeat interval.
        """
        try:
            return self._record(regarding, type_, reason, note, action)
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

    def _record(self, regarding: Mapping[str, Any], type_: str, reason: str, note: str, action: str) -> bool:
        ref = {k: regarding[k] for k in _REFERENCE if regarding.get(k)}
        note = truncate(note, NOTE_LIMIT)
        key = tuple(ref.get(k, "") for k in ("apiVersion", "kind", "namespace", "name", "uid")) + (
            type_, reason, action, note)
        with self._lock:
            if self._closed:
                self._drop()
                return False
            now = self._clock()
            seen = self._seen.get(key)
            if seen is not None:
                self._seen.move_to_end(key)
                seen.count += 1  # an occurrence, written or not: the series counts how often it happened
                if now - seen.written_at < self._repeat_interval:
                    return True
            if not self._take_token(key[:5], now) or self._pending >= self._queue_size:
                self._drop()
                return False
            wall = micro_time(datetime.datetime.now(datetime.UTC))
            if seen is None:
                # client-go's name: the regarded object's name and the time in nanoseconds, in hex.
                self._last_name = max(time.time_ns(), self._last_name + 1)
                seen = _Seen(f"{str(ref.get('name', ''))[:NAME_LIMIT]}.{self._last_name:x}",
                             ref.get("namespace") or "default", wall)
                self._seen[key] = seen
                if len(self._seen) > CACHE_SIZE:
                    self._seen.popitem(last=False)
            seen.written_at = now
            event: dict[str, Any] = {
                "apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": seen.name, "namespace": seen.namespace},
                "eventTime": seen.event_time, "reportingController": self._controller,
                "reportingInstance": self._instance, "action": action, "reason": reason, "regarding": ref,
                "note": note, "type": type_,
            }
            if seen.count > 1:
                event["series"] = {"count": seen.count, "lastObservedTime": wall}
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

    def _write(self, series: bool, event: dict[str, Any]) -> None:
        namespace, name = event["metadata"]["namespace"], event["metadata"]["name"]
        try:
            if series:
                try:
                    self._events.patch_namespaced_event(name, namespace, {"series": event["series"]},
                                                        _content_type=_MERGE, _request_timeout=self._request_timeout)
                    self._wrote()
                    return
                except ApiException as exc:
                    if exc.status != 404:  # deleted (events expire after an hour): create it again
                        raise
            body: Any = event  # a plain dict: the client serializes it as is
            self._events.create_namespaced_event(namespace, body, _request_timeout=self._request_timeout)
            self._wrote()
        except Exception as exc:  # whatever the API or the transport did, the worker must live on
            log.warning("writing event %s/%s (%s) failed: %s", namespace, name, event["reason"], exc)
            self._drop()

    def _wrote(self) -> None:
        with self._lock:
            self._written += 1

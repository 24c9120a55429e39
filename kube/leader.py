"""Lease-based leader election, the way client-go's ``leaderelection`` package does it.

Only one gate controller replica may release gangs, or two replicas would hand out the same free
capacity twice. The replicas compete for a coordination.k8s.io/v1 Lease. The holder renews it
every ``retry_period``; a candidate takes it over only when the holder released it (empty
``holderIdentity``) or when the candidate has seen no change to the lease's record for the
record's ``leaseDurationSeconds``, timed on the candidate's own monotonic clock: comparing
``renewTime`` with the local wall clock would make clock skew between nodes a split brain.
Every write carries the resourceVersion last read, so of two candidates writing at once one
gets 409 Conflict and stays a candidate.

A leader stops leading when it cannot renew within ``renew_deadline`` (shorter than the lease
duration, so it stops before anyone else may take over) or as soon as it reads another holder
in the lease. ``on_stopped_leading`` runs before the lease is released, so the next leader
never starts while this one still acts.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import math
import random
import threading
import time
from collections.abc import Callable

import urllib3
from kubernetes import client
from kubernetes.client import ApiException

log = logging.getLogger(__name__)

JITTER = 1.2  # client-go's JitterFactor: candidates retry after retry_period * (1 + rand * JITTER)
# What a request to the API can raise: HTTP errors, transport errors, an undecodable answer.
_FAILURES = (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError)


@dataclasses.dataclass(frozen=True)
class _Record:
    """client-go's LeaderElectionRecord: the part of the Lease spec the election owns."""

    holder: str = ""
    duration: int = 0
    acquired: datetime.datetime | None = None
    renewed: datetime.datetime | None = None
    transitions: int = 0

    @classmethod
    def of(cls, lease: client.V1Lease) -> _Record:
        spec = lease.spec or client.V1LeaseSpec()
        return cls(spec.holder_identity or "", spec.lease_duration_seconds or 0, spec.acquire_time,
                   spec.renew_time, spec.lease_transitions or 0)

    def spec(self) -> client.V1LeaseSpec:
        # acquireTime and renewTime are MicroTime: the client sends them as RFC 3339 with microseconds.
        return client.V1LeaseSpec(holder_identity=self.holder, lease_duration_seconds=self.duration,
                                  acquire_time=self.acquired, renew_time=self.renewed,
                                  lease_transitions=self.transitions)


class LeaderElector:
    """Campaigns for the Lease ``namespace/name`` as ``identity`` until ``stop()``.

    The callbacks run on the election thread, in order (started, stopped, started, ...): they
    must return promptly (start or signal the real work elsewhere), since renewals wait for them.
    """

    def __init__(self, api_client: client.ApiClient, namespace: str, name: str, identity: str, *,
                 lease_duration: float = 15.0, renew_deadline: float = 10.0, retry_period: float = 2.0,
                 on_started_leading: Callable[[], None], on_stopped_leading: Callable[[], None]) -> None:
        if not identity:
            raise ValueError("leader election needs a non-empty identity")
        # client-go's checks: the leader must give up before others may take over, and retry before that.
        if not lease_duration > renew_deadline > retry_period * JITTER > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period * 1.2 > 0")
        self._api = client.CoordinationV1Api(api_client)
        self._namespace, self._name, self._identity = namespace, name, identity
        # leaseDurationSeconds is an integer field: round up, so others never wait less than we promised.
        self._duration_seconds = math.ceil(lease_duration)
        self._renew_deadline, self._retry_period = renew_deadline, retry_period
        self._on_started, self._on_stopped = on_started_leading, on_stopped_leading
        self._lease: client.V1Lease | None = None  # last read or written, for its resourceVersion
        self._observed = _Record()
        self._observed_at = 0.0  # monotonic time the observed record last changed
        self._leading = False
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._done.set()
        self._thread: threading.Thread | None = None

    @property
    def is_leader(self) -> bool:
        """True from ``on_started_leading`` until just before ``on_stopped_leading``."""
        return self._leading

    def run(self) -> None:
        """Campaign, lead, and campaign again after losing the lease; return once ``stop()`` is called."""
        self._done.clear()
        self._thread = threading.current_thread()
        try:
            while self._acquire():
                self._set_leading(True)
                self._renew()
                self._set_leading(False)
                if self._stopping.is_set():
                    self._release()
        finally:
            self._done.set()

    def stop(self, timeout: float | None = None) -> None:
        """Stop campaigning; a leader stops leading and releases the lease before ``run()`` returns."""
        self._stopping.set()
        if threading.current_thread() is not self._thread:  # called from a callback: run() ends after it
            self._done.wait(timeout)

    # --- the election ------------------------------------------------------------------

    def _acquire(self) -> bool:
        while not self._stopping.is_set():
            if self._try_acquire_or_renew(self._renew_deadline):
                log.info("acquired lease %s/%s as %s", self._namespace, self._name, self._identity)
                return True
            if self._stopping.wait(self._retry_period * (1 + random.random() * JITTER)):
                break
        return False

    def _renew(self) -> None:
        """Renew every retry period until stopped, another holder appears, or a round misses its deadline."""
        while not self._stopping.wait(self._retry_period):
            deadline = time.monotonic() + self._renew_deadline
            while not self._try_acquire_or_renew(deadline - time.monotonic()):
                if not self._holds():
                    log.warning("lease %s/%s taken over by %r", self._namespace, self._name, self._observed.holder)
                    return
                if time.monotonic() + self._retry_period >= deadline:
                    log.warning("could not renew lease %s/%s within %.1fs", self._namespace, self._name,
                                self._renew_deadline)
                    return
                if self._stopping.wait(self._retry_period):
                    return

    def _try_acquire_or_renew(self, timeout: float) -> bool:
        """client-go's tryAcquireOrRenew: one attempt to create, take over or renew the lease."""
        now = datetime.datetime.now(datetime.UTC)
        record = _Record(self._identity, self._duration_seconds, now, now)
        # Fast path: the leader writes over the lease it last wrote, assuming nobody else changed it.
        if self._holds() and self._valid() and self._lease is not None:
            kept = dataclasses.replace(record, acquired=self._observed.acquired, transitions=self._observed.transitions)
            if self._write(kept, timeout):
                return True
        try:
            lease = self._api.read_namespaced_lease(self._name, self._namespace, _request_timeout=_at_least(timeout))
        except ApiException as exc:
            if exc.status == 404:
                return self._write(record, timeout, create=True)
            log.warning("reading lease %s/%s failed: %s", self._namespace, self._name, _describe(exc))
            return False
        except _FAILURES as exc:
            log.warning("reading lease %s/%s failed: %s", self._namespace, self._name, _describe(exc))
            return False
        self._lease = lease
        current = _Record.of(lease)
        if current != self._observed:
            self._observe(current)
        if current.holder and self._valid() and not self._holds():
            return False
        if self._holds():
            record = dataclasses.replace(record, acquired=current.acquired, transitions=current.transitions)
        else:
            record = dataclasses.replace(record, transitions=current.transitions + 1)
        return self._write(record, timeout)

    def _release(self) -> None:
        """client-go's ReleaseOnCancel: an empty holder lets a candidate take over at once."""
        if self._holds() and self._lease is not None:
            now = datetime.datetime.now(datetime.UTC)
            if self._write(_Record("", 1, now, now, self._observed.transitions), self._renew_deadline):
                log.info("released lease %s/%s", self._namespace, self._name)

    def _write(self, record: _Record, timeout: float, create: bool = False) -> bool:
        """Create the lease, or update it at the resourceVersion last seen (409 if someone else wrote)."""
        try:
            if create:
                body = client.V1Lease(metadata=client.V1ObjectMeta(name=self._name, namespace=self._namespace),
                                      spec=record.spec())
                lease = self._api.create_namespaced_lease(self._namespace, body, _request_timeout=_at_least(timeout))
            else:
                assert self._lease is not None
                body = self._lease.model_copy(update={"spec": record.spec()})
                lease = self._api.replace_namespaced_lease(self._name, self._namespace, body,
                                                           _request_timeout=_at_least(timeout))
        except _FAILURES as exc:  # a conflict is a lost race; anything else (403, 404 namespace) needs a look
            level = logging.INFO if isinstance(exc, ApiException) and exc.status == 409 else logging.WARNING
            log.log(level, "writing lease %s/%s failed: %s", self._namespace, self._name, _describe(exc))
            return False
        self._lease = lease
        self._observe(record)
        return True

    # --- state -------------------------------------------------------------------------

    def _observe(self, record: _Record) -> None:
        self._observed, self._observed_at = record, time.monotonic()

    def _holds(self) -> bool:
        return self._observed.holder == self._identity

    def _valid(self) -> bool:
        return time.monotonic() < self._observed_at + self._observed.duration

    def _set_leading(self, leading: bool) -> None:
        self._leading = leading
        callback = self._on_started if leading else self._on_stopped
        try:
            callback()
        except Exception:  # a failing callback must not end the election: renewals would stop
            log.exception("leader election callback failed")


def _at_least(timeout: float) -> float:
    """A request timeout that is never zero or negative (the client would then wait forever)."""
    return max(timeout, 0.05)


def _describe(exc: Exception) -> str:
    """The API's own message when there is one (e.g. 'namespaces "x" not found'), else the exception."""
    if not isinstance(exc, ApiException):
        return repr(exc)
    try:
        message = json.loads(exc.body or "")["message"]
    except (ValueError, TypeError, KeyError):
        message = exc.reason
    return f"HTTP {exc.status}: {message}"

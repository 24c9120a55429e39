"""Writing each gang's PodGroup, off the decision loop: create it when missing, keep its spec, write its status.

The loop hands over what it computed (``controller/status.py``: a ``Desired`` per changed gang, the gangs that are
gone) with ``submit``, which never waits: only the latest desired state of a gang is kept (coalesced), and workers
write it. Per PodGroup:

- it is created when missing (same namespace, the gang's name, an owner reference to the root so that the garbage
  collector deletes it with the root, the managed-by label and the labels back to the root), unless the gang is on
  its way out (every member being deleted: the root was deleted, and a PodGroup created now would only be
  collected again), or the gang is an explicit one (the PodGroup is its root: the user's, never re-created). One
  the controller kept that is deleted while its gang lives is created again only once a fresh read of the root
  (``root_exists``) shows it still there: the garbage collector deletes it with its root before the root's pods go;
- a PodGroup the controller manages (the managed-by label) gets its labels, owner reference and spec restored when
  they drift; one the controller did not create (no managed-by label) gets its status only;
- its status is written through the status subresource when it differs from the stored one (``status_for`` keeps
  the times that must not move), as a JSON merge patch pinned to the resourceVersion it was computed against; a
  409 (someone else wrote since) is retried from the newer version the watch brings (it queues the PodGroup again
  as soon as it arrives), so what is written is always computed against what is stored. A write's response never
  replaces what the watch delivered after that write (the watch runs in its own thread and may be first): else the
  writer would go on from a version older than the stored one;
- at most one status write per PodGroup per ``interval`` seconds, except on a phase change; a creation and its first
  status are written together. A gang that is gone (no member pod left) gets one last status that says so (its counts
  at zero: ``status.emptied``), and then leaves its PodGroup to the garbage collector (never deleted here).

What exists is known from a list+watch of every PodGroup (user-created ones too), so a restart or a new leader
writes only what differs. While the CRD is not installed the list fails (404) and nothing is written. Only the
leader writes (``leading``); a standby keeps its PodGroup cache warm like its state.
"""

from __future__ import annotations

import collections
import heapq
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from controller.members import GangKey, PodView
from controller.status import Desired, emptied, labels_for, merge_patch, new_podgroup, spec_for, status_for
from gang import keys
from kube.client import api_request
from kube.informer import FINAL_STATE_UNKNOWN, Informer

log = logging.getLogger("kubenexus.controller")
Obj = dict[str, Any]
Target = tuple[str, str]  # (namespace, name) of a PodGroup
COLLECTION = f"/apis/{keys.PODGROUP_GROUP}/{keys.PODGROUP_VERSION}"
STATUS_INTERVAL_SECONDS = 5.0  # at most one status write per PodGroup this often, phase changes aside
_MERGE = "application/merge-patch+json"
_RETRY_SECONDS = 2.0  # after a failed request
_INVALID_SECONDS = 60.0  # after a 4xx that a retry will not fix (422, 403)
_SUPERSEDED = 8  # per PodGroup, the resourceVersions our own writes moved past (late watch events of them)
_DELIVERED = 16  # per PodGroup a gang wants, the last versions the watch delivered (is a write's response older?)


def path(namespace: str, name: str = "", status: bool = False) -> str:
    base = f"{COLLECTION}/namespaces/{namespace}/{keys.PODGROUP_PLURAL}"
    return f"{base}/{name}" + ("/status" if status else "") if name else base


class PodGroupWriter:
    """See the module docstring. ``on_request(verb, outcome)`` counts every request (verbs: create, patch,
    patch_status)."""

    def __init__(self, api_client: Any, *, leading: Callable[[], bool],
                 root_exists: Callable[[PodView], bool | None] = lambda pod: True,
                 interval: float = STATUS_INTERVAL_SECONDS, workers: int = 2, timeout: float = 10.0,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 on_request: Callable[[str, str], None] | None = None) -> None:
        self._client = api_client
        self._leading = leading
        self._root_exists = root_exists
        self.interval = interval
        self._timeout = timeout
        self._clock, self._wall = clock, wall
        self._on_request = on_request
        self._workers = workers
        self._lock = threading.Condition()
        self._desired: dict[GangKey, Desired] = {}
        self._targets: dict[Target, set[GangKey]] = {}  # the gangs that want each PodGroup (one holds it)
        self._objects: dict[Target, Obj] = {}  # every PodGroup as last seen: watch, our writes and reads
        self._superseded: dict[Target, collections.deque[str]] = {}
        self._delivered: dict[Target, collections.deque[str]] = {}
        self._written: dict[Target, float] = {}  # when its status was last written (clock)
        self._collected: set[tuple[Target, str]] = set()  # managed PodGroups deleted, with their root's uid
        self._heap: list[tuple[float, int, Target]] = []
        self._due: dict[Target, float] = {}  # earliest time each queued PodGroup is due
        self._busy: set[Target] = set()
        self._again: set[Target] = set()
        self._sequence = 0
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self.informer = Informer(api_client, f"{COLLECTION}/{keys.PODGROUP_PLURAL}", self.observe,
                                 backoff_max=30.0, on_synced=self._on_synced)
        self.requests: collections.Counter[str] = collections.Counter()  # verb -> requests made

    # --- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> PodGroupWriter:
        """The watch and ``workers`` writer threads (none: the caller writes with ``sync_due``)."""
        self._spawn(self.informer.run, "podgroup-informer")
        for number in range(self._workers):
            self._spawn(self._work, f"podgroup-writer-{number}")
        return self

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        self._stopped.set()
        self.informer.stop()
        with self._lock:
            self._lock.notify_all()

    @property
    def synced(self) -> bool:
        return self.informer.synced.is_set()

    def idle(self) -> bool:
        """Nothing queued or being written (tests and benchmarks wait for it)."""
        with self._lock:
            return not self._busy and not any(due <= self._clock() for due in self._due.values())

    # --- the loop's side: never waits --------------------------------------------------------------------

    def submit(self, changed: Iterable[Desired], gone: Iterable[GangKey] = ()) -> None:
        """The latest desired state of every changed gang, and the gangs that are gone (their PodGroups stay)."""
        now = self._clock()
        with self._lock:
            for want in changed:
                old = self._desired.get(want.key)
                if old is not None and (old.namespace, old.name) != (want.namespace, want.name):
                    self._release((old.namespace, old.name), want.key, now)
                self._desired[want.key] = want
                target = (want.namespace, want.name)
                self._targets.setdefault(target, set()).add(want.key)
                self._queue(target, now)
            for key in gone:  # one last status, that says its members are gone; then it is let go (_one)
                old = self._desired.get(key)
                if old is not None:
                    self._desired[key] = emptied(old, self._wall())
                    self._queue((old.namespace, old.name), now)

    def _release(self, target: Target, key: GangKey, now: float) -> None:
        wanting = self._targets.get(target)
        if wanting is None:
            return
        wanting.discard(key)
        if wanting:
            self._queue(target, now)  # another gang of that name takes it over
        else:
            del self._targets[target]
            self._written.pop(target, None)
            self._delivered.pop(target, None)
            self._collected = {c for c in self._collected if c[0] != target}

    def _queue(self, target: Target, due: float) -> None:
        """Under the lock: make ``target`` due at ``due`` at the latest."""
        if self._due.get(target, float("inf")) <= due:
            return
        self._due[target] = due
        self._sequence += 1
        heapq.heappush(self._heap, (due, self._sequence, target))
        self._lock.notify()

    # --- the watch ---------------------------------------------------------------------------------------

    def _on_synced(self) -> None:
        with self._lock:
            now = self._clock()
            for target in self._targets:
                self._queue(target, now)

    def observe(self, kind: str, obj: Obj) -> None:
        """A watch event about a PodGroup (the informer calls it; so do tests)."""
        meta = obj.get("metadata") or {}
        target = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        with self._lock:
            known = self._objects.get(target)
            if target in self._targets:
                self._delivered.setdefault(target, collections.deque(maxlen=_DELIVERED)).append(
                    str(meta.get("resourceVersion") or ""))
            if kind == "DELETED":
                if known is not None and (obj.get(FINAL_STATE_UNKNOWN) or
                                          (known.get("metadata") or {}).get("uid") == meta.get("uid")):
                    del self._objects[target]
                    self._superseded.pop(target, None)
                    gone = known.get("metadata") or {}
                    if (gone.get("labels") or {}).get(keys.MANAGED_BY_LABEL) == keys.MANAGED_BY_CONTROLLER:
                        self._collected.update((target, str(ref.get("uid"))) for ref in gone.get("ownerReferences")
                                               or [] if isinstance(ref, dict))
            elif meta.get("resourceVersion") in self._superseded.get(target, ()):
                return  # a late event of a version our own write already replaced
            else:
                self._objects[target] = obj
            if target in self._targets:
                self._queue(target, self._clock())

    def _remember(self, target: Target, obj: Obj, written_over: str = "") -> Obj | None:
        """Under the lock: ``obj`` as a write returned it, unless the watch (its own thread) already delivered that
        version: events come in order, so what it delivered since is as new or newer (someone else's write, or a
        deletion) and is kept. ``written_over``: the version the write replaced. Returns the PodGroup as known now."""
        if str((obj.get("metadata") or {}).get("resourceVersion") or "") not in self._delivered.get(target, ()):
            self._objects[target] = obj
        if written_over:
            self._superseded.setdefault(target, collections.deque(maxlen=_SUPERSEDED)).append(written_over)
        return self._objects.get(target)

    # --- the workers -------------------------------------------------------------------------------------

    def sync_due(self) -> int:
        """Write every PodGroup due now in the caller's thread (tests and benchmarks with ``workers=0`` and their own
        clock); returns how many were looked at."""
        done = 0
        while True:
            with self._lock:
                now = self._clock()
                due = sorted((when, target) for target, when in self._due.items() if when <= now)
                if not due:
                    return done
                target = due[0][1]
                del self._due[target]
                self._busy.add(target)
            self._one(target)
            done += 1

    def _work(self) -> None:
        while not self._stopped.is_set():
            with self._lock:
                target = self._next()
                if target is None:
                    continue
                self._busy.add(target)
            self._one(target)

    def _one(self, target: Target) -> None:
        """Sync one PodGroup (marked busy by the caller) and queue it again when it says so."""
        delay: float | None = None
        try:
            delay = self._sync(target)
        except Exception:  # a bug here must not end the writer
            log.exception("writing PodGroup %s/%s", *target)
            delay = _RETRY_SECONDS
        finally:
            with self._lock:
                self._busy.discard(target)
                now = self._clock()
                if delay is None:  # done: a gang that is gone lets its PodGroup go once its last status is written
                    for key in [k for k in self._targets.get(target, ()) if k in self._desired]:
                        if self._desired[key].gone:
                            del self._desired[key]
                            self._release(target, key, now)
                if delay is not None and target in self._targets:
                    self._queue(target, now + delay)
                if target in self._again:
                    self._again.discard(target)
                    self._queue(target, now)
                self._lock.notify_all()

    def _next(self) -> Target | None:
        """Under the lock: the next PodGroup due, after waiting for one (None: look again)."""
        if not self._heap:
            self._lock.wait(1.0)
            return None
        due, _, target = self._heap[0]
        now = self._clock()
        if due > now:
            self._lock.wait(min(due - now, 1.0))
            return None
        heapq.heappop(self._heap)
        if self._due.get(target) != due:
            return None  # superseded by an earlier due time
        del self._due[target]
        if target in self._busy:
            self._again.add(target)
            return None
        return target

    def _holder(self, target: Target) -> Desired | None:
        """Under the lock: the gang whose PodGroup this is; of two gangs of one name (a root deleted and created
        again while its old members go), the newer."""
        wanting = [self._desired[key] for key in self._targets.get(target, ()) if key in self._desired]
        return max(wanting, key=lambda d: (d.started, d.key)) if wanting else None

    def _sync(self, target: Target) -> float | None:
        """Bring one PodGroup to its gang's desired state; returns when to look again (None: when it changes)."""
        with self._lock:
            want = self._holder(target)
            obj = self._objects.get(target)
            written = self._written.get(target)
        if want is None:
            return None
        if not self.synced or not self._leading():
            return _RETRY_SECONDS  # what exists is not known yet, or this replica does not lead
        if obj is None:
            if want.root is None or want.root.explicit or want.leaving or want.gone:
                return None
            if (target, want.root.uid) in self._collected:  # deleted: by the garbage collector with its root?
                exists = self._root_exists(want.sample) if want.sample is not None else None
                if exists is None:
                    return _RETRY_SECONDS
                if not exists:
                    return None  # the root is gone: its members follow, and a PodGroup created now would be collected
                with self._lock:
                    self._collected.discard((target, want.root.uid))  # a user deleted it: created again
            created = self._create(target, want)
            if isinstance(created, float):
                return created
            obj, written = created, None
        meta = obj.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return None  # being deleted (the garbage collector, with its root): its DELETED event says when
        if want.leaving:
            return None
        managed = (meta.get("labels") or {}).get(keys.MANAGED_BY_LABEL) == keys.MANAGED_BY_CONTROLLER
        if managed and want.root is not None and not want.root.explicit:
            fixed = self._keep_spec(target, obj, want)
            if isinstance(fixed, float):
                return fixed
            obj = fixed
        return self._write_status(target, obj, want, written)

    def _create(self, target: Target, want: Desired) -> Obj | float:
        status, body = self._request("create", "POST", path(want.namespace), new_podgroup(want, self._root(want)))
        if status == 201:
            with self._lock:
                known = self._remember(target, json.loads(body))
            log.info("PodGroup %s/%s created for gang %s", want.namespace, want.name, want.key[1])
            return _RETRY_SECONDS if known is None else known  # None: deleted already
        if status == 409:  # it exists, and the watch has not told yet: looked at again when it does
            return _RETRY_SECONDS
        return self._failed("creating", target, status, body)

    def _keep_spec(self, target: Target, obj: Obj, want: Desired) -> Obj | float:
        """A managed PodGroup's labels, owner reference and spec, restored when they drift (a root created again
        under the same name hands it over)."""
        meta = obj.get("metadata") or {}
        labels = labels_for(want)
        owners = [want.root.owner_reference()] if want.root is not None else []
        current_owners = [{k: r.get(k) for k in ("apiVersion", "kind", "name", "uid")}
                          for r in meta.get("ownerReferences") or []]
        patch: Obj = {}
        if any((meta.get("labels") or {}).get(k) != v for k, v in labels.items()):
            patch.setdefault("metadata", {})["labels"] = labels
        if current_owners != owners:
            patch.setdefault("metadata", {})["ownerReferences"] = owners
        spec_patch = merge_patch(obj.get("spec") or {}, spec_for(want, self._root(want, obj)))
        if spec_patch:
            patch["spec"] = spec_patch
        if not patch:
            return obj
        version = str(meta.get("resourceVersion") or "")
        patch.setdefault("metadata", {})["resourceVersion"] = version
        status, body = self._request("patch", "PATCH", path(*target), patch, _MERGE)
        if status == 200:
            with self._lock:
                known = self._remember(target, json.loads(body), version)
            return _RETRY_SECONDS if known is None else known  # None: deleted already
        return self._failed("updating", target, status, body)

    def _write_status(self, target: Target, obj: Obj, want: Desired, written: float | None) -> float | None:
        meta = obj.get("metadata") or {}
        current = obj.get("status") or {}
        status = status_for(want, current, int(meta.get("generation") or 0), self._wall())
        if status == current:
            return None
        now = self._clock()
        if current.get("phase") == status["phase"] and written is not None and now - written < self.interval:
            return written + self.interval - now  # coalesced: the latest desired state is written then
        version = str(meta.get("resourceVersion") or "")
        code, body = self._request("patch_status", "PATCH", path(*target, status=True),
                                   {"metadata": {"resourceVersion": version}, "status": merge_patch(current, status)},
                                   _MERGE)
        if code == 200:
            with self._lock:
                self._remember(target, json.loads(body), version)
                self._written[target] = now
            return None
        if code == 404:  # deleted meanwhile: created again (a managed one) once its DELETED event is in
            return _RETRY_SECONDS
        return self._failed("writing the status of", target, code, body)

    @staticmethod
    def _root(want: Desired, stored: Obj | None = None) -> Mapping[str, str]:
        """What the gang's root asks, for the spec; while it cannot be read, the schedule timeout stored."""
        if want.constraints is not None:
            return want.constraints
        timeout = ((stored or {}).get("spec") or {}).get("scheduleTimeoutSeconds")
        return {keys.SCHEDULE_TIMEOUT_SECONDS: str(timeout)} if timeout is not None else {}

    def _request(self, verb: str, method: str, url: str, body: Any = None,
                 content_type: str | None = None) -> tuple[int, bytes]:
        try:
            status, raw = api_request(self._client, method, url, self._timeout, body,
                                      content_type or ("application/json" if body is not None else None))
        except Exception as exc:
            status, raw = 0, f"{type(exc).__name__}: {exc}".encode()
        outcome = "ok" if 200 <= status < 300 else "conflict" if status == 409 else "error"
        with self._lock:
            self.requests[verb] += 1
        if self._on_request is not None:
            self._on_request(verb, outcome)
        return status, raw

    def _failed(self, doing: str, target: Target, status: int, body: bytes) -> float:
        """When to look again after a failed write. A 409: what it was computed against is stale, and the watch
        brings the newer version (which queues the PodGroup again at once): it is computed again from that."""
        if status == 409:
            return _RETRY_SECONDS
        log.warning("%s PodGroup %s/%s: HTTP %s %s", doing, target[0], target[1], status or "(no response)",
                    body[:300])
        return _INVALID_SECONDS if status in (400, 403, 422) else _RETRY_SECONDS

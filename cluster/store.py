"""The emulated apiserver's storage: objects, resourceVersions, finalizers and the watch history.

Semantics follow the Kubernetes API conventions: a single monotonically increasing
resourceVersion, uid/creationTimestamp/generation set by the server, optimistic concurrency
(409 Conflict on a stale resourceVersion), graceful deletion with finalizers, and a bounded
event history behind watches (410 Gone for a resourceVersion older than what is retained).
"""

from __future__ import annotations

import builtins
import copy
import dataclasses
import datetime
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from cluster.resources import Resource

Obj = dict[str, Any]
Key = tuple[str, str, str, str]  # group, plural, namespace ("" when cluster-scoped), name
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # what the apiserver uses for generateName suffixes


class ApiError(Exception):
    """An API failure, rendered as a metav1.Status with the same code and reason as the apiserver."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> Obj:
        status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                  "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:  # StatusDetails fields are all omitempty
            status["details"] = {k: v for k, v in self.details.items() if v not in ("", None, [])}
        return status


def not_found(resource: Resource, name: str) -> ApiError:
    qualified = f"{resource.plural}.{resource.group}" if resource.group else resource.plural
    return ApiError(404, "NotFound", f'{qualified} "{name}" not found',
                    {"name": name, "group": resource.group, "kind": resource.plural})


def conflict(resource: Resource, name: str, why: str) -> ApiError:
    qualified = f"{resource.plural}.{resource.group}" if resource.group else resource.plural
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {qualified} "{name}": {why}',
                    {"name": name, "group": resource.group, "kind": resource.plural})


def precondition_failure(resource: Resource, name: str, meta: Obj, uid: str | None,
                          resource_version: str | None) -> ApiError | None:
    """A DELETE's preconditions against the stored metadata: the 409 of the first one that fails."""
    if uid and meta.get("uid") != uid:
        return conflict(resource, name, f"Precondition failed: UID in precondition: {uid}, "
                                        f"UID in object meta: {meta.get('uid')}")
    if resource_version and meta.get("resourceVersion") != resource_version:
        return conflict(resource, name, f"Precondition failed: ResourceVersion in precondition: {resource_version}, "
                                        f"ResourceVersion in object meta: {meta.get('resourceVersion')}")
    return None


def _is_namespace(resource: Resource) -> bool:
    return (resource.group, resource.kind) == ("", "Namespace")


def now(offset_seconds: float = 0) -> str:
    """RFC 3339 in whole seconds, as metav1.Time serialises; ``offset_seconds`` from now."""
    moment = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=offset_seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(offset_seconds: float = 0) -> str:
    """metav1.MicroTime, as a Lease's renewTime or an events.k8s.io Event's eventTime is written."""
    return now(offset_seconds).replace("Z", ".000000Z")


def parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


@dataclass(frozen=True)
class Event:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    group: str
    plural: str
    obj: Obj
    old: Obj | None = None  # the previous state of a MODIFIED object, for selector transitions


class _Objects:
    """Objects by resource, then by (namespace, name): listing one resource never scans the others."""

    def __init__(self) -> None:
        self._tables: dict[tuple[str, str], dict[tuple[str, str], Obj]] = {}

    def of(self, resource: Resource) -> dict[tuple[str, str], Obj]:
        return self._tables.setdefault((resource.group, resource.plural), {})

    def get(self, key: Key) -> Obj | None:
        return self._tables.get(key[:2], {}).get(key[2:])

    def __contains__(self, key: Key) -> bool:
        return self.get(key) is not None

    def __setitem__(self, key: Key, obj: Obj) -> None:
        self._tables.setdefault(key[:2], {})[key[2:]] = obj

    def __delitem__(self, key: Key) -> None:
        del self._tables[key[:2]][key[2:]]

    def pop(self, key: Key) -> Obj | None:
        return self._tables.get(key[:2], {}).pop(key[2:], None)


def _key(resource: Resource, namespace: str | None, name: str) -> Key:
    return (resource.group, resource.plural, namespace or "" if resource.namespaced else "", name)


class Store:
    def __init__(self, history: int = 10000) -> None:
        self._cond = threading.Condition()
        self._objects = _Objects()
        self._rv = 0
        self._history: deque[Event] = deque(maxlen=history)
        self._closed = False

    # --- reads -------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    def get(self, resource: Resource, namespace: str | None, name: str) -> Obj:
        with self._cond:
            obj = self._objects.get(_key(resource, namespace, name))
            if obj is None:
                raise not_found(resource, name)
            return copy.deepcopy(obj)

    def exists(self, resource: Resource, namespace: str | None, name: str, uid: str) -> bool:
        """Whether this very object (by uid) is still stored."""
        with self._cond:
            obj = self._objects.get(_key(resource, namespace, name))
            return obj is not None and obj["metadata"].get("uid") == uid

    def items(self, resource: Resource) -> list[Obj]:
        """The stored objects themselves, not copies: for in-process controllers, read-only."""
        with self._cond:
            return list(self._objects.of(resource).values())

    def wait_for_change(self, since: int, timeout: float) -> int:
        """Block until the resourceVersion moves past ``since`` (or timeout); the current one."""
        with self._cond:
            if self._rv <= since and not self._closed:
                self._cond.wait(timeout)
            return self._rv

    def list(self, resource: Resource, namespace: str | None,
             match: Callable[[Obj], bool] = lambda obj: True) -> tuple[list[Obj], int]:
        with self._cond:
            items = [copy.deepcopy(obj) for (ns, _), obj in sorted(self._objects.of(resource).items())
                     if (namespace is None or ns == namespace) and match(obj)]
            return items, self._rv

    # --- writes ------------------------------------------------------------------------

    def _record(self, type_: str, resource: Resource, obj: Obj, old: Obj | None = None) -> None:
        self._history.append(Event(self._rv, type_, resource.group, resource.plural, copy.deepcopy(obj), old))
        self._cond.notify_all()

    def _next_rv(self, obj: Obj) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)

    def create(self, resource: Resource, obj: Obj, namespace: str | None) -> Obj:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        with self._cond:
            if not meta.get("name") and meta.get("generateName"):
                for _ in range(8):
                    candidate = meta["generateName"] + "".join(random.choices(_NAME_CHARS, k=5))
                    if _key(resource, namespace, candidate) not in self._objects:
                        meta["name"] = candidate
                        break
            if not meta.get("name"):
                raise ApiError(422, "Invalid", f"{resource.kind} is invalid: metadata.name: Required value: "
                                                "name or generateName is required")
            if resource.namespaced:
                meta["namespace"] = namespace
            key = _key(resource, namespace, meta["name"])
            if key in self._objects:
                qualified = f"{resource.plural}.{resource.group}" if resource.group else resource.plural
                raise ApiError(409, "AlreadyExists", f'{qualified} "{meta["name"]}" already exists',
                               {"name": meta["name"], "group": resource.group, "kind": resource.plural})
            obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now()
            meta["generation"] = 1
            for server_set in ("deletionTimestamp", "deletionGracePeriodSeconds"):
                meta.pop(server_set, None)
            self._next_rv(obj)
            self._objects[key] = obj
            self._record("ADDED", resource, obj)
            return copy.deepcopy(obj)

    def update(self, resource: Resource, obj: Obj, namespace: str | None, subresource: str = "") -> Obj:
        """PUT semantics: a stale metadata.resourceVersion is a 409 Conflict."""
        meta = obj.get("metadata") or {}
        with self._cond:
            key = _key(resource, namespace, meta.get("name", ""))
            current = self._objects.get(key)
            if current is None:
                raise not_found(resource, meta.get("name", ""))
            wanted = meta.get("resourceVersion")
            if wanted and wanted != current["metadata"]["resourceVersion"]:
                raise conflict(resource, meta["name"], "the object has been modified; please apply your changes "
                                                       "to the latest version and try again")
            new = self._merge_update(resource, current, copy.deepcopy(obj), subresource)
            if new == current:
                return copy.deepcopy(current)
            meta = new["metadata"]
            # shouldDeleteDuringUpdate: the last finalizer gone, and no grace period running (a pod's kubelet
            # has not confirmed yet otherwise); a namespace also needs its spec.finalizers gone
            # (ShouldDeleteNamespaceDuringUpdate, pkg/registry/core/namespace/storage/storage.go)
            if meta.get("deletionTimestamp") and not meta.get("finalizers") \
                    and not current["metadata"].get("deletionGracePeriodSeconds") \
                    and not (_is_namespace(resource) and (new.get("spec") or {}).get("finalizers")):
                self._next_rv(new)
                del self._objects[key]
                self._record("DELETED", resource, new)
                return copy.deepcopy(new)
            self._next_rv(new)
            self._objects[key] = new
            self._record("MODIFIED", resource, new, old=current)  # current is replaced, never mutated again
            return copy.deepcopy(new)

    @staticmethod
    def prepared(resource: Resource, current: Obj, new: Obj, subresource: str = "") -> Obj:
        """``new`` as an update over ``current`` would store it (server-set metadata, status by subresource)."""
        return Store._merge_update(resource, current, new, subresource)

    @staticmethod
    def _merge_update(resource: Resource, current: Obj, new: Obj, subresource: str) -> Obj:
        """Keep what clients cannot change: identity, timestamps; status vs spec by subresource.

        With a ``status`` subresource, a write of the main resource keeps the stored status and a write of
        ``/status`` keeps everything but the status (a request without one removes it: the custom resource
        ``statusStrategy``). ``metadata.generation`` counts changes of anything but metadata and status; for a
        custom resource without a status subresource, of anything but metadata (``customResourceStrategy``:
        ``copyNonMetadata``). A write that changes nothing is not stored (``update`` returns the stored object,
        resourceVersion unchanged), as etcd3's ``GuaranteedUpdate`` skips identical bytes. A Namespace's
        ``spec.finalizers`` change only through ``/finalize`` (which keeps the status, like any write but ``/status``).
        """
        new["apiVersion"], new["kind"] = current["apiVersion"], current["kind"]
        meta, old_meta = new.setdefault("metadata", {}), current["metadata"]
        for server_set in ("uid", "creationTimestamp", "namespace", "name", "generation", "resourceVersion",
                           "deletionTimestamp", "deletionGracePeriodSeconds"):
            if server_set in old_meta:
                meta[server_set] = old_meta[server_set]
            else:
                meta.pop(server_set, None)
        if _is_namespace(resource) and not subresource:  # namespaceStrategy.PrepareForUpdate
            given = new.get("spec")
            spec = {k: v for k, v in given.items() if k != "finalizers"} if isinstance(given, dict) else {}
            kept = (current.get("spec") or {}).get("finalizers")
            new["spec"] = spec if kept is None else {**spec, "finalizers": copy.deepcopy(kept)}
        if "status" in resource.subresources:
            if subresource == "status":
                status = new.get("status", {}) if resource.builtin or "status" in new else None
                new = {**copy.deepcopy(current), "metadata": {**copy.deepcopy(old_meta)}}
                if status is None:
                    new.pop("status", None)
                else:
                    new["status"] = status
            elif "status" in current:
                new["status"] = copy.deepcopy(current["status"])
            else:
                new.pop("status", None)
        generational = ("metadata",) if not resource.builtin and "status" not in resource.subresources \
            else ("metadata", "status")
        if subresource != "status" and {k: v for k, v in new.items() if k not in generational} != \
                {k: v for k, v in current.items() if k not in generational}:
            new["metadata"]["generation"] = old_meta.get("generation", 1) + 1
        return new

    def _to_delete(self, resource: Resource, namespace: str | None, name: str, uid: str | None,
                   resource_version: str | None) -> tuple[Key, Obj]:
        """The stored object a deletion concerns and its key (under the lock): 404 when there is none, 409 when the
        preconditions fail."""
        key = _key(resource, namespace, name)
        current = self._objects.get(key)
        if current is None:
            raise not_found(resource, name)
        failure = precondition_failure(resource, name, current["metadata"], uid, resource_version)
        if failure:
            raise failure
        return key, current

    def mark_deleted(self, resource: Resource, name: str, change: Callable[[Obj], None], *, uid: str | None = None,
                     resource_version: str | None = None) -> Obj:
        """A deletion that only marks: ``deletionTimestamp`` set (kept if set) and ``change`` applied, the object
        stored whatever its finalizers say: the namespace registry's first Delete, a ``GuaranteedUpdate``
        (``pkg/registry/core/namespace/storage/storage.go``). Preconditions fail with 409, as ``delete``'s."""
        with self._cond:
            key, current = self._to_delete(resource, None, name, uid, resource_version)
            new = copy.deepcopy(current)
            new["metadata"].setdefault("deletionTimestamp", now())
            change(new)
            if new == current:
                return copy.deepcopy(current)
            self._next_rv(new)
            self._objects[key] = new
            self._record("MODIFIED", resource, new, old=current)
            return copy.deepcopy(new)

    def delete(self, resource: Resource, namespace: str | None, name: str, *, grace: int | None = None,
               uid: str | None = None, resource_version: str | None = None,
               finalizers: Callable[[Obj], builtins.list[str]] | None = None) -> Obj:
        """The generic registry's Delete (``BeforeDelete`` + ``updateForGracefulDeletionAndFinalizers``).

        ``grace`` is the grace period of a graceful kind (pods; None: not graceful), ``finalizers`` computes the
        object's finalizers for this deletion (the garbage collector's ``orphan``/``foregroundDeletion``).
        Preconditions fail with 409. A deletion already pending can only be shortened; an object keeps existing,
        marked with ``deletionTimestamp``, while a grace period runs or finalizers remain.
        """
        with self._cond:
            key, current = self._to_delete(resource, namespace, name, uid, resource_version)
            new = copy.deepcopy(current)
            new_meta = new["metadata"]
            pending = new_meta.get("deletionGracePeriodSeconds")
            graceful = False
            if new_meta.get("deletionTimestamp") and pending:  # graceful deletion under way: only shortened
                if grace is None or grace >= pending:
                    return copy.deepcopy(current)
                deadline = parse_time(new_meta["deletionTimestamp"]) - datetime.timedelta(seconds=pending - grace)
                new_meta["deletionTimestamp"] = deadline.strftime("%Y-%m-%dT%H:%M:%SZ")
                new_meta["deletionGracePeriodSeconds"] = grace
                graceful = grace > 0
            elif not new_meta.get("deletionTimestamp") and grace:
                new_meta["deletionTimestamp"], new_meta["deletionGracePeriodSeconds"] = now(grace), grace
                graceful = True
            if finalizers is not None:
                wanted = finalizers(new)
                if set(wanted) != set(new_meta.get("finalizers") or []):
                    new_meta["finalizers"] = wanted
            if not new_meta.get("finalizers"):
                new_meta.pop("finalizers", None)
            if graceful or new_meta.get("finalizers"):
                if not new_meta.get("deletionTimestamp"):
                    new_meta["deletionTimestamp"], new_meta["deletionGracePeriodSeconds"] = now(), 0
                if new == current:
                    return copy.deepcopy(current)
                self._next_rv(new)
                self._objects[key] = new
                self._record("MODIFIED", resource, new, old=current)
                return copy.deepcopy(new)
            del self._objects[key]
            self._next_rv(current)
            self._record("DELETED", resource, current)
            return copy.deepcopy(current)

    # --- watch -------------------------------------------------------------------------

    def watch(self, resource: Resource, namespace: str | None, since: int, deadline: float,
              match: Callable[[Obj], bool], bookmark_every: float | None = None) -> Iterator[Event | int]:
        """Events after ``since`` until ``deadline`` (monotonic); yields an int rv for a bookmark.

        Raises ApiError 410 when ``since`` is older than the retained history.
        """
        with self._cond:
            oldest = self._history[0].rv if self._history else self._rv + 1
            if since < self._rv and since < oldest - 1:
                raise ApiError(410, "Expired", f"too old resource version: {since} ({oldest - 1})")
        position = since
        last_bookmark = time.monotonic()

        def after_position() -> list[Event]:  # under the lock
            if self._history and self._history[0].rv > position + 1:
                # The watcher fell behind the retained history: end it with 410 rather than skip events.
                raise ApiError(410, "Expired", f"too old resource version: {position} ({self._history[0].rv - 1})")
            return [e for e in self._history if e.rv > position]

        while not self._closed:
            bookmark = None
            with self._cond:
                pending = after_position()
                if not pending:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return
                    self._cond.wait(min(remaining, bookmark_every or remaining, 1.0))
                    pending = after_position()
                    if not pending and bookmark_every and time.monotonic() - last_bookmark >= bookmark_every:
                        last_bookmark = time.monotonic()
                        position = bookmark = max(position, self._rv)
            if bookmark is not None:  # yielded outside the lock: the consumer writes it to a socket
                yield bookmark
                continue
            for event in pending:
                position = event.rv
                if event.group != resource.group or event.plural != resource.plural:
                    continue
                ns = event.obj["metadata"].get("namespace")
                if namespace is not None and ns != namespace:
                    continue
                matches = match(event.obj)
                if event.old is not None and match(event.old) != matches:
                    # A selector watch sees an object enter or leave its selection (as the apiserver does).
                    yield dataclasses.replace(event, type="ADDED" if matches else "DELETED")
                elif matches:
                    yield event
            if time.monotonic() >= deadline:
                return

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

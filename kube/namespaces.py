"""Namespace labels from a watch, so that ``kubectl label namespace … kubenexus.io/gang-scheduling=…`` takes
effect at once instead of when a cached copy expires.

Each webhook worker (gunicorn loads the app after the fork, so the watch thread is the worker's own) watches
the namespaces that carry the label: a label-selector watch, from which the apiserver sends ADDED when a
namespace gains the label and DELETED when it loses it, so unrelated namespace writes never reach us and
what we hold is a few names and labels. Every namespace read of the decision is answered from it while a
watch is open: a label change is seen as soon as its event arrives (milliseconds on a healthy apiserver).
While no watch is open (before the first list, and from a failed or ended watch until the next one opens)
reads go to ``fallback``: ``ListedNamespaces`` (a LIST by name: the watch's own permission, so the webhook needs
no ``get`` on namespaces) through a cache of ``FALLBACK_TTL_SECONDS``, so a change is seen within that time there
too. A connection that dies without a close is noticed when a read on it times out
(``WATCH_SECONDS`` + 30 s), as with client-go's informers.

Why a watch rather than a short TTL: a TTL of N s costs every worker of every replica one GET per active
namespace every N s, on the admission path; the watch costs one LIST per worker start and a quiet stream.
"""

from __future__ import annotations

import threading
from typing import Any

from gang import keys
from gang.kinds import NAMESPACE, Kind
from gang.objects import Deadline, Obj, ObjectSource
from kube.informer import Informer
from kube.source import ApiSource

FALLBACK_TTL_SECONDS = 1.0  # how stale a namespace label may be while no watch is open
WATCH_SECONDS = 60  # each watch's timeoutSeconds: how often the stream is renewed


class ListedNamespaces:
    """An ObjectSource of Namespaces, each read by a LIST with a field selector on its name."""

    def __init__(self, api: ApiSource) -> None:
        self._api = api

    def get(self, kind: Kind, api_version: str, namespace: str | None, name: str,
            uid: str | None = None, deadline: Deadline | None = None) -> Obj | None:
        return self._api.list_named(kind, api_version, None, name, deadline)


class WatchedNamespaces:
    """An ObjectSource: Namespaces from the watch (or ``fallback`` while none is open), other kinds from ``inner``.

    A namespace the watch does not hold has no gang-scheduling label: it is answered as a Namespace with its
    name alone (whether it exists is not known here, and admission never needs it: the apiserver refuses
    creates in a namespace that does not exist before any webhook is called).
    """

    def __init__(self, api_client: Any, inner: ObjectSource, fallback: ObjectSource) -> None:
        self._inner, self._fallback = inner, fallback
        self._labelled: dict[str, Obj] = {}  # name -> {"metadata": {name, uid, labels}}; replaced, never mutated
        self._watching = False
        self.informer = Informer(api_client, "/api/v1/namespaces", self._on_event, label_selector=keys.GANG_SCHEDULING,
                                 timeout_seconds=WATCH_SECONDS, on_watching=self._on_watching)

    @property
    def watching(self) -> bool:
        """Whether namespace reads are answered from an open watch."""
        return self._watching

    def start(self) -> WatchedNamespaces:
        threading.Thread(target=self.informer.run, name="namespace-watch", daemon=True).start()
        return self

    def stop(self) -> None:
        self.informer.stop()

    def _on_watching(self, open_: bool) -> None:
        self._watching = open_

    def _on_event(self, kind: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        if kind == "DELETED":
            self._labelled.pop(name, None)
        else:
            slim = {k: meta[k] for k in ("name", "uid", "labels") if k in meta}
            self._labelled[name] = {"apiVersion": "v1", "kind": "Namespace", "metadata": slim}

    def get(self, kind: Kind, api_version: str, namespace: str | None, name: str,
            uid: str | None = None, deadline: Deadline | None = None) -> Obj | None:
        if kind != NAMESPACE:
            return self._inner.get(kind, api_version, namespace, name, uid, deadline)
        if not self._watching:
            return self._fallback.get(kind, api_version, namespace, name, uid, deadline)
        found = self._labelled.get(name)
        return found if found is not None else {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}

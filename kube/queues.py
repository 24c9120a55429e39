"""The Queues (``scheduling.kubenexus.io/v1alpha1``), from a watch in each webhook worker, for the warnings on roots
that name a Queue that does not exist or whose namespace two Queues select (``gang/validate.py`` ``queue_warnings``).

A list then a watch of every Queue (few, small: read through ``gang/queues.py`` ``parse_queue``, as the gate
controller reads them). Until the first list is in, what is known is nothing: a request waits for the first list's
outcome within its deadline (the first root a new worker sees), and past it, or while the list is refused or failing,
the warning says the Queue could not be checked rather than saying nothing. A cluster that does not serve Queues (the
CRD not installed: 404) has none, as for the controller (``controller/queues.py``). Once listed the watch keeps
what it holds current; a watch that breaks is renewed (and, after repeated failures, listed again) by the informer.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from gang.objects import Deadline, Obj
from gang.queues import GROUP, PLURAL, VERSION, QueueSpec, parse_queue
from kube.informer import Informer

WATCH_SECONDS = 300  # each watch's timeoutSeconds
NOT_SERVED = "HTTP 404"  # the informer's error for a resource the cluster does not serve


class WatchedQueues:
    """The Queues by name, once listed (``specs``)."""

    def __init__(self, api_client: Any) -> None:
        self._specs: dict[str, QueueSpec] = {}  # replaced, never mutated: readers on other threads take it whole
        self._listed = False
        self.problem = "not listed yet"  # why the Queues are not known, while they are not
        self._outcome = threading.Event()  # set by the first list's outcome, whatever it is
        self.informer = Informer(api_client, f"/apis/{GROUP}/{VERSION}/{PLURAL}", self._on_event,
                                 on_synced=self._on_synced, on_error=self._on_error, timeout_seconds=WATCH_SECONDS,
                                 backoff_max=30.0)

    def start(self) -> WatchedQueues:
        threading.Thread(target=self.informer.run, name="queue-watch", daemon=True).start()
        return self

    def stop(self) -> None:
        self.informer.stop()

    def specs(self, deadline: Deadline | None = None) -> Mapping[str, QueueSpec] | None:
        """The Queues, or None while they are not known (``problem`` says why); before the first list's outcome,
        waits for it within ``deadline``."""
        if not self._listed and deadline is not None and deadline.remaining() > 0:
            self._outcome.wait(deadline.remaining())
        return self._specs if self._listed else None

    def _on_synced(self) -> None:
        self._listed = True
        self._outcome.set()

    def _on_error(self, message: str) -> None:
        if not self._listed:
            if NOT_SERVED in message:  # no Queue CRD: no Queue; the informer keeps trying, for when there is one
                self._specs, self._listed = {}, True
            self.problem = message
        self._outcome.set()

    def _on_event(self, kind: str, obj: Obj) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        specs = dict(self._specs)
        if kind == "DELETED":
            specs.pop(name, None)
        else:
            specs[name] = parse_queue(obj)
        self._specs = specs

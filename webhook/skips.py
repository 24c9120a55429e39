"""Telling a job's author when admission leaves its pods alone for a reason they should hear of.

A skip with a warning (an operator-native gang scheduler, an invalid opt-in value, a pod bound by its creator, ...)
warns the pod's creator: that is the operator, which reads no warnings, not the user who applied the job. So the
webhook also records an Event on the job itself (``kubectl describe`` shows it), once per job per worker process: the
pods of one job are all left alone for the same reason, and the recorder's series counts repeats from other workers
and replicas. Nothing is recorded for a dry run (no side effects: the webhook declares ``sideEffects: None``).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Mapping
from typing import Any

REASON, ACTION = "GangSchedulingSkipped", "Admit"
REMEMBERED = 4096  # jobs told about, per worker (the oldest forgotten first; the recorder's own cache is as big, so a
# job told again after that is a new Event, not a series update: the webhook may only create Events)


class SkipNotices:
    def __init__(self, recorder: Any) -> None:
        self._recorder = recorder  # kube.events.EventRecorder
        self._told: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._lock = threading.Lock()

    def tell(self, root: Mapping[str, str], reason: str) -> None:
        """An Event on ``root`` saying why its pods are admitted without gang scheduling, unless told already."""
        key = root.get("uid") or f"{root.get('namespace')}/{root.get('kind')}/{root.get('name')}"
        with self._lock:
            if key in self._told:
                self._told.move_to_end(key)
                return
            self._told[key] = None
            if len(self._told) > REMEMBERED:
                self._told.popitem(last=False)
        note = f"{root.get('kind')} {root.get('name')}: KubeNexus admits its pods without gang scheduling: {reason}"
        if not self._recorder.record(dict(root), "Warning", REASON, note, ACTION):
            with self._lock:  # dropped (rate limit, full queue): the next pod of the job tells it
                self._told.pop(key, None)

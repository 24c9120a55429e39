"""What the controller knows of Queues and of the namespaces they select, from its watches (and ``simulate``'s
snapshot): the inputs of quota admission (``controller/quota.py``).

Fail closed: while the Queues cannot be listed (refused, failing), no gang is released, since any of them may belong
to a Queue whose quota is unknown; a cluster that does not serve Queues at all (the CRD not installed) has none.
Namespaces matter only to Queues with a ``namespaceSelector``: while those cannot be listed, the gangs such Queues
might hold wait (``gang/queues.py`` ``queue_of``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gang.queues import QueueProblem, QueueSpec, parse_queue, queue_of


class QueueInputs:
    """The Queues by name, the namespaces' labels, and whether each watch has listed."""

    def __init__(self) -> None:
        self.specs: dict[str, QueueSpec] = {}
        self.created: dict[str, str] = {}  # name -> creationTimestamp (a status is written for the Queue seen)
        self.labels: dict[str, dict[str, str]] = {}  # namespace -> labels
        self.problem: str | None = None  # why the Queues cannot be read; None once listed (or not served)
        self.namespaces_problem: str | None = None  # likewise for namespaces
        self.version = 0  # bumps on every change: a gang's queue may have changed

    def listing(self, problem: str) -> None:
        """The Queue watch's state: "" once listed; else why it cannot list."""
        self.problem = problem or None
        self.version += 1

    def listing_namespaces(self, problem: str) -> None:
        self.namespaces_problem = problem or None
        self.version += 1

    def upsert(self, obj: Mapping[str, Any]) -> None:
        spec = parse_queue(obj)
        self.specs[spec.name] = spec
        self.created[spec.name] = str((obj.get("metadata") or {}).get("creationTimestamp") or "")
        self.version += 1

    def delete(self, obj: Mapping[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        self.specs.pop(name, None)
        self.created.pop(name, None)
        self.version += 1

    def upsert_namespace(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        self.labels[str(meta.get("name") or "")] = dict(meta.get("labels") or {})
        self.version += 1

    def delete_namespace(self, obj: Mapping[str, Any]) -> None:
        self.labels.pop(str((obj.get("metadata") or {}).get("name") or ""), None)
        self.version += 1

    def queue_of(self, named: str | None, namespace: str) -> str | None | QueueProblem:
        """A gang's queue (``gang/queues.py``), or why it cannot be told from what is known."""
        if self.problem is not None:
            return QueueProblem(f"Queues cannot be read ({self.problem}): its quota is unknown")
        # a namespace not seen (not listed yet, or its event not here yet) has unknown labels: queue_of makes the gang
        # wait when a Queue selects by them, rather than guess it belongs to none
        found = queue_of(named, namespace, self.labels.get(namespace), self.specs)
        if isinstance(found, QueueProblem) and namespace not in self.labels and self.namespaces_problem:
            return QueueProblem(f"{found.reason} (namespaces cannot be listed: {self.namespaces_problem})")
        return found

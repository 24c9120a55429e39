"""One folder per operator kind, and the one registration of them.

``workloads/<kind>/`` holds everything about a kind: its record (``__init__.py``: resources, RBAC, webhook rules,
operators-table row, examples), its product adapters (``adapter.py``, imports only ``gang``), the emulator's operators
(``emulator.py``, imports only ``cluster``; absent when the emulator's built-in controllers run the kind) and
``examples/``. ``gang/adapters/table.py`` and ``cluster/operators/table.py`` load them for every name below, in
this order. This module imports no product or emulator code: both sides read it.
"""

from __future__ import annotations

import importlib

from workloads.record import Workload

#: The registration: a kind folder's name, in the order the adapter and operator tables list them (it matters
#: where two adapters serve one kind: the versioned MPIJob entries).
KINDS: tuple[str, ...] = ("spark", "training", "mpi", "jobset", "trainjob", "ray", "lws", "batch", "argo")


def records() -> dict[str, Workload]:
    """Every registered kind's record, by folder name, in registration order."""
    return {name: importlib.import_module(f"workloads.{name}").WORKLOAD for name in KINDS}

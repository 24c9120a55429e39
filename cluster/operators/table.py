"""The emulated operators and built-in controllers that turn root objects into pods, in one table.

Each entry is an ``Operator`` (a ``Loop`` with its own service-account identity) that reconciles one
root resource and creates children through the apiserver, so admission webhooks see every pod the
way a real cluster's operators send it. Behaviour follows each operator's own code and docs; the
shapes are summarised in /work/shared/operators.md. Operators whose CRD is not installed idle.

The built-in controllers are here; the operators are each registered kind's (``workloads.KINDS``)
``workloads/<kind>/emulator.py``, where there is one. Its own module, not ``cluster/operators/__init__.py``: an
operator module imports ``cluster.operators.base``, which must not load the table.
"""

from __future__ import annotations

import importlib
import importlib.util

from cluster.apiserver import ApiServer
from cluster.controllers import Loop
from cluster.operators.base import Operator
from cluster.operators.job import JobController
from cluster.operators.statefulset import StatefulSetController
from workloads import KINDS

OPERATORS: dict[str, type[Operator]] = {
    "job-controller": JobController,
    "statefulset-controller": StatefulSetController,
}
for _name in KINDS:
    if importlib.util.find_spec(f"workloads.{_name}.emulator") is not None:
        OPERATORS.update(importlib.import_module(f"workloads.{_name}.emulator").OPERATORS)


def start_operators(api: ApiServer, names: list[str] | None = None) -> list[Loop]:
    """Start the operators in ``names`` (default: all of ``OPERATORS``); the caller ``stop()``s them."""
    loops: list[Loop] = []
    for name in names if names is not None else OPERATORS:
        loop = OPERATORS[name](api)
        loop.name = name
        loop.start()
        loops.append(loop)
    return loops

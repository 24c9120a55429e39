"""The adapter table: every registered kind's adapters (``workloads.KINDS``), in registration order.

Its own module, not ``gang/adapters/__init__.py``: an adapter module imports ``gang.adapters.base``, which must not
load the table (importing an adapter module first would find itself half-initialised).
"""

from __future__ import annotations

import importlib

from gang.adapters.base import WorkloadAdapter
from gang.kinds import split_api_version
from workloads import KINDS, records
from workloads.record import Resource as RootResource

__all__ = ["ADAPTERS", "ROOT_RESOURCES", "RootResource", "adapter_for"]

ADAPTERS: tuple[WorkloadAdapter, ...] = tuple(
    adapter for name in KINDS for adapter in importlib.import_module(f"workloads.{name}.adapter").ADAPTERS)

_BY_KIND: dict[tuple[str, str, str | None], WorkloadAdapter] = {}
for _adapter in ADAPTERS:
    for _version in _adapter.api_versions or (None,):
        _BY_KIND[(_adapter.kind.group, _adapter.kind.kind, _version)] = _adapter


def adapter_for(api_version: str, kind: str) -> WorkloadAdapter | None:
    """The adapter for a root kind; versioned entries (MPIJob v1 vs v2beta1) win."""
    group, version = split_api_version(api_version)
    return _BY_KIND.get((group, kind, version)) or _BY_KIND.get((group, kind, None))

#: Every root resource of the registered kinds (group, the version the records name, kind, plural): the gate
#: controller watches them for the constraints on roots (``controller/root_watch.py``).
ROOT_RESOURCES: tuple[RootResource, ...] = tuple(root for record in records().values() for root in record.roots)

"""Minimal CustomResourceDefinitions for the operators' root kinds, as the emulator serves them.

The kinds are the registered records' (``workloads/<kind>/__init__.py``, ``Workload.crds``). Names, group and
served version match each operator's own CRD (MPIJob as mpi-operator's v2beta1); the schema preserves unknown
fields, since the emulator does not validate custom resources, and every kind has the status subresource its
controller writes through.
"""

from __future__ import annotations

from typing import Any

from workloads import records


def crd_manifest(group: str, version: str, kind: str, plural: str, short_names: tuple[str, ...] = (),
                 namespaced: bool = True) -> dict[str, Any]:
    names: dict[str, Any] = {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()}
    if short_names:
        names["shortNames"] = list(short_names)
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "names": names, "scope": "Namespaced" if namespaced else "Cluster",
                 "versions": [{"name": version, "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object",
                                                              "x-kubernetes-preserve-unknown-fields": True}},
                               "subresources": {"status": {}}}]},
    }


def crd_manifests() -> list[dict[str, Any]]:
    """One CRD per supported root kind (plus the trainer's runtimes, which TrainJobs reference)."""
    return [crd_manifest(r.group, r.version, r.kind, r.plural, r.short_names, r.namespaced)
            for record in records().values() for r in record.crds()]

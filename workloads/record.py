"""What the product and the emulator need to know about one operator kind, as pure data.

Both sides read a kind's record (``workloads/<kind>/__init__.py``): the RBAC and webhook rules in ``deploy/base``,
the emulator's CRD list (``cluster/crds.py``) and the docs' operator table (``docs/reference/operators.md``) are
checked against it (or generated from it) by ``tests/test_workloads.py``. It imports nothing, so reading it pulls in
neither side's code.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    """One API resource of the kind.

    ``version`` is the one the emulator's CRD serves (and the adapters' version, when they serve only some);
    ``crd`` is False when the emulator needs no CRD of this record for it: built-in kinds (batch Job, CronJob)
    and a version another record's CRD serves (MPIJob ``kubeflow.org/v1``: the emulator serves mpi-operator's
    v2beta1).
    """

    group: str
    version: str
    kind: str
    plural: str
    short_names: tuple[str, ...] = ()
    namespaced: bool = True
    crd: bool = True


@dataclass(frozen=True)
class Row:
    """A row of the "Supported operators" table (docs/reference/operators.md)."""

    kinds: str
    gang: str
    staged: str


@dataclass(frozen=True)
class Example:
    """Files in ``workloads/<kind>/examples/``: a pod and the objects ``kubenexus explain`` reads for it, with the
    action and gang name it documents (``tests/test_examples.py`` runs it)."""

    pod: str
    objects: str
    action: str
    group: str | None


@dataclass(frozen=True)
class Workload:
    """One operator kind.

    ``roots``: the root resources its adapters serve; the webhook and the controller read them with
    ``webhook_verbs`` / ``controller_verbs`` (``deploy/base/rbac.yaml``; the controller also watches them), and
    with ``validated`` the validating webhook checks their ``kubenexus.io/*`` annotations
    (``deploy/base/webhookconfigurations.yaml``).
    ``companions``: other custom resources the operator reads, served by the emulator, never roots (the
    trainer's runtimes).
    """

    roots: tuple[Resource, ...]
    readme: tuple[Row, ...]
    companions: tuple[Resource, ...] = ()
    webhook_verbs: tuple[str, ...] = ("get", "list", "watch")
    controller_verbs: tuple[str, ...] = ("get", "list", "watch")
    validated: bool = True
    examples: tuple[Example, ...] = ()

    def crds(self) -> tuple[Resource, ...]:
        """The resources the emulator serves through a CRD of this record."""
        return tuple(r for r in (*self.roots, *self.companions) if r.crd)

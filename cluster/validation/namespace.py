"""A Namespace's ``spec.finalizers`` (``pkg/apis/core/validation/validation.go``: ``ValidateNamespace`` on create,
``ValidateNamespaceFinalizeUpdate`` on ``/finalize``; ``validateFinalizerName``): each a qualified name, and one
without a ``/`` prefix must be a standard finalizer. ``ValidateNamespace`` reports them all at
``spec.finalizers``, the finalize update at ``spec.finalizers[i]``. (An update of the namespace itself cannot
change them: the strategy keeps the stored ones.)"""

from __future__ import annotations

from cluster.store import Obj
from cluster.validation.errors import invalid
from cluster.validation.names import qualified_name

#: ``standardFinalizers`` (``pkg/apis/core/helper``): the namespace's and the garbage collector's
STANDARD_FINALIZERS = ("kubernetes", "orphan", "foregroundDeletion")


def _finalizer_name(name: str, path: str) -> list[str]:
    errs = [invalid(path, name, m) for m in qualified_name(name)]
    if "/" not in name and name not in STANDARD_FINALIZERS:
        errs.append(invalid(path, name, "name is neither a standard finalizer name nor is it fully qualified"))
    return errs


def validate_namespace_finalizers(namespace: Obj, indexed: bool) -> list[str]:
    """The errors of ``spec.finalizers``; ``indexed`` as the finalize update names them. Empty list: valid."""
    spec = namespace.get("spec")
    finalizers = spec.get("finalizers") if isinstance(spec, dict) else None
    return [e for i, name in enumerate(finalizers if isinstance(finalizers, list) else [])
            for e in _finalizer_name(str(name), f"spec.finalizers[{i}]" if indexed else "spec.finalizers")]

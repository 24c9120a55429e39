"""What the apiserver refuses while decoding a pod body, before any validation runs (400, never 422)."""

from __future__ import annotations

from typing import Any

from cluster.quantity import QuantityError, parse_quantity
from cluster.store import Obj


def _resource_lists(pod: Obj) -> list[tuple[str, dict[str, Any]]]:
    """(path, ResourceList) for every quantity map in a pod: container requests/limits and overhead."""
    spec = pod.get("spec") or {}
    lists = [("spec.overhead", spec.get("overhead") or {})]
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for i, ctr in enumerate(spec.get(kind) or []):
            res = (ctr or {}).get("resources") or {}
            lists += [(f"spec.{kind}[{i}].resources.{part}", res.get(part) or {}) for part in ("limits", "requests")]
    return lists


def decode_errors(pod: Obj) -> list[str]:
    """What the apiserver refuses while decoding the body, before validation: answer these with 400 BadRequest.

    A quantity that does not parse, or a label/annotation value that is not a string, cannot become a Go
    object, so the real request fails as BadRequest ("... cannot be handled as a Pod: ..."), never 422.
    """
    errs: list[str] = []
    meta = pod.get("metadata") or {}
    for part in ("labels", "annotations"):
        for key, value in (meta.get(part) or {}).items():
            if not isinstance(value, str):
                errs.append(f"metadata.{part}[{key}]: cannot unmarshal {type(value).__name__} into a string")
    for path, resources in _resource_lists(pod):
        for name, raw in resources.items():
            if raw is None:
                continue
            try:
                parse_quantity(raw)
            except QuantityError as exc:
                errs.append(f"{path}[{name}]: {exc}")
    return errs

"""Label selectors as the apiserver evaluates them (``k8s.io/apimachinery/pkg/labels``): the requirements of
``metav1.LabelSelector`` and of node selector terms. Shared by the gate controller's filters, its PodDisruptionBudget
and Queue selectors, and the webhook's Queue warnings."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]
_INT64 = re.compile(r"[+-]?[0-9]+")


def int64(text: Any) -> int | None:
    """Go's strconv.ParseInt(s, 10, 64): optional sign, decimal digits, nothing else, in range."""
    if not isinstance(text, str) or not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def label_requirement(expr: Obj) -> tuple[str, str, tuple[str, ...]] | None:
    """labels.NewRequirement's checks: value counts per operator and int64 values for Gt/Lt."""
    key, operator = expr.get("key") or "", expr.get("operator") or ""
    values = tuple(str(v) for v in expr.get("values") or ())
    if operator in ("In", "NotIn"):
        ok = len(values) > 0
    elif operator in ("Exists", "DoesNotExist"):
        ok = len(values) == 0
    elif operator in ("Gt", "Lt"):
        ok = len(values) == 1 and int64(values[0]) is not None
    else:
        ok = False
    return (key, operator, values) if ok and key else None


def label_matches(labels: Mapping[str, str], key: str, operator: str, values: tuple[str, ...]) -> bool:
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    actual = int64(labels.get(key))
    if actual is None:  # absent or not an integer: Gt/Lt don't match
        return False
    bound = int(values[0])
    return actual > bound if operator == "Gt" else actual < bound


def selector_matches(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    """A ``metav1.LabelSelector`` (``LabelSelectorAsSelector``): matchLabels and matchExpressions (In, NotIn, Exists,
    DoesNotExist) all hold; an empty selector matches everything, None nothing, an invalid one nothing."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        requirement = label_requirement(expr) if isinstance(expr, dict) else None
        if requirement is None or requirement[1] in ("Gt", "Lt") or not label_matches(labels, *requirement):
            return False
    return True

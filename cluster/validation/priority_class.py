"""PriorityClass validation (``pkg/apis/scheduling/validation/validation.go``: ``ValidatePriorityClass``,
``ValidatePriorityClassUpdate``, both run on update by the strategy) and ``IsKnownSystemPriorityClass``
(``pkg/apis/scheduling/helpers.go``): a ``system-`` name only for the system classes exactly as they are, a user
class at most 1,000,000,000, ``preemptionPolicy`` PreemptLowerPriority or Never; ``value`` and
``preemptionPolicy`` never change."""

from __future__ import annotations

from cluster.priority import (
    HIGHEST_USER_DEFINABLE_PRIORITY,
    PREEMPT_LOWER_PRIORITY,
    PREEMPT_NEVER,
    SYSTEM_PRIORITY_CLASS_PREFIX,
    SYSTEM_PRIORITY_CLASSES,
)
from cluster.store import Obj
from cluster.validation.errors import forbidden, invalid, not_supported, required
from cluster.validation.meta import object_meta_update_errors, validate_object_meta


def _system_class_error(name: str, value: object, global_default: bool) -> str | None:
    """``IsKnownSystemPriorityClass``'s error, or None for a system class exactly as defined."""
    if name not in SYSTEM_PRIORITY_CLASSES:
        return f"{name} is not a known system priority class"
    expected = SYSTEM_PRIORITY_CLASSES[name][0]
    if value != expected:
        return f"value of {name} PriorityClass must be {expected}"
    if global_default:
        return f"globalDefault of {name} PriorityClass must be false"
    return None


def validate_priority_class(pc: Obj) -> list[str]:
    """``ValidatePriorityClass``. Empty list: valid."""
    errs = validate_object_meta(pc, namespaced=False)
    name, value = str((pc.get("metadata") or {}).get("name") or ""), pc.get("value") or 0
    if name.startswith(SYSTEM_PRIORITY_CLASS_PREFIX):
        error = _system_class_error(name, value, bool(pc.get("globalDefault")))
        if error:
            errs.append(forbidden("metadata.name", f"priority class names with '{SYSTEM_PRIORITY_CLASS_PREFIX}' "
                                                   f"prefix are reserved for system use only. error: {error}"))
    elif isinstance(value, int) and value > HIGHEST_USER_DEFINABLE_PRIORITY:
        errs.append(forbidden("value", f"maximum allowed value of a user defined priority is "
                                       f"{HIGHEST_USER_DEFINABLE_PRIORITY}"))
    policy = pc.get("preemptionPolicy")
    if policy == "":
        errs.append(required("preemptionPolicy"))
    elif policy is not None and policy not in (PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER):
        errs.append(not_supported("preemptionPolicy", policy, [PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER]))
    return errs


def validate_priority_class_update(new: Obj, old: Obj) -> list[str]:
    """``ValidatePriorityClass`` then ``ValidatePriorityClassUpdate``. Empty list: valid."""
    errs = validate_priority_class(new) + object_meta_update_errors(new.get("metadata") or {},
                                                                    old.get("metadata") or {})
    if (new.get("value") or 0) != (old.get("value") or 0):
        errs.append(forbidden("value", "may not be changed in an update."))
    if new.get("preemptionPolicy") != old.get("preemptionPolicy"):
        errs.append(invalid("preemptionPolicy", new.get("preemptionPolicy"), "field is immutable"))
    return errs

"""A Job's pod failure policy and replacement policy as ``validateJobSpec`` checks them
(``pkg/apis/batch/validation/validation.go``: ``validatePodFailurePolicy``, ``validatePodFailurePolicyRule``,
``validatePodFailurePolicyRuleOnExitCodes``, ``validatePodFailurePolicyRuleOnPodConditions``,
``validatePodReplacementPolicy`` and the template's restartPolicy).

Only these rules are ported, and the template's restartPolicy is checked only for a Job with a podFailurePolicy
(upstream refuses Always for every Job): the emulator never refuses a Job a cluster accepts. Values the apiserver
defaults first (``podReplacementPolicy``, a pattern's ``status``) are defaulted in ``cluster/defaults.py``.
"""

from __future__ import annotations

from typing import Any

from cluster.store import Obj
from cluster.validation.errors import duplicate, invalid, not_supported, required
from cluster.validation.names import qualified_name

MAX_RULES, MAX_EXIT_CODES, MAX_PATTERNS = 20, 255, 20
ACTIONS = ["Count", "FailIndex", "FailJob", "Ignore"]
OPERATORS = ["In", "NotIn"]
STATUSES = ["False", "True", "Unknown"]


def _go_list(values: list[str]) -> str:
    """``fmt.Sprintf("%q", []string{...})``."""
    return "[" + " ".join(f'"{v}"' for v in values) + "]"


def _too_many(path: str, count: int, limit: int) -> str:
    return f"{path}: Too many: {count}: must have at most {limit} items"


def _on_exit_codes(rule: Obj, path: str, containers: set[str]) -> list[str]:
    errs: list[str] = []
    operator = rule.get("operator") or ""
    if not operator:
        errs.append(required(f"{path}.operator", f"valid values: {_go_list(OPERATORS)}"))
    elif operator not in OPERATORS:
        errs.append(not_supported(f"{path}.operator", operator, OPERATORS))
    name = rule.get("containerName")
    if name is not None and name not in containers:
        errs.append(invalid(f"{path}.containerName", name,
                            "must be one of the container or initContainer names in the pod template"))
    values: list[Any] = list(rule.get("values") or [])
    if not values:
        errs.append(invalid(f"{path}.values", values, "at least one value is required"))
    elif len(values) > MAX_EXIT_CODES:
        errs.append(_too_many(f"{path}.values", len(values), MAX_EXIT_CODES))
    seen: set[Any] = set()
    for index, value in enumerate(values):
        if operator == "In" and value == 0:
            errs.append(invalid(f"{path}.values[{index}]", value, "must not be 0 for the In operator"))
        if value in seen:
            errs.append(duplicate(f"{path}.values[{index}]", value))
        seen.add(value)
    if any(earlier > later for earlier, later in zip(values, values[1:], strict=False)):
        errs.append(invalid(f"{path}.values", values, "must be ordered"))
    return errs


def _on_pod_conditions(patterns: list[Obj], path: str) -> list[str]:
    errs = [_too_many(path, len(patterns), MAX_PATTERNS)] if len(patterns) > MAX_PATTERNS else []
    for index, pattern in enumerate(patterns):
        at, kind, status = f"{path}[{index}]", str(pattern.get("type") or ""), pattern.get("status") or ""
        errs += [invalid(f"{at}.type", kind, m) for m in qualified_name(kind)]
        if not status:
            errs.append(required(f"{at}.status", f"valid values: {_go_list(STATUSES)}"))
        elif status not in STATUSES:
            errs.append(not_supported(f"{at}.status", status, STATUSES))
    return errs


def _rule(spec: Obj, rule: Obj, path: str, containers: set[str]) -> list[str]:
    errs: list[str] = []
    action = rule.get("action") or ""
    if not action:
        errs.append(required(f"{path}.action", f"valid values: {_go_list(ACTIONS)}"))
    elif action == "FailIndex":
        if spec.get("backoffLimitPerIndex") is None:
            errs.append(invalid(f"{path}.action", action, "requires the backoffLimitPerIndex to be set"))
    elif action not in ACTIONS:
        errs.append(not_supported(f"{path}.action", action, ACTIONS))
    exit_codes, conditions = rule.get("onExitCodes"), rule.get("onPodConditions") or []
    if exit_codes is not None:
        errs += _on_exit_codes(exit_codes, f"{path}.onExitCodes", containers)
    if conditions:
        errs += _on_pod_conditions(conditions, f"{path}.onPodConditions")
    if exit_codes is not None and conditions:  # field.OmitValueType: no value printed
        errs.append(f"{path}: Invalid value: specifying both OnExitCodes and OnPodConditions is not supported")
    if exit_codes is None and not conditions:
        errs.append(f"{path}: Invalid value: specifying one of OnExitCodes and OnPodConditions is required")
    return errs


def validate_job_policies(job: Obj) -> list[str]:
    """The podFailurePolicy, podReplacementPolicy and (with a podFailurePolicy) restartPolicy rules. Empty list:
    valid."""
    spec = job.get("spec") or {}
    policy = spec.get("podFailurePolicy")
    template = (spec.get("template") or {}).get("spec") or {}
    errs: list[str] = []
    if policy is not None:
        rules = policy.get("rules") or []
        if len(rules) > MAX_RULES:
            errs.append(_too_many("spec.podFailurePolicy.rules", len(rules), MAX_RULES))
        containers = {c.get("name") for key in ("containers", "initContainers") for c in template.get(key) or []}
        for index, rule in enumerate(rules):
            errs += _rule(spec, rule, f"spec.podFailurePolicy.rules[{index}]", containers)
    replacement = spec.get("podReplacementPolicy")
    if replacement is not None and policy is not None and replacement != "Failed":
        errs.append(not_supported("spec.podReplacementPolicy", replacement, ["Failed"]))
    elif replacement is not None and policy is None and replacement not in ("Failed", "TerminatingOrFailed"):
        errs.append(not_supported("spec.podReplacementPolicy", replacement, ["Failed", "TerminatingOrFailed"]))
    if policy is not None:
        restart, path = template.get("restartPolicy") or "", "spec.template.spec.restartPolicy"
        if restart in ("Always", ""):
            errs.append(required(path, 'valid values: "OnFailure", "Never"'))
        elif restart not in ("OnFailure", "Never"):
            errs.append(not_supported(path, restart, ["OnFailure", "Never"]))
        elif restart != "Never":
            errs.append(invalid(path, restart, 'only "Never" is supported when podFailurePolicy is specified'))
    return errs

"""Deciding a pod's gang at admission: owner walk + opt-in rules + the root kind's adapter, or the PodGroup a pod
without a supported root names.

This is the one place that knows the opt-in rules (root annotation, namespace label,
``autoInject``, explicit pod labels, user-created PodGroups) and the fallbacks when something is missing. It reads
objects only through the given source and never mutates anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from gang import keys
from gang.adapters.base import Chain, ExpectedMember, Membership
from gang.config import Config
from gang.kinds import NAMESPACE, POD_GROUP, split_api_version
from gang.names import MAX_LABEL_VALUE, is_label_value, label_value
from gang.objects import Deadline, LookupFailed, Obj, ObjectSource
from gang.owners import Outcome, walk_owners
from gang.validate import Denial, check_pod_group_member


class Action(Enum):
    SKIP = "skip"  # admit unchanged
    GANG = "gang"  # label, gate and point at the gang scheduler
    UNRESOLVED = "unresolved"  # gate and mark for the controller: we could not find out


@dataclass(frozen=True)
class Decision:
    action: Action
    reasons: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    group: str = ""
    size: int = 0
    owner: str = ""
    owner_uid: str = ""
    expected: tuple[ExpectedMember, ...] = ()
    unresolved: str = ""
    # The owner walk failed on a pod an earlier pass made a member (reinvocation): its owner keys are kept unverified.
    kept: bool = False
    # The name of the user-created PodGroup whose explicit gang this is (owner and owner-uid are the PodGroup's).
    pod_group: str = ""
    # Why admission refuses the pod though it knows its gang: its own min-available contradicts its PodGroup's.
    denial: Denial | None = None
    # A root whose pod is left alone for a reason its author should hear of (a skip with a warning): an
    # ObjectReference to it, for an Event on the root (the pod's creator is the operator, who reads no warnings).
    skipped_root: Mapping[str, str] | None = None


# Outcomes where the pod simply is not a gang workload, and where something looks wrong.
_QUIET = {Outcome.NO_OWNER, Outcome.NO_ROOT, Outcome.NON_BATCH}
_SUSPICIOUS = {Outcome.UNKNOWN_KIND, Outcome.MISSING, Outcome.CYCLE, Outcome.TOO_DEEP, Outcome.INVALID_REF}


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _positive_int(value: Any) -> int | None:
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        return None
    return number if number >= 1 else None


def reference(obj: Obj, namespace: str) -> dict[str, str]:
    """An ObjectReference to ``obj`` (in ``namespace``), for an Event about it."""
    meta = _dict(obj.get("metadata"))
    return {"apiVersion": str(obj.get("apiVersion") or ""), "kind": str(obj.get("kind") or ""),
            "name": str(meta.get("name") or ""), "namespace": namespace, "uid": str(meta.get("uid") or "")}


def owner_string(root: Obj) -> str:
    group, version = split_api_version(str(root.get("apiVersion", "")))
    return f"{group}/{version}/{root.get('kind')}/{_dict(root.get('metadata')).get('name')}"


def trim_expected(expected: tuple[ExpectedMember, ...], full: int, size: int) -> tuple[ExpectedMember, ...]:
    """Keep only the later members needed to reach ``size`` (later stages are dropped first)."""
    budget = max(0, size - (full - sum(e.count for e in expected)))
    kept = []
    for member in expected:
        count = min(member.count, budget)
        budget -= count
        if count:
            kept.append(replace(member, count=count))
    return tuple(kept)


class _Decider:
    def __init__(self, pod: Obj, namespace: str, source: ObjectSource, config: Config,
                 deadline: Deadline | None) -> None:
        self.pod, self.namespace, self.source, self.config = pod, namespace, source, config
        self.deadline = deadline
        meta = _dict(pod.get("metadata"))
        self.labels, self.annotations = _dict(meta.get("labels")), _dict(meta.get("annotations"))
        self.explicit_name = self.labels.get(keys.POD_GROUP_LABEL) or self.annotations.get(
            keys.COSCHED_GROUP_ANNOTATION)
        self.explicit_size = self.labels.get(keys.POD_GROUP_MIN_LABEL) or self.annotations.get(
            keys.COSCHED_MIN_ANNOTATION)
        self.reasons: list[str] = []
        self.warnings: list[str] = []
        self.root: Obj | None = None  # once the owner walk reached it

    def skip(self, reason: str, warn: bool = False) -> Decision:
        self.reasons.append(reason)
        if warn:
            self.warnings.append(f"kubenexus: pod admitted without gang scheduling: {reason}")
        return Decision(Action.SKIP, tuple(self.reasons), tuple(self.warnings),
                        skipped_root=reference(self.root, self.namespace) if warn and self.root is not None else None)

    def unresolved(self, reason: str) -> Decision:
        node = _dict(self.pod.get("spec")).get("nodeName")
        if node:  # the apiserver rejects a gate on a bound pod: admit it ungated, loudly
            return self.skip(f"pod is already bound to node {node}; a gate cannot be added ({reason})", warn=True)
        self.reasons.append(f"owner lookup failed, gated for the gate controller to resolve: {reason}")
        return Decision(Action.UNRESOLVED, tuple(self.reasons), tuple(self.warnings), unresolved=reason[:1024])

    def _topology(self, root_annotations: Mapping[str, Any]) -> None:
        """The root's topology requests, for ``explain``: the gate controller plans the gang inside their domains."""
        for key, how in ((keys.TOPOLOGY_REQUIRED, "in one domain"), (keys.TOPOLOGY_PREFERRED, "in as few domains as "
                                                                    "possible, else anywhere")):
            value = root_annotations.get(key)
            if isinstance(value, str) and value:
                self.reasons.append(f"topology ({key}): every member {how} of node label {value}")
                return
        value = root_annotations.get(keys.JOBSET_EXCLUSIVE_TOPOLOGY)
        if isinstance(value, str) and value:
            self.reasons.append(f"topology ({keys.JOBSET_EXCLUSIVE_TOPOLOGY}): each child Job in a domain of node "
                                f"label {value} of its own")
        for key, value in sorted(root_annotations.items()):
            role = key.removeprefix(keys.TOPOLOGY_REQUIRED_ROLE_PREFIX)
            if role != key and isinstance(value, str) and value:
                self.reasons.append(f"topology ({key}): the {role} members in one domain of node label {value}")

    def gang(self, membership: Membership, root: Obj | None, pod_group: bool = False) -> Decision:
        override = None
        if root is not None and not pod_group:
            root_annotations = _dict(_dict(root.get("metadata")).get("annotations"))
            override = _positive_int(root_annotations.get(keys.MIN_AVAILABLE))
            if keys.MIN_AVAILABLE in root_annotations and override is None:
                self.warnings.append(f"kubenexus: ignoring invalid {keys.MIN_AVAILABLE}="
                                     f"{root_annotations[keys.MIN_AVAILABLE]!r} on the root object")
            if override and membership.pod_total and override > membership.pod_total:
                self.warnings.append(f"kubenexus: {keys.MIN_AVAILABLE}={override} is larger than the "
                                     f"{membership.pod_total} pods the root creates; the gang cannot complete")
            name = self.explicit_name or root_annotations.get(keys.GROUP_NAME) or membership.group
            self._topology(root_annotations)
        else:
            name = self.explicit_name or ""
        # A PodGroup's minMember is the size; the pod's own min-available must agree (denied otherwise: ``denial``).
        size = membership.size if pod_group else _positive_int(self.explicit_size) or override or membership.size or 1
        if not is_label_value(str(size)):  # the apiserver would reject the pod with this min-available label
            return self.skip(f"gang size {size} has more than {MAX_LABEL_VALUE} digits", warn=True)
        self.reasons.append(membership.reason)
        self.reasons.append(f"gang {label_value(name)} of {size} member(s)")
        return Decision(
            Action.GANG,
            tuple(self.reasons),
            tuple(self.warnings),
            group=label_value(name),
            size=size,
            owner=owner_string(root) if root is not None else "",
            owner_uid=str(_dict(root.get("metadata")).get("uid") or "") if root is not None else "",
            expected=() if membership.late else trim_expected(membership.expected, membership.pod_total, size),
            pod_group=name if pod_group else "",
        )

    def namespace_label(self) -> str | None:
        ns = self.source.get(NAMESPACE, "v1", None, self.namespace, deadline=self.deadline)
        return _dict(_dict((ns or {}).get("metadata")).get("labels")).get(keys.GANG_SCHEDULING)

    def decide(self) -> Decision:
        if self.config.is_excluded(self.namespace):
            return self.skip(f"namespace {self.namespace} is excluded from gang scheduling")
        walk = walk_owners(self.pod, self.namespace, self.source, self.deadline)
        explicit = Membership(True, "explicit pod-group labels on the pod", self.explicit_name or "", 0)
        if walk.outcome is Outcome.FAILED:
            if self.explicit_name and keys.OWNER_ANNOTATION in self.annotations:
                return self.kept(explicit)
            return self.unresolved(walk.detail)
        if walk.outcome is not Outcome.ROOT:
            if not self.explicit_name:
                return self.skip(walk.detail, warn=walk.outcome in _SUSPICIOUS)
            if walk.outcome in _SUSPICIOUS:
                self.warnings.append(f"kubenexus: {walk.detail}; using the pod's explicit pod-group labels")
            return self.namespace_rules(None) or self.explicit_gang(explicit)
        assert walk.adapter is not None
        root = self.root = walk.chain[-1]
        if refused := self.namespace_rules(root):
            return refused
        if (native := walk.adapter.native_scheduler(root)) is not None:
            return self.skip(f"{native}: its own gang scheduler schedules its pods, not KubeNexus (remove that "
                             "setting to have KubeNexus gang-schedule it)", warn=True)
        membership = walk.adapter.membership(self.pod, Chain(walk.chain))
        if not membership.member:
            return self.finish(explicit, root) if self.explicit_name else self.skip(membership.reason, warn=True)
        return self.finish(membership, root)

    def kept(self, explicit: Membership) -> Decision:
        """Reinvocation of a pod an earlier pass made a member, now that a read fails: keep its gang (its labels and
        owner keys, unverified), add no "unresolved" marker."""
        decision = self.finish(explicit, None)
        return replace(decision, kept=True) if decision.action is Action.GANG else decision

    def explicit_gang(self, explicit: Membership) -> Decision:
        """A pod without a supported root that names its gang: a member of the PodGroup of that name in its
        namespace when one exists (sized by its ``spec.minMember``; the pod's own min-available must agree), else
        the gang its own labels describe (min-available, default 1), as before PodGroups existed."""
        name = self.explicit_name
        if not (isinstance(name, str) and is_label_value(name)):  # the validating webhook refuses such a name
            return self.finish(explicit, None)
        where = f"PodGroup {self.namespace}/{name}"
        try:
            group = self.source.get(POD_GROUP, keys.PODGROUP_API_VERSION, self.namespace, name,
                                    deadline=self.deadline)
        except LookupFailed as exc:
            if keys.OWNER_ANNOTATION in self.annotations:
                return self.kept(explicit)
            return self.unresolved(f"reading {where}: {exc}")
        problem = self.not_explicit(group, where)
        if problem is not None:
            reason, warning = problem
            self.reasons.append(f"{reason}: sized by the pod's own labels")
            decision = self.finish(explicit, None)
            if warning and decision.action is Action.GANG:
                return replace(decision, warnings=(*decision.warnings, f"kubenexus: {warning}"))
            return decision
        assert group is not None
        min_member = _dict(group.get("spec"))["minMember"]
        member = Membership(True, f"member of {where} (spec.minMember {min_member})", name, min_member)
        decision = self.finish(member, group, pod_group=True)
        if decision.action is Action.GANG and (denial := check_pod_group_member(self.pod, group)) is not None:
            return replace(decision, denial=denial)
        return decision

    def not_explicit(self, group: Obj | None, where: str) -> tuple[str, str] | None:
        """Why ``group`` (the PodGroup the pod names, or None) does not make the pod a member of an explicit gang, and
        the warning for a member of the gang its labels describe ("" for none), or None when it does."""
        if group is None:
            warning = "" if self.explicit_size else (
                f"{where} does not exist and the pod sets no {keys.POD_GROUP_MIN_LABEL}: it is a gang of 1 and "
                "starts alone; create the PodGroup before its pods")
            return f"no {where}", warning
        labels = _dict(_dict(group.get("metadata")).get("labels"))
        if labels.get(keys.MANAGED_BY_LABEL) == keys.MANAGED_BY_CONTROLLER:  # it shows a gang, it does not make one
            root = f"{labels.get(keys.ROOT_KIND_LABEL)} {labels.get(keys.ROOT_NAME_LABEL)}"
            return (f"{where} is the gate controller's",
                    f"{where} is the gate controller's, for the gang of {root}; a pod without that root is not "
                    "its member" if keys.ROOT_KIND_LABEL in labels else "")
        min_member = _dict(group.get("spec")).get("minMember")
        if isinstance(min_member, bool) or not isinstance(min_member, int) or min_member < 1:
            return f"{where} is invalid", f"ignoring {where}: spec.minMember {min_member!r} is not an integer ≥ 1"
        return None

    def namespace_rules(self, root: Obj | None) -> Decision | None:
        """Opt-in and opt-out, most specific first: pod labels, root annotation, namespace, config."""
        try:
            ns_label = self.namespace_label()
        except LookupFailed as exc:
            return self.unresolved(f"reading namespace {self.namespace}: {exc}")
        if ns_label != keys.NAMESPACE_DISABLED and (self.explicit_name or root is None):
            return None
        opted, reason, warn = root_opt_in(root, self.namespace, ns_label, self.config)
        if not opted:
            return self.skip(reason, warn=warn)
        self.reasons.append(reason)
        return None

    def finish(self, membership: Membership, root: Obj | None, pod_group: bool = False) -> Decision:
        """Last checks for what a gate would break: a bound pod, or a native gang scheduler."""
        spec = _dict(self.pod.get("spec"))
        if spec.get("nodeName"):
            return self.skip(f"pod is already bound to node {spec['nodeName']}; a gate cannot be added", warn=True)
        markers = [k for k in keys.NATIVE_GANG_POD_MARKERS if k in self.labels or k in self.annotations]
        if spec.get("schedulerName") in self.config.native_gang_schedulers:
            markers.append(f"schedulerName {spec['schedulerName']}")
        if markers:
            return self.skip(f"pod is gang-scheduled natively ({', '.join(markers)})", warn=True)
        return self.gang(membership, root, pod_group)


def root_opt_in(root: Obj | None, namespace: str, ns_label: str | None, config: Config) -> tuple[bool, str, bool]:
    """Whether the pods of ``root`` in ``namespace`` (labelled ``ns_label``) are gang-scheduled, why, and whether the
    reason deserves a warning: the namespace's opt-out, the root's annotation, the namespace's opt-in, the config.
    (A namespace the config excludes is never considered, and the pod's own labels come first: ``decide``.)"""
    if ns_label == keys.NAMESPACE_DISABLED:
        return False, f"namespace {namespace} is labelled {keys.GANG_SCHEDULING}=disabled", False
    where = f"root {owner_string(root)}" if root is not None else "the pod"
    opt = _dict(_dict((root or {}).get("metadata")).get("annotations")).get(keys.GANG_SCHEDULING)
    if opt == keys.ROOT_OPT_IN:
        return True, f"{where} opts in ({keys.GANG_SCHEDULING}=true)", False
    if opt == keys.ROOT_OPT_OUT:
        return False, f"{where} opts out ({keys.GANG_SCHEDULING}=false)", False
    if opt is not None:
        return False, f"{where} has invalid {keys.GANG_SCHEDULING}={opt!r}", True
    if ns_label == keys.NAMESPACE_ENABLED:
        return True, f"namespace {namespace} is labelled {keys.GANG_SCHEDULING}=enabled", False
    if config.auto_inject == "all":
        return True, "autoInject: all", False
    return False, f"{where} is not opted in to gang scheduling", False


def decide(pod: Obj, namespace: str, source: ObjectSource, config: Config,
           deadline: Deadline | None = None) -> Decision:
    """What admission should do with ``pod`` created in ``namespace``.

    API reads that do not finish before ``deadline`` make the pod UNRESOLVED (gated for the gate
    controller), never SKIP: admission must answer within the apiserver's webhook timeout."""
    return _Decider(pod, namespace, source, config, deadline).decide()

"""Validation rules (behind ``/validate``): gang labels on pods, their immutability, who may remove the gate, who may
write the product's state (keys.PRODUCT_STATE), the ``kubenexus.io/*`` annotations on root objects, so
that a typo fails at apply time, and members of user-created PodGroups against their PodGroup; a Namespace's
gang-scheduling label is warned about (``warnings``), never denied.

This webhook runs after every mutation (the apiserver calls validating webhooks last), so on CREATE it sees
what the mutating webhook wrote and cannot tell it from what the creator sent: the state admission writes is
checked by the mutating webhook (gang/mutate.py ``forged_state``); here, only what admission never writes.

Each rule returns a :class:`Denial` (the message naming the field, and why: invalid or forbidden), or None when
the request is fine.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Protocol

from gang import keys
from gang.adapters.base import WorkloadAdapter
from gang.adapters.table import adapter_for
from gang.config import Config
from gang.kinds import NAMESPACE, POD_GROUP
from gang.names import is_dns_subdomain, is_label_key, is_label_value
from gang.objects import Deadline, LookupFailed, Obj, ObjectSource
from gang.queues import QueueProblem, QueueSpec, queue_of


class Refusal(IntEnum):
    """Why a request is denied, as the HTTP code of the admission response's status."""

    FORBIDDEN = 403  # the requester may not make this change
    INVALID = 422  # nobody may: the object would be wrong


@dataclass(frozen=True)
class Denial:
    message: str
    code: Refusal


def _invalid(message: str | None) -> Denial | None:
    return Denial(message, Refusal.INVALID) if message is not None else None


def _section(obj: Obj, name: str) -> dict[str, Any]:
    """``obj.<name>`` (metadata, spec) when it is a map, else empty."""
    value = obj.get(name)
    return value if isinstance(value, dict) else {}


def meta_map(obj: Any, field: str) -> dict[str, Any]:
    """``obj.metadata.<field>`` (labels, annotations) when it is a map, else empty: requests may carry anything."""
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    value = metadata.get(field) if isinstance(metadata, dict) else None
    return value if isinstance(value, dict) else {}


def _positive_int(value: Any) -> bool:
    # isascii: "²".isdigit() is true but int("²") raises, and "٣" is no integer to the scheduler
    return isinstance(value, str) and value.isascii() and value.isdigit() and int(value) >= 1


def _agree(key: str, label: Any, annotation: Any) -> bool:
    """Equal, or the same min-available: mutation copies an annotation's "05" to the label as "5"."""
    return label == annotation or (key == keys.POD_GROUP_MIN_LABEL and _positive_int(label)
                                   and _positive_int(annotation) and int(label) == int(annotation))


def _gates(pod: Obj | None) -> set[str]:
    gates = ((pod or {}).get("spec") or {}).get("schedulingGates") or []
    return {str(g.get("name")) for g in gates if isinstance(g, dict)}


def check_pod_labels(pod: Obj) -> str | None:
    """Gang labels are consistent: a valid name, min-available an integer ≥ 1, both forms agree."""
    labels, annotations = meta_map(pod, "labels"), meta_map(pod, "annotations")
    pairs = ((keys.POD_GROUP_LABEL, keys.COSCHED_GROUP_ANNOTATION),
             (keys.POD_GROUP_MIN_LABEL, keys.COSCHED_MIN_ANNOTATION))
    for label, annotation in pairs:
        if label in labels and annotation in annotations and not _agree(label, labels[label], annotations[annotation]):
            return (f"metadata.annotations[{annotation}]: {annotations[annotation]!r} disagrees with "
                    f"metadata.labels[{label}]: {labels[label]!r}")
    for field, source in (("labels", labels), ("annotations", annotations)):
        name_key = keys.POD_GROUP_LABEL if field == "labels" else keys.COSCHED_GROUP_ANNOTATION
        min_key = keys.POD_GROUP_MIN_LABEL if field == "labels" else keys.COSCHED_MIN_ANNOTATION
        if name_key in source and not (isinstance(source[name_key], str) and source[name_key]
                                       and is_label_value(source[name_key])):
            return (f"metadata.{field}[{name_key}]: {source[name_key]!r} is not a valid group name "
                    "(at most 63 characters of [A-Za-z0-9._-], starting and ending alphanumeric)")
        if min_key in source and not _positive_int(source[min_key]):
            return f"metadata.{field}[{min_key}]: {source[min_key]!r} is not an integer ≥ 1"
    has_name = keys.POD_GROUP_LABEL in labels or keys.COSCHED_GROUP_ANNOTATION in annotations
    if not has_name and (keys.POD_GROUP_MIN_LABEL in labels or keys.COSCHED_MIN_ANNOTATION in annotations):
        return f"metadata.labels[{keys.POD_GROUP_LABEL}]: required when a pod-group min-available is set"
    return None


# Product state the gate controller writes when it releases a pod: never on a new pod (admission writes the rest).
RELEASE_STATE = tuple(name for name in keys.PRODUCT_STATE if name not in keys.WRITTEN_ANNOTATIONS)


def check_pod_create(pod: Obj) -> Denial | None:
    """No release state on a new pod (the controller would hold its planned node's room), and consistent labels."""
    annotations = meta_map(pod, "annotations")
    for name in RELEASE_STATE:
        if name in annotations:
            return Denial(f"metadata.annotations[{name}]: must not be set on a new pod: only the KubeNexus gate "
                          "controller writes it, when it releases a gang member (a copy of an existing pod? leave "
                          "out its scheduling.kubenexus.io/ annotations)", Refusal.FORBIDDEN)
    return _invalid(check_pod_labels(pod))


def check_pod_group_member(pod: Obj, pod_group: Obj) -> Denial | None:
    """A member of a user-created PodGroup is sized by its ``spec.minMember``: a min-available of the pod's own
    (label, or the coscheduling annotation) must say the same."""
    meta, spec = _section(pod_group, "metadata"), _section(pod_group, "spec")
    where, min_member = f"PodGroup {meta.get('namespace')}/{meta.get('name')}", spec.get("minMember")
    for field, key in (("labels", keys.POD_GROUP_MIN_LABEL), ("annotations", keys.COSCHED_MIN_ANNOTATION)):
        value = meta_map(pod, field).get(key)
        if value is not None and not (_positive_int(value) and int(value) == min_member):
            return Denial(f"metadata.{field}[{key}]: {value!r} disagrees with spec.minMember {min_member} of "
                          f"{where}, which the pod names: members of a PodGroup are sized by it (leave {key} out, "
                          f'or set it to "{min_member}")', Refusal.INVALID)
    return None


def _pod_group_named(pod: Obj) -> str | None:
    """The PodGroup a pod's owner annotation names: admission writes it on members of a user-created PodGroup."""
    owner = meta_map(pod, "annotations").get(keys.OWNER_ANNOTATION)
    prefix = f"{keys.PODGROUP_API_VERSION}/{keys.PODGROUP_KIND}/"
    return owner[len(prefix):] if isinstance(owner, str) and owner.startswith(prefix) else None


def check_pod_group_create(pod: Obj, namespace: str, source: ObjectSource, deadline: Deadline | None) -> Denial | None:
    """A new member of a user-created PodGroup (as mutation left it: its owner keys name the PodGroup) agrees with
    it. A PodGroup that cannot be read now, or was recreated since mutation read it, is not judged here: mutation
    judged the pod against the PodGroup it read (``decide``)."""
    name = _pod_group_named(pod)
    if not name:
        return None
    uid = meta_map(pod, "annotations").get(keys.OWNER_UID_ANNOTATION)
    try:
        group = source.get(POD_GROUP, keys.PODGROUP_API_VERSION, namespace, name, uid or None, deadline)
    except LookupFailed:
        return None
    if group is None or (uid and _section(group, "metadata").get("uid") != uid):
        return None
    return check_pod_group_member(pod, group)


def check_pod_group_update(obj: Obj, old: Obj, username: str, config: Config) -> Denial | None:
    """``spec.minMember`` of a PodGroup is immutable (except to the gate controller, which keeps its own PodGroups'):
    admission writes it on every member as its min-available, which is immutable too, so a change would leave
    members that disagree on their gang's size."""
    before, after = _section(old, "spec"), _section(obj, "spec")
    if before.get("minMember") == after.get("minMember") or username == config.controller_identity:
        return None
    meta = _section(obj, "metadata")
    return Denial(f"spec.minMember: is immutable (was {before.get('minMember')!r}): the members of PodGroup "
                  f"{meta.get('namespace')}/{meta.get('name')} carry it as their min-available from creation; "
                  "to resize the gang, delete the PodGroup and its pods and create them again", Refusal.INVALID)


def _change(before: dict[str, Any], after: dict[str, Any], name: str) -> str | None:
    if name not in before:
        return "added" if name in after else None
    if name not in after:
        return "removed"
    return "changed" if before[name] != after[name] else None


def check_pod_update(old: Obj, new: Obj, username: str, config: Config) -> Denial | None:
    """Gang identity is immutable; only the gate controller's identity may write the product's state, and only
    ``gateRemovers`` may remove the gate or label a pod."""
    privileged = config.may_remove_gate(username)
    for field, names in (("labels", keys.IMMUTABLE_LABELS), ("annotations", keys.IMMUTABLE_ANNOTATIONS)):
        before, after = meta_map(old, field), meta_map(new, field)
        for name in names:
            if name in before and before[name] != after.get(name):
                return Denial(f"metadata.{field}[{name}]: is immutable once set (was {before[name]!r})",
                              Refusal.INVALID)
            if name not in before and name in after and not privileged:
                return Denial(f"metadata.{field}[{name}]: cannot be added after creation by {username}",
                              Refusal.FORBIDDEN)
    if username != config.controller_identity:  # not even gateRemovers: an admin is not the controller
        before, after = meta_map(old, "annotations"), meta_map(new, "annotations")
        for name in keys.PRODUCT_STATE:
            if change := _change(before, after, name):
                return Denial(f"metadata.annotations[{name}]: cannot be {change} by {username}: only the KubeNexus "
                              f"gate controller ({config.controller_identity}) writes it after creation",
                              Refusal.FORBIDDEN)
    if keys.GANG_GATE in _gates(old) and keys.GANG_GATE not in _gates(new) and not privileged:
        return Denial(f"spec.schedulingGates[{keys.GANG_GATE}]: only the KubeNexus gate controller may remove the "
                      f"gang gate (request by {username}); the gate is removed when the whole gang fits",
                      Refusal.FORBIDDEN)
    if _gang_keys(old) == _gang_keys(new):  # unchanged, even if invalid from before: don't block the update
        return None
    return _invalid(check_pod_labels(new))


def _gang_keys(pod: Obj) -> tuple[Any, ...]:
    labels, annotations = meta_map(pod, "labels"), meta_map(pod, "annotations")
    return (tuple(labels.get(k) for k in (keys.POD_GROUP_LABEL, keys.POD_GROUP_MIN_LABEL))
            + tuple(annotations.get(k) for k in (keys.COSCHED_GROUP_ANNOTATION, keys.COSCHED_MIN_ANNOTATION)))


def _nexus_annotations(obj: Obj | None) -> dict[str, Any]:
    return {k: v for k, v in meta_map(obj, "annotations").items() if k.startswith(keys.PREFIX)}


def _role_topology(key: str, adapter: WorkloadAdapter, kind: str, annotations: Mapping[str, Any],
                   root: Obj) -> str | None:
    """What is wrong with a per-role topology request, or None."""
    role, value = key.removeprefix(keys.TOPOLOGY_REQUIRED_ROLE_PREFIX), annotations[key]
    if adapter.role_label is None:
        return f"the members of a {kind} have no roles; set {keys.TOPOLOGY_REQUIRED} for the whole gang"
    if not role or not is_label_value(role):
        return f"{role!r} is not a role name (the values of the {adapter.role_label} label)"
    roles = adapter.roles(root)
    if roles is not None and role not in roles:
        close = difflib.get_close_matches(role, sorted(roles), n=1)
        hint = f"did you mean {keys.TOPOLOGY_REQUIRED_ROLE_PREFIX}{close[0]}?" if close else \
            f"its roles: {', '.join(sorted(roles)) or 'none'}"
        return f"this {kind} has no role {role!r} (the values of the {adapter.role_label} label its pods get); {hint}"
    if not (isinstance(value, str) and is_label_key(value)):
        return f"{value!r} is not a node label key"
    if keys.TOPOLOGY_REQUIRED in annotations or keys.TOPOLOGY_PREFERRED in annotations:
        return "a topology for the whole gang is set too: set one or the other"
    return None


def check_root(obj: Obj, old: Obj | None, api_version: str, kind: str) -> str | None:
    """The root's ``kubenexus.io/*`` annotations, when they (or the pods the spec creates) change."""
    adapter = adapter_for(api_version, kind)
    if adapter is None:
        return None
    annotations = _nexus_annotations(obj)
    count = adapter.pod_count(obj)
    if old is not None and annotations == _nexus_annotations(old) and count == adapter.pod_count(old):
        return None
    where = "metadata.annotations"
    for key in annotations:
        if key.startswith(keys.TOPOLOGY_REQUIRED_ROLE_PREFIX):
            denial = _role_topology(key, adapter, kind, annotations, obj)
            if denial:
                return f"{where}[{key}]: {denial}"
        elif key not in keys.ROOT_ANNOTATIONS:
            return f"{where}[{key}]: unknown KubeNexus annotation; {_did_you_mean(key, keys.ROOT_ANNOTATIONS)}"
    value = annotations.get(keys.GANG_SCHEDULING)
    if value is not None and value not in (keys.ROOT_OPT_IN, keys.ROOT_OPT_OUT):
        return f'{where}[{keys.GANG_SCHEDULING}]: {value!r} must be "true" or "false"'
    value = annotations.get(keys.MIN_AVAILABLE)
    if value is not None:
        if not _positive_int(value):
            return f"{where}[{keys.MIN_AVAILABLE}]: {value!r} is not an integer ≥ 1"
        if count is not None and int(value) > count:
            return f"{where}[{keys.MIN_AVAILABLE}]: {value} is larger than the {count} pod(s) this {kind} creates"
    value = annotations.get(keys.GROUP_NAME)
    if value is not None and not (isinstance(value, str) and is_label_value(value) and value):
        return (f"{where}[{keys.GROUP_NAME}]: {value!r} is not a valid group name "
                "(at most 63 characters of [A-Za-z0-9._-], starting and ending alphanumeric)")
    value = annotations.get(keys.SCHEDULE_TIMEOUT_SECONDS)
    if value is not None and not _positive_int(value):
        return f"{where}[{keys.SCHEDULE_TIMEOUT_SECONDS}]: {value!r} is not a positive integer"
    value = annotations.get(keys.BEST_EFFORT)
    if value is not None and value not in ("true", "false"):
        return f'{where}[{keys.BEST_EFFORT}]: {value!r} must be "true" or "false"'
    for key in (keys.TOPOLOGY_REQUIRED, keys.TOPOLOGY_PREFERRED):
        value = annotations.get(key)
        if value is not None and not (isinstance(value, str) and is_label_key(value)):
            return (f"{where}[{key}]: {value!r} is not a node label key (an optional DNS prefix and /, then at most 63 "
                    "characters of [A-Za-z0-9._-], starting and ending alphanumeric)")
    if keys.TOPOLOGY_REQUIRED in annotations and keys.TOPOLOGY_PREFERRED in annotations:
        return f"{where}: set one of {keys.TOPOLOGY_REQUIRED} and {keys.TOPOLOGY_PREFERRED}, not both"
    value = annotations.get(keys.QUEUE)
    if value is not None and not (isinstance(value, str) and value and is_dns_subdomain(value)):
        return (f"{where}[{keys.QUEUE}]: {value!r} is not a Queue name (lowercase letters, digits, '-' and '.', at "
                "most 253 characters, starting and ending alphanumeric)")
    return None


def check_namespace_label(namespace: Obj) -> str | None:
    """Why the namespace's ``kubenexus.io/gang-scheduling`` label is ignored, or None. Only "enabled" and "disabled"
    mean anything: any other value ("true", "yes") leaves the namespace as if unlabelled, which is never what its
    author meant."""
    value = meta_map(namespace, "labels").get(keys.GANG_SCHEDULING)
    if value is None or value in (keys.NAMESPACE_ENABLED, keys.NAMESPACE_DISABLED):
        return None
    name = _section(namespace, "metadata").get("name", "")
    return (f"namespace {name}: label {keys.GANG_SCHEDULING}={value!r} is ignored (the namespace counts as "
            f'unlabelled): use "{keys.NAMESPACE_ENABLED}" or "{keys.NAMESPACE_DISABLED}"')


def _did_you_mean(key: str, known: tuple[str, ...]) -> str:
    """The known key closest to ``key``, compared without the prefix they share (``kubenexus.io/``), which would
    otherwise make any two keys look alike."""
    bare = {k.removeprefix(keys.PREFIX): k for k in known}
    close = difflib.get_close_matches(key.removeprefix(keys.PREFIX), list(bare), n=1)
    return f"did you mean {bare[close[0]]}?" if close else f"known: {', '.join(known)}"


def namespace_warnings(namespace: Obj) -> list[str]:
    """What a namespace says that the webhook ignores: a label value other than enabled or disabled, a
    ``kubenexus.io/*`` label it does not read (a misspelled key), our key written as an annotation."""
    found = [problem] if (problem := check_namespace_label(namespace)) else []
    name = _section(namespace, "metadata").get("name", "")
    for key in sorted(meta_map(namespace, "labels")):
        if key.startswith(keys.PREFIX) and key != keys.GANG_SCHEDULING:
            found.append(f"namespace {name}: label {key} means nothing to KubeNexus; "
                         f"{_did_you_mean(key, (keys.GANG_SCHEDULING,))}")
    for key in sorted(meta_map(namespace, "annotations")):
        if key.startswith(keys.PREFIX):
            found.append(f"namespace {name}: annotation {key} is ignored: KubeNexus reads the namespace's label "
                         f"{keys.GANG_SCHEDULING} (kubectl label namespace {name} {keys.GANG_SCHEDULING}=enabled)")
    return found


# What an edit of each annotation does to a job whose pods exist (docs/tasks/opt-in.md "Change a running job").
_EDITED_NEW_PODS = ("applies to pods created from now on; its pods that exist keep the gang they were admitted to "
                    "(each member carries its gang's name and size): delete and resubmit the {kind} to change that")
_EDITED_WAITING = "applies at once while its gang waits; a gang already released keeps the placement it was released on"
# Without the annotation, the namespace and the config decide (gang/decide.py ``root_opt_in``).
_UNANNOTATED = (f"pods created from now on are gang members only if their namespace is labelled {keys.GANG_SCHEDULING}="
                f"{keys.NAMESPACE_ENABLED} (or autoInject is all), else admitted unchanged")
# The gate controller reads the Queue from the root on every pass (controller/quota.py ``_resolve``): waiting gangs
# are admitted by it, released ones counted in its usage.
_QUEUE_MOVED = ("applies at once: from the gate controller's next pass, its gang is in {queue}: while it waits, it "
                "waits for that Queue's quota and turn; once released, the move does not stop it: its usage counts "
                "against that Queue from then on, no longer against the one it was in")


def _opt_in_edit(before: Any, after: Any, kind: str) -> str:
    """What an edit of ``kubenexus.io/gang-scheduling`` does. Only "false" makes the gate controller let a gang go
    (controller/engine.py ``_opted_out``): removing "true" leaves the gang it formed waiting as it was admitted."""
    key = keys.GANG_SCHEDULING
    if after == keys.ROOT_OPT_OUT:
        return (f"{key}={keys.ROOT_OPT_OUT}: the gate controller releases this {kind}'s gated pods to ordinary "
                "scheduling now; pods created from now on are not gang-scheduled")
    if after is None and before == keys.ROOT_OPT_IN:
        return (f"{key} removed: that is no opt-out: this {kind}'s gated pods stay gated until their gang, as "
                f"admitted, is whole and fits; {_UNANNOTATED}, outside the gang its gated pods wait for; set "
                f'{key}="{keys.ROOT_OPT_OUT}" instead to release its gated pods to ordinary scheduling now')
    if after is None:
        return (f"{key} removed: {_UNANNOTATED}; pods that exist are not gated again, and those its opt-out released "
                "stay ordinary pods")
    return (f"{key} changed: pods created from now on are decided with it; pods that exist are left as they are: "
            f"delete and resubmit the {kind} to gang-schedule all of its pods")


def root_warnings(obj: Obj, old: Obj | None, kind: str) -> list[str]:
    """What applying a root does that its author may not expect: ``kubenexus.io/*`` written as labels (read as
    annotations), and what an edit of each annotation does to the gang its pods already form (see ``_EDITED_*``)."""
    found = []
    for key in sorted(meta_map(obj, "labels")):
        if key.startswith(keys.PREFIX):
            hint = (f"KubeNexus reads {key} as an annotation: kubectl annotate {kind.lower()} NAME {key}=VALUE"
                    if key in keys.ROOT_ANNOTATIONS else _did_you_mean(key, keys.ROOT_ANNOTATIONS))
            found.append(f"metadata.labels[{key}]: a label is ignored; {hint}")
    if old is None:
        return found
    before, after = (meta_map(o, "annotations") for o in (old, obj))
    for key in sorted(k for k in {*before, *after} if keys.read_on_roots(k) and before.get(k) != after.get(k)):
        if key == keys.GANG_SCHEDULING:
            found.append(_opt_in_edit(before.get(key), after.get(key), kind))
        elif key == keys.QUEUE:
            queue = (f"Queue {after[key]}" if after.get(key) else
                     "the Queue that selects its namespace, if one does, else in none")
            found.append(f"{key} {_change(before, after, key)}: it {_QUEUE_MOVED.format(queue=queue)}")
        elif key in (keys.MIN_AVAILABLE, keys.GROUP_NAME):
            found.append(f"{key} changed: it {_EDITED_NEW_PODS.format(kind=kind)}")
        else:
            found.append(f"{key} changed: it {_EDITED_WAITING}")
    return found


def _root_write(request: Obj) -> str | None:
    """The kind of the root object a CREATE or UPDATE writes, or None for any other request."""
    kind, obj = request["kind"], request.get("object")
    if request.get("subResource") or request["operation"] not in ("CREATE", "UPDATE") or not isinstance(obj, dict):
        return None
    group = kind.get("group", "")
    api_version = f"{group}/{kind.get('version', '')}" if group else str(kind.get("version"))
    return str(kind.get("kind")) if adapter_for(api_version, str(kind.get("kind"))) is not None else None


class KnownQueues(Protocol):
    """The Queues as the webhook knows them (``kube/queues.py``)."""

    problem: str  # why they are not known, while they are not

    def specs(self, deadline: Deadline | None = None) -> Mapping[str, QueueSpec] | None:
        """The Queues by name, or None while they are not known (may wait within ``deadline``)."""


def queue_warnings(request: Obj, queues: KnownQueues, namespaces: ObjectSource,
                   deadline: Deadline | None = None) -> tuple[str, ...]:
    """What will keep the gang of an applied root waiting for its Queue, in the gate controller's words
    (``gang/queues.py`` ``queue_of``): ``kubenexus.io/queue`` naming a Queue that does not exist (on CREATE, or an
    UPDATE that changes it) or, on a CREATE without it, a namespace that two or more Queues select.

    Warned, never denied: the Queue may be created next. While ``queues`` are not known the warning says the Queue
    could not be checked rather than nothing. ``namespaces`` gives the namespace's labels (read within ``deadline``),
    only when some Queue selects namespaces.
    """
    if _root_write(request) is None:
        return ()
    obj, old = request["object"], request.get("oldObject")
    named = meta_map(obj, "annotations").get(keys.QUEUE)
    if request["operation"] == "UPDATE" and (not named or named == meta_map(old, "annotations").get(keys.QUEUE)):
        return ()
    namespace = str(request.get("namespace") or "")

    def unchecked(why: str) -> tuple[str, ...]:
        return (f"kubenexus: its Queue could not be checked ({why}); if gang-scheduled, its gang waits while its "
                "Queue cannot be told, and its PodGroup says why",)

    specs = queues.specs(deadline)
    if specs is None:
        return unchecked(f"Queues are not known: {queues.problem}")
    labels: Mapping[str, Any] = {}
    if not named and any(queue.selector is not None for queue in specs.values()):
        try:
            labels = meta_map(namespaces.get(NAMESPACE, "v1", None, namespace, deadline=deadline) or {}, "labels")
        except LookupFailed as exc:
            return unchecked(f"namespace {namespace} could not be read: {exc}")
    found = queue_of(str(named) if named else None, namespace, labels, specs)
    return (f"kubenexus: if gang-scheduled, its gang waits: {found.reason}",) if isinstance(found, QueueProblem) else ()


def warnings(request: Obj) -> tuple[str, ...]:
    """The warnings of an allowed request: a Namespace with labels or annotations the webhook ignores
    (``namespace_warnings``), a root whose edit or labels do not do what they seem to (``root_warnings``).

    Warned, not denied: a namespace is written by whoever provisions it (GitOps, namespace controllers) along with
    everything else its team needs, and a refusal would fail all of that for a label whose only effect is on us;
    an edit of a live job is the user's to make. kubectl prints the warnings, and ``kubenexus doctor`` finds
    namespace values applied where nobody reads warnings.
    """
    kind, obj, old = request["kind"], request.get("object"), request.get("oldObject")
    if request.get("subResource") or request["operation"] not in ("CREATE", "UPDATE") or not isinstance(obj, dict):
        return ()
    if (kind.get("group", ""), kind.get("kind")) == ("", "Namespace"):
        found = namespace_warnings(obj)
    else:
        root_kind = _root_write(request)
        if root_kind is None:
            return ()
        found = root_warnings(obj, old if request["operation"] == "UPDATE" and isinstance(old, dict) else None,
                              root_kind)
    return tuple(f"kubenexus: {text}" for text in found)


def validate(request: Obj, config: Config, source: ObjectSource | None = None,
             deadline: Deadline | None = None) -> Denial | None:
    """Why an admission request is denied, or None to allow it. ``source`` (read within ``deadline``) has the
    PodGroups that members of user-created PodGroups are checked against; without one they are not."""
    operation, obj, old = request["operation"], request.get("object"), request.get("oldObject")
    kind = request["kind"]
    if request.get("subResource") or operation not in ("CREATE", "UPDATE") or not isinstance(obj, dict):
        return None
    username = (request.get("userInfo") or {}).get("username") or ""  # its structure is checked before us
    if kind.get("group", "") == "" and kind.get("kind") == "Pod":
        if operation == "CREATE":
            denial = check_pod_create(obj)
            if denial is None and source is not None and isinstance(request.get("namespace"), str):
                denial = check_pod_group_create(obj, request["namespace"], source, deadline)
            return denial
        return check_pod_update(old if isinstance(old, dict) else {}, obj, username, config)
    if (kind.get("group"), kind.get("kind")) == (keys.PODGROUP_GROUP, keys.PODGROUP_KIND):
        return check_pod_group_update(obj, old, username, config) if isinstance(old, dict) else None
    api_version = f"{kind['group']}/{kind.get('version', '')}" if kind.get("group") else str(kind.get("version"))
    previous = old if operation == "UPDATE" and isinstance(old, dict) else None
    return _invalid(check_root(obj, previous, api_version, str(kind.get("kind"))))

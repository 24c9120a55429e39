"""``kubenexus simulate``: what the gate controller would decide for a cluster snapshot, offline.

The snapshot is ordinary Kubernetes YAML (Namespaces, Nodes, Pods bound and pending, PodDisruptionBudgets, Queues,
PodGroups, root objects; ``List`` objects are unpacked): ``SNAPSHOT`` with the jobs' kinds added. It goes through the
controller's own state and engine, reservations of released-but-unbound pods included, so "what if I submit this
job now" gets the answer the controller would give. The job itself will do: a root object no pod is owned by yet
is submitted, the pods its operator creates first (its adapter's ``created``) admitted as the webhook would admit
them (``submit``). What a decision reads and the snapshot lacks is named, never guessed: a Namespace or root that
admission reads refuses the snapshot (``not_in_snapshot``); a gang whose root, Queue or namespace (that Queues select
by) the snapshot lacks waits, as the controller waits for what it cannot read, and its reason names what is missing
and the command that adds it (``controller/roots.py``: the snapshot's roots are read as the controller's watch reads
them; ``SnapshotQueues``).

Exit status: 1 when a gang can never fit or cannot be certified, 2 on a usage error (``kubenexus.errors``).
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable, Iterable
from datetime import date, datetime
from typing import Any, NamedTuple, TypeVar

import jsonpatch
import yaml

from controller.engine import Cycle, Engine, Verdict
from controller.owners import Step, resolve
from controller.queues import QueueInputs
from controller.roots import snapshot
from controller.state import ClusterState
from controller.status import Desired, Phase, Tracker, new_podgroup, podgroup_name, status_for
from controller.topology import described
from gang import keys, queues
from gang.config import Config, config_or_exit
from gang.kinds import NAMESPACE, POD_GROUP
from gang.objects import MemorySource, Obj
from kubenexus.errors import FOUND, CommandError, opened
from kubenexus.explain import Recorded, admit
from kubenexus.output import add_output, dump

T = TypeVar("T")


class ScenarioError(ValueError):
    """The snapshot holds something that is not a Kubernetes object the simulation can read."""


def _name(obj: Obj) -> str:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    return "/".join(str(part) for part in (meta.get("namespace"), meta.get("name")) if part)


def objects_in(documents: Iterable[Any]) -> list[Obj]:
    """The objects of YAML documents, `List`s (what `kubectl get -o yaml` prints) unpacked; also `cluster serve`'s
    `--nodes-file`."""
    objects: list[Obj] = []
    for number, doc in enumerate(documents, 1):
        if doc is None:  # an empty document
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str):
            raise ScenarioError(f"document {number} is not a Kubernetes object (no kind)")
        if doc["kind"].endswith("List") and isinstance(doc.get("items"), list):
            objects.extend(objects_in(doc["items"]))
            continue
        if not isinstance(doc.get("metadata"), dict) or not doc["metadata"].get("name"):
            raise ScenarioError(f"a {doc['kind']} without metadata.name")
        for part in ("spec", "status"):
            if not isinstance(doc.get(part) or {}, dict):
                raise ScenarioError(f"{doc['kind']} {_name(doc)}: {part} is not a mapping")
        objects.append(doc)
    return objects


#: What simulate reads of a cluster, besides the jobs' own objects: every copy of the command in the docs lists the
#: same (tests/test_simulate.py).
SNAPSHOT = ("kubectl get namespaces,nodes,pods,poddisruptionbudgets,queues.scheduling.kubenexus.io,"
            "podgroups.scheduling.kubenexus.io -A -o yaml")


def not_in_snapshot(source: Recorded, doing: str) -> ScenarioError:
    """The first object ``source`` was asked for and did not find, named with the way to add it: deciding without
    it would pass a guess for an answer."""
    what, (kind, name) = next(iter(source.absent.items()))
    if kind == NAMESPACE:
        return ScenarioError(f"namespace {name} is not in the snapshot, and {doing} reads it: add namespaces to it "
                             f"({SNAPSHOT})")
    return ScenarioError(f"{what} is not in the snapshot, and {doing} reads it: add it "
                         f"(kubectl get {kind.plural} -A -o yaml)")


class SnapshotQueues(QueueInputs):
    """The snapshot's Queues and namespaces, which are everything there is: a Queue a root names, or a namespace
    Queues select by, that it lacks is missing from the snapshot (the gang waits, saying so), not from the cluster
    (the live controller's "does not exist: create it", "not known yet")."""

    def queue_of(self, named: str | None, namespace: str) -> str | None | queues.QueueProblem:
        if named and named not in self.specs:
            return queues.QueueProblem(f"its root names Queue {named!r} ({keys.QUEUE}), which is not in the snapshot: "
                                       f"add Queues to it ({SNAPSHOT})")
        found = super().queue_of(named, namespace)
        if isinstance(found, queues.QueueProblem) and namespace not in self.labels:
            return queues.QueueProblem(f"namespace {namespace} is not in the snapshot, and Queues select by its "
                                       f"labels: add namespaces to it ({SNAPSHOT})")
        return found


def _parse(obj: Obj, upsert: Callable[[], T]) -> T:
    """Run ``upsert`` on one object; a field it cannot parse is the snapshot's fault, reported as such."""
    try:
        return upsert()
    except (ValueError, TypeError, AttributeError, ArithmeticError) as exc:
        raise ScenarioError(f"{obj['kind']} {_name(obj)}: {exc}") from None


def _rfc3339(value: Any) -> str:
    """YAML reads unquoted timestamps (creationTimestamp: 2026-11-22T10:00:00Z) as datetimes: back to text."""
    if isinstance(value, date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def _plain(obj: Obj) -> Obj:
    """The object as JSON would carry it (a deep copy the state may keep)."""
    plain: Obj = json.loads(json.dumps(obj, default=_rfc3339))
    return plain


def _timestamp(now: float) -> str:
    return datetime.fromtimestamp(now).astimezone().isoformat()


def _uid(meta: Obj) -> str:
    return str(meta.get("uid") or f"simulated-{meta.get('namespace')}-{meta.get('name')}")


def submit(objects: list[Obj], config: Config, now: float) -> tuple[list[Obj], list[Obj]]:
    """Jobs just submitted: every object of a registered root kind without a status (its operator has not seen it;
    a finished job whose pods are gone has one) that nothing in the snapshot is owned by yet.
    The pods its operator creates first (its adapter's ``created``, with any owners between them and the root) go
    through admission (``admit_pod``, as
    ``/mutate`` and ``explain``) and join the snapshot as admission leaves them, created ``now``. Returns the
    snapshot with them, and for each job what admission did with each pod (``pods`` None: its kind's pods are not
    modelled, the snapshot must hold them). An object admission reads that the snapshot lacks (the job's Namespace)
    is a ScenarioError: admission without it would be a guess (an unlabelled namespace, "not opted in")."""
    from gang.adapters.table import adapter_for

    owners = {ref.get("uid") for obj in objects for ref in (obj.get("metadata") or {}).get("ownerReferences") or []
              if isinstance(ref, dict)}
    snapshot, jobs, created = [], [], []
    for obj in objects:
        adapter = None if obj["kind"] in ("Node", "Pod") else adapter_for(str(obj.get("apiVersion", "")), obj["kind"])
        if adapter is None or obj.get("status") or obj["metadata"].get("uid") in owners:  # its operator has acted
            snapshot.append(obj)
            continue
        meta = {**obj["metadata"], "namespace": obj["metadata"].get("namespace") or "default"}
        root = {**obj, "metadata": {**meta, "uid": _uid(meta)}}
        snapshot.append(root)
        made = _parse(root, functools.partial(adapter.created, root))
        jobs.append({"namespace": meta["namespace"], "kind": obj["kind"], "name": meta["name"],
                     "pods": None if made is None else []})
        for index, child in enumerate(made or []):
            child_meta = child["metadata"]
            child_meta.setdefault("name", f"{child_meta.get('generateName', '')}{index:05d}")  # k8s: 5 random
            child_meta.update(namespace=meta["namespace"], creationTimestamp=_timestamp(now))
            child_meta.setdefault("uid", _uid(child_meta))
            if child["kind"] == "Pod":
                created.append((jobs[-1], child))
            else:  # an owner between the pods and the root (a JobSet's Jobs): the owner walk reads it
                snapshot.append(child)
    source = Recorded([obj for obj in snapshot if obj["kind"] not in ("Node", "Pod")])
    for job, pod in created:
        admission = admit(pod, job["namespace"], source, config)
        if source.absent:
            raise not_in_snapshot(source, f"admitting the pods of {job['kind']} {job['namespace']}/{job['name']}")
        decision = admission.decision
        job["pods"].append({"name": pod["metadata"]["name"], "action": decision.action.value,
                            "allowed": not admission.denial, "denial": admission.denial, "group": decision.group,
                            "size": decision.size, "reasons": list(decision.reasons),
                            "warnings": list(decision.warnings)})
        if not admission.denial:
            snapshot.append(admission.pod)
    return snapshot, jobs


class Simulated(NamedTuple):
    cycle: Cycle
    ungated: list[Obj]  # pods admission left unresolved that are released now (no gang members)
    podgroups: list[Obj]
    queues: list[Obj]  # each Queue with the status the controller would write after the pass


def simulate_podgroups(objects: list[Obj], config: Config, now: float) -> Simulated:
    """One decision pass over the snapshot, each gang's PodGroup as the controller would write it after the pass
    (gangs without a root object get none: nothing would own it) and each Queue's status. A pod left unresolved is
    decided again against the snapshot: an object it needs and the snapshot lacks is a ScenarioError."""
    state = ClusterState(config.replacement_grace_seconds)
    state.queues = SnapshotQueues()
    given = [o for o in objects if o.get("kind") not in ("Node", "Pod")]
    roots, resolving = MemorySource(given), Recorded(given)
    state.roots = snapshot(objects)  # everything there is, read as the controller's watch reads roots
    ungated: list[Obj] = []
    for obj in objects:
        if obj.get("kind") == "Node":
            _parse(obj, functools.partial(state.upsert_node, obj))
        elif obj.get("kind") == "PodDisruptionBudget":
            state.upsert_budget(obj)
        elif obj.get("kind") == queues.KIND and str(obj.get("apiVersion", "")).startswith(queues.GROUP + "/"):
            state.queues.upsert(obj)
        elif obj.get("kind") == "Namespace":
            state.queues.upsert_namespace(obj)
    for obj in objects:
        if obj.get("kind") != "Pod":
            continue
        pod = _parse(obj, functools.partial(_plain, obj))
        meta = pod.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        meta.setdefault("creationTimestamp", _timestamp(now))
        view = _parse(pod, functools.partial(state.upsert_pod, pod, now))
        if view.uid in state.unresolved:
            resolution = resolve(pod, resolving, config)
            if resolving.absent:
                raise not_in_snapshot(resolving, f"deciding pod {view.namespace}/{view.name} again (unresolved)")
            if resolution.action is Step.RELEASE:
                state.delete_pod(view.uid)
                ungated.append({"namespace": view.namespace, "name": view.name, "reason": resolution.reason})
            elif resolution.action is Step.JOIN:
                state.upsert_pod(jsonpatch.apply_patch(pod, resolution.patch), now)
    engine = Engine(state, config)
    cycle = engine.cycle(now)
    changed, _ = Tracker().update(cycle, state, now)
    statuses = [{"name": name, "status": engine.quota.status(name)} for name in sorted(engine.quota.queues)]
    return Simulated(cycle, ungated, [_podgroup(want, roots, now) for want in changed], statuses)


def _podgroup(want: Desired, roots: MemorySource, now: float) -> Obj:
    """The PodGroup the controller keeps for the gang: created (with the spec it manages), or the user's that names
    the gang, with the status written after this pass; one without an owner for a gang with no root object."""
    obj = new_podgroup(want, want.constraints or {})
    user = roots.get(POD_GROUP, keys.PODGROUP_API_VERSION, want.namespace, want.name) \
        if want.root is not None and want.root.explicit else None
    if user is not None:
        obj = {k: user[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in user}
    obj["status"] = status_for(want, None, int((obj.get("metadata") or {}).get("generation") or 1), now)
    return obj


def report(cycle: Cycle, ungated: list[Obj], podgroups: list[Obj] | None = None,
           submitted: list[Obj] | None = None, queue_statuses: list[Obj] | None = None) -> Obj:
    gangs = [{"namespace": d.key[0], "name": d.key[1], "decision": d.decision, "reason": d.reason,
              "plan": dict(sorted(d.plan.items())), "released": sorted(d.released),
              # only for gangs whose root asks for a topology
              **({"topology": described(d.topology), "domains": list(d.domains)} if d.topology else {})}
             for d in sorted(cycle.gangs, key=lambda d: (d.key[0], d.key[1], d.key[2]))]
    deleted = [{"namespace": e.key[0], "gang": e.key[1], "whole_gang": e.whole_gang, "reason": e.reason,
                "message": e.message, "pods": sorted(p.name for p in e.pods)}
               for e in sorted(cycle.evictions, key=lambda e: (e.key[0], e.key[1]))]
    preempted = [{"namespace": p.key[0], "gang": p.key[1], "round": p.round,
                  "victims": [{"kind": "Gang" if u.gang else "Pod", "namespace": u.pods[0].namespace,
                               "name": u.gang[1] if u.gang else u.pods[0].name, "priority": u.priority,
                               "pods": sorted(pod.name for pod in u.pods)} for u in p.victims]}
                 for p in sorted(cycle.preemptions, key=lambda p: (p.key[0], p.key[1]))]
    result: Obj = {"submitted": submitted or [], "gangs": gangs, "ungated": ungated, "deleted": deleted,
                   "preempted": preempted, "queues": queue_statuses or []}
    if podgroups is not None:
        result["podgroups"] = sorted(podgroups, key=lambda g: (g["metadata"]["namespace"], g["metadata"]["name"]))
    return result


def _admitted(job: Obj) -> list[str]:
    """What admission did with a submitted job's pods: one line per distinct outcome."""
    where = f"{job['namespace']}/{job['name']}: {job['kind']} submitted"
    if job["pods"] is None:
        return [f"{where}: simulate does not model the pods its operator creates; add them to the snapshot as "
                "admission leaves them"]
    outcomes: dict[str, list[str]] = {}
    for pod in job["pods"]:
        if pod["denial"]:
            outcome = f"refused: {pod['denial']}"
        elif pod["action"] == "gang":
            outcome = f"gated as members of gang {pod['group']} of {pod['size']}"
        elif pod["action"] == "unresolved":
            outcome = "gated as unresolved"
        else:
            outcome = f"admitted without gang scheduling: {pod['reasons'][-1]}"
        outcomes.setdefault(outcome, []).append(pod["name"])
    lines = [f"{where}: its operator creates {len(job['pods'])} pod(s) first"]
    lines += [f"    {', '.join(names)}: {outcome}" for outcome, names in outcomes.items()]
    return lines


def _text(result: Obj) -> str:
    lines = [line for job in result["submitted"] for line in _admitted(job)]
    groups = {(g["metadata"]["namespace"], g["metadata"]["name"]): g for g in result.get("podgroups") or []}
    for gang in result["gangs"]:
        where = f" [{', '.join(gang['domains'])}]" if gang.get("domains") else ""
        lines.append(f"{gang['namespace']}/{gang['name']}: {gang['decision']}{where} — {gang['reason']}")
        for pod, node in gang["plan"].items():
            lines.append(f"    {pod} → {node or '(unpinned)'}")
        group = groups.get((gang["namespace"], podgroup_name(gang["name"])))
        if group is not None:
            status, size = group["status"], group["spec"]["minMember"]
            waits = status.get("waitingFor") and status["phase"] not in STUCK_PHASES
            lines.append(f"    PodGroup {group['metadata']['name']}: {status['phase']}, min {size}, "
                         f"present {status['present']}, running {status['running']}"
                         + (f", waiting for {status['waitingFor']}" if waits else ""))
    for pod in result["ungated"]:
        lines.append(f"{pod['namespace']}/{pod['name']}: not a gang member, released — {pod['reason']}")
    for eviction in result["deleted"]:  # a whole gang's reason is its decision's, printed above
        what = "the whole gang:" if eviction["whole_gang"] else "member(s)"
        why = "" if eviction["whole_gang"] else f" — {eviction['message']}"
        lines.append(f"{eviction['namespace']}/{eviction['gang']}: deletes {what} {', '.join(eviction['pods'])} "
                     f"({eviction['reason']}){why}")
    for queue in result["queues"]:
        status = queue["status"]
        lines.append(f"Queue {queue['name']}: {status['usageSummary'] or 'no quota'}, {status['admittedGangs']} "
                     f"admitted, {status['pendingGangs']} pending, weighted share {status['weightedShare']}")
    for preempting in result["preempted"]:
        for victim in preempting["victims"]:
            lines.append(f"{preempting['namespace']}/{preempting['gang']}: preempts {victim['kind'].lower()} "
                         f"{victim['namespace']}/{victim['name']} (priority {victim['priority']}): "
                         f"{', '.join(victim['pods'])}")
    return "\n".join(lines) if lines else "no gang members in the snapshot"


def _now(text: str | None) -> float:
    if not text:
        return time.time()
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ScenarioError(f"--now: {text!r} is not an RFC 3339 time (e.g. 2026-11-22T10:00:00Z)") from None


#: Decisions waiting cannot change: ``simulate`` exits 1 when a gang gets one (the job must change, not the cluster).
STUCK = (Verdict.NEVER_FITS, Verdict.NOT_CERTIFIABLE)
#: Their PodGroups' phases, whose WAITING-FOR column only repeats the phase ("never fits"): nothing to wait for.
STUCK_PHASES = (Phase.NEVER_FITS, Phase.NOT_CERTIFIABLE)


def run(args: argparse.Namespace) -> int:
    config = config_or_exit(args.config, "kubenexus simulate")
    try:
        now = _now(args.now)
    except ScenarioError as exc:
        raise CommandError(str(exc)) from None
    with opened(args.scenario) as handle:
        try:
            # libyaml's loader when present: snapshots of real clusters run to many megabytes.
            objects = objects_in(yaml.load_all(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
            objects, submitted = submit(objects, config, now)
            cycle, ungated, podgroups, queue_statuses = simulate_podgroups(objects, config, now)
        except yaml.YAMLError as exc:
            raise CommandError(f"cannot read {args.scenario}: {' '.join(str(exc).split())}") from None
        except ScenarioError as exc:
            raise CommandError(f"{args.scenario}: {exc}") from None
    result = report(cycle, ungated, podgroups, submitted, queue_statuses)
    print(_text(result) if args.output == "text" else dump(result, args.output))
    return FOUND if any(d.decision in STUCK for d in cycle.gangs) else 0


_JOBS_KINDS = ",<your jobs' kinds>"


def add_parser(subcommands: Any) -> None:
    parser = subcommands.add_parser(
        "simulate", help="what the gate controller would decide for a cluster snapshot",
        description="What the gate controller would decide for a cluster snapshot (Namespaces, Nodes, Pods, "
        "PodDisruptionBudgets, Queues, PodGroups, root objects: "
        f"{SNAPSHOT.replace(' -A', _JOBS_KINDS + ' -A')}). "
        "Exit status: 0 when every gang is released, running or waiting for something that can come (members, "
        "capacity); 1 when a gang can never fit or cannot be certified; 2 on a usage error.")
    parser.add_argument("scenario", metavar="SNAPSHOT",
                        help="YAML (- for stdin) with Namespaces, Nodes, Pods (bound and pending), "
                        "PodDisruptionBudgets, Queues, PodGroups and root objects")
    add_output(parser)
    parser.add_argument("--now", help="evaluate at this RFC 3339 time (default: now)")
    parser.add_argument("--config", help="the controller's configuration file")
    parser.set_defaults(func=run)

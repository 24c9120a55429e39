"""``kubenexus timeline``: each gang's members from creation to running, as a picture, from pods and events.

The pure part reads plain API objects (``gangs``); ``collect`` lists them through the official client; the
picture is ``kubenexus/timeline_html.py``. A member's moments, and where each comes from:

- created: the pod's ``metadata.creationTimestamp`` (whole seconds, as the API stores it);
- released (its gate removed): the first ``GangReleased`` Event (events.k8s.io/v1 ``eventTime``, microseconds;
  a series' ``lastObservedTime`` too) on the gang's root or a member, at or after the member's creation and
  before its bind; else the PodGroup's ``status.releasedAt`` under the same rule (Events expire after an hour, the
  PodGroup stays); else the bind itself (the gate was gone by then). A gated pod is not released;
- scheduled (bound to a node): the ``PodScheduled`` condition's transition to ``True``;
- running: the last container start (``state.running.startedAt`` or ``state.terminated.startedAt``), else the
  ``Ready`` condition's transition to ``True``;
- finished: the last container end (``state.terminated.finishedAt``) once every container has ended; a pod in
  phase Succeeded or Failed without one ends when it started running (its end is unknown).

The API keeps most of these in whole seconds: each moment is clamped to be no earlier than the one before it.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from gang import keys

Obj = Mapping[str, Any]
RELEASED_REASON = "GangReleased"  # the gate controller's release Event (controller/announce.py)
TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Member:
    """One gang member's moments (seconds since the epoch); None: not (yet) reached."""

    name: str
    created: float
    released: float | None
    scheduled: float | None
    running: float | None
    finished: float | None
    node: str
    phase: str


@dataclass(frozen=True)
class Gang:
    namespace: str
    name: str
    min_available: int
    phase: str  # its PodGroup's status.phase; "" without a PodGroup
    members: tuple[Member, ...]

    @property
    def released(self) -> int:
        return sum(m.released is not None for m in self.members)

    @property
    def running(self) -> int:
        return sum(m.phase == "Running" for m in self.members)

    def waited(self, now: float) -> tuple[float, bool]:
        """The longest wait of a member from creation to release, and whether some member still waits."""
        waits = [(m.released if m.released is not None else now) - m.created for m in self.members]
        return max(waits, default=0.0), any(m.released is None for m in self.members)


def timestamp(text: str | None) -> float | None:
    """An RFC 3339 Time or MicroTime as seconds since the epoch."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None


def _condition(pod: Obj, kind: str) -> float | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return timestamp(condition.get("lastTransitionTime"))
    return None


def _containers(pod: Obj) -> tuple[float | None, float | None]:
    """When the last container started (None unless every one has), and when the last ended (None unless every
    one has)."""
    starts, ends = [], []
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        state = container.get("state") or {}
        starts.append(timestamp((state.get("running") or state.get("terminated") or {}).get("startedAt")))
        ends.append(timestamp((state.get("terminated") or {}).get("finishedAt")))
    return _last(starts), _last(ends)


def _last(moments: list[float | None]) -> float | None:
    known = [m for m in moments if m is not None]
    return max(known) if known and len(known) == len(moments) else None


def _root(pod: Obj) -> tuple[str, str]:
    """The gang root's (kind, name) from the webhook's owner annotation (<group>/<version>/<kind>/<name>)."""
    owner = ((pod.get("metadata") or {}).get("annotations") or {}).get(keys.OWNER_ANNOTATION, "")
    parts = owner.split("/")
    return (parts[-2], parts[-1]) if len(parts) >= 3 else ("", "")


def release_moments(events: Iterable[Obj]) -> dict[tuple[str, str, str], list[float]]:
    """(namespace, kind, name) of the regarded object -> the sorted times of its GangReleased Events."""
    moments: dict[tuple[str, str, str], list[float]] = {}
    for event in events:
        if event.get("reason") != RELEASED_REASON:
            continue
        regarding = event.get("regarding") or {}
        namespace = regarding.get("namespace") or (event.get("metadata") or {}).get("namespace", "")
        times = [timestamp(event.get("eventTime")), timestamp((event.get("series") or {}).get("lastObservedTime"))]
        moments.setdefault((namespace, regarding.get("kind", ""), regarding.get("name", "")), []).extend(
            t for t in times if t is not None)
    return {key: sorted(times) for key, times in moments.items()}


def member(pod: Obj, candidates: list[float]) -> Member:
    """A pod's moments; ``candidates`` are the gang's sorted release moments (Events, then releasedAt)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    created = timestamp(meta.get("creationTimestamp")) or 0.0
    gated = any(g.get("name") == keys.GANG_GATE for g in spec.get("schedulingGates") or [])
    scheduled = _condition(pod, "PodScheduled")
    started, ended = _containers(pod)
    running = started if started is not None else _condition(pod, "Ready")
    released: float | None = None
    if not gated:
        # whole-second creation and bind times: a moment in [created, scheduled + 1s) is this member's
        fits = [t for t in candidates if t >= created and (scheduled is None or t < scheduled + 1)]
        released = max(fits[0] if fits else scheduled if scheduled is not None else created, created)
    phase = status.get("phase", "")
    finished = ended if ended is not None else running if phase in TERMINAL else None

    def after(moment: float | None, floor: float | None) -> float | None:
        return None if moment is None else max(moment, floor if floor is not None else created)

    scheduled = after(scheduled, released)
    running = after(running, scheduled)
    return Member(meta.get("name", ""), created, released, scheduled, running, after(finished, running),
                  spec.get("nodeName", ""), phase)


def gangs(pods: Iterable[Obj], events: Iterable[Obj], podgroups: Iterable[Obj]) -> list[Gang]:
    """Every gang with members among ``pods`` (labelled by the webhook), sorted by namespace and first creation."""
    moments = release_moments(events)
    groups = {(g["metadata"].get("namespace", ""), g["metadata"]["name"]): g for g in podgroups}
    by_gang: dict[tuple[str, str], list[Obj]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        name = (meta.get("labels") or {}).get(keys.POD_GROUP_LABEL)
        if name:
            by_gang.setdefault((meta.get("namespace", ""), name), []).append(pod)
    result = []
    for (namespace, name), members in by_gang.items():
        status = (groups.get((namespace, name)) or {}).get("status") or {}
        targets = {_root(pod) for pod in members} | {("Pod", pod["metadata"]["name"]) for pod in members}
        candidates = sorted(t for kind, target in targets for t in moments.get((namespace, kind, target), ()))
        released_at = timestamp(status.get("releasedAt"))
        views = sorted((member(pod, candidates + ([released_at] if released_at is not None else []))
                        for pod in members), key=lambda m: (m.created, m.name))
        labels = members[0]["metadata"].get("labels") or {}
        minimum = labels.get(keys.POD_GROUP_MIN_LABEL, "")
        result.append(Gang(namespace, name, int(minimum) if minimum.isdigit() else len(views),
                           str(status.get("phase", "")), tuple(views)))
    return sorted(result, key=lambda g: (g.namespace, g.members[0].created, g.name))


def collect(api_client: Any, namespace: str | None) -> tuple[list[Obj], list[Obj], list[Obj]]:
    """Pods, release Events (events.k8s.io/v1, selected by reason on the server) and PodGroups of ``namespace``
    (None: every namespace), as plain JSON. A cluster without the PodGroup CRD has none."""
    from kubenexus.live import get

    scope = f"/namespaces/{namespace}" if namespace else ""
    paths = (f"/api/v1{scope}/pods", f"/apis/events.k8s.io/v1{scope}/events?fieldSelector=reason%3D{RELEASED_REASON}",
             f"/apis/{keys.PODGROUP_API_VERSION}{scope}/{keys.PODGROUP_PLURAL}")
    pods, events, groups = ((get(api_client, path, timeout=30) or {}).get("items") or [] for path in paths)
    return pods, events, groups


def draw(path: str, found: list[Gang], now: float, scope: str) -> None:
    """The picture of ``found`` into the file ``path``."""
    from kubenexus.timeline_html import render

    Path(path).write_text(render(found, now, scope), encoding="utf-8")


def _namespace(args: argparse.Namespace) -> str | None:
    """-A: every namespace; -n: that one; else the kubeconfig context's namespace, else default (as kubectl)."""
    from kubenexus.live import context_namespace

    if args.all_namespaces:
        return None
    return str(args.namespace) if args.namespace else context_namespace(args.kubeconfig)


def run(args: argparse.Namespace) -> int:
    import time

    from kubenexus.errors import CommandError
    from kubenexus.live import connect, existing_namespace

    folder = Path(args.file).absolute().parent
    if not folder.is_dir():
        raise CommandError(f"cannot write {args.file}: directory {folder} does not exist")
    namespace = _namespace(args)
    api_client = connect(args.kubeconfig, pool_size=2)
    if namespace is not None:
        existing_namespace(api_client, namespace)
    found = gangs(*collect(api_client, namespace))
    try:
        draw(args.file, found, time.time(), f"namespace {namespace}" if namespace else "all namespaces")
    except OSError as exc:
        raise CommandError(f"cannot write {args.file}: {exc.strerror}") from None
    members = sum(len(g.members) for g in found)
    print(f"{args.file}: {len(found)} gang(s), {members} member(s)")
    return 0


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "timeline", help="draw each gang's members, waiting -> released -> running, as an HTML/SVG file")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", help="the namespace (default: the kubeconfig context's, else default)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    parser.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    # A positional file, not -o: everywhere else -o names an output format (text|json|yaml).
    parser.add_argument("file", metavar="FILE", help="the HTML file to write")
    parser.set_defaults(func=run)

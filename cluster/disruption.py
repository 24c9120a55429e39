"""kube-controller-manager's disruption controller (``pkg/controller/disruption/disruption.go``): every
PodDisruptionBudget's status, which the eviction subresource (``cluster/eviction.py``) and the scheduler's
preemption (``cluster/preemption.py``) read.

- ``expectedPods`` and ``desiredHealthy``: an integer ``minAvailable`` is the desired count over the pods the
  selector matches (all of them, finished ones too); a percentage ``minAvailable`` or any ``maxUnavailable`` scales
  over the summed scale of the pods' controllers (``getExpectedScale``): a StatefulSet's ``spec.replicas``, or the
  scale subresource of any other controller kind that has one (a Deployment, a custom resource whose CRD declares
  ``subresources.scale``: its ``specReplicasPath``). Percentages round up. A controller kind without a scale
  subresource (a Job: ``jobs.batch does not implement the scale subresource``), a kind not served, or a controller
  that is gone fails the sync; pods without a controller are counted out with an ``UnmanagedPods`` event. (The
  emulator serves no ReplicationControllers or ReplicaSets, so their finders have nothing to find.)
- ``currentHealthy``: matched pods that are Ready (``cluster/pdb.py``), not being deleted, and not in
  ``disruptedPods`` (evictions the apiserver granted, kept until the pod is deleted or for ``DeletionTimeout``,
  2 min; an entry that expires gets a ``NotDeleted`` event on its pod).
- ``disruptionsAllowed`` = currentHealthy - desiredHealthy, never below 0, and 0 while no pod is expected;
  ``observedGeneration`` and the ``DisruptionAllowed`` condition with it. A failed sync (``failSafe``) writes
  ``disruptionsAllowed`` 0 and ``DisruptionAllowed`` False (``SyncFailed``, the error as message) and keeps the
  rest, observedGeneration included.
- The status is written whole with the object's resourceVersion (``UpdateStatus``): a conflict with an eviction's
  decrement is retried on the next pass, from the fresh object.

Events name the selector as JSON where upstream prints the Go struct. The stale-DisruptionTarget cleanup
(``syncStalePodDisruption``) is not emulated.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from typing import Any

from cluster.operators.base import GVR, PODS, STATEFULSETS, Operator, controller_of, url
from cluster.pdb import DISRUPTION_ALLOWED, SYNC_FAILED, is_pod_ready, selects, set_condition, with_disruption_allowed
from cluster.selectors import SelectorError, selector_from_dict
from cluster.store import Obj, parse_time
from cluster.tables import json_path

PDBS: GVR = ("policy", "v1", "poddisruptionbudgets")
CRDS: GVR = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")
DELETION_TIMEOUT = datetime.timedelta(minutes=2)
#: built-in kinds whose scale subresource is ``spec.replicas`` (defaulted to 1)
_BUILTIN_SCALE = {("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "ReplicaSet"),
                  ("", "ReplicationController")}


class DisruptionError(Exception):
    """Why a budget's status cannot be computed (the sync error ``failSafe`` records)."""


def scaled(value: Any, total: int) -> int:
    """``intstr.GetScaledValueFromIntOrPercent`` rounding up: an integer as is, ``"N%"`` of ``total``."""
    if isinstance(value, int):
        return value
    text = str(value)
    if not text.endswith("%"):
        raise DisruptionError("invalid value for IntOrString: invalid type: string is not a percentage")
    digits = text[:-1]
    if not re.fullmatch(r"[+-]?[0-9]+", digits):
        raise DisruptionError(f'invalid value for IntOrString: invalid value "{text}": strconv.Atoi: parsing '
                              f'"{digits}": invalid syntax')
    return math.ceil(int(digits) * total / 100)


def disrupted_pods(pods: list[Obj], recorded: dict[str, str], clock: datetime.datetime) -> tuple[dict[str, str],
                                                                                                  list[Obj]]:
    """``buildDisruptedPodMap``: the entries still awaited (their pod exists, is not being deleted, and the
    deletion timeout has not passed), and the pods whose entry expired."""
    kept, expired = {}, []
    for pod in pods:
        name = pod["metadata"]["name"]
        if pod["metadata"].get("deletionTimestamp") or name not in recorded:
            continue
        try:
            since = parse_time(recorded[name])
        except ValueError:
            continue
        if since + DELETION_TIMEOUT < clock:
            expired.append(pod)
        else:
            kept[name] = recorded[name]
    return kept, expired


def count_healthy(pods: list[Obj], disrupted: dict[str, str]) -> int:
    """``countHealthyPods`` (``disrupted`` holds only entries within their timeout)."""
    return sum(1 for p in pods if not p["metadata"].get("deletionTimestamp") and p["metadata"]["name"] not in disrupted
               and is_pod_ready(p))


def disruptions_allowed(current: int, desired: int, expected: int) -> int:
    """``updatePdbStatus``: a budget that expects no pods allows nothing (its first pods may not be counted yet)."""
    return 0 if expected <= 0 else max(0, current - desired)


class DisruptionController(Operator):
    root = PDBS
    identity = ("kube-system", "disruption-controller")

    def sync(self, pdb: Obj) -> None:
        try:
            pods = self._pods(pdb)
            if not pods:
                self.event(pdb, "NoPods", "No matching pods found", type_="Normal")
            expected, desired, unmanaged = self._expected_pod_count(pdb, pods)
        except DisruptionError as exc:
            self._fail_safe(pdb, str(exc))
            return
        if unmanaged:
            self.event(pdb, "UnmanagedPods", f"Pods selected by this PodDisruptionBudget (selector: "
                                             f"{json.dumps((pdb.get('spec') or {}).get('selector'))}) were found to "
                                             "be unmanaged. As a result, the status of the PDB cannot be calculated "
                                             "correctly, which may result in undefined behavior. To account for these "
                                             'pods please set ".spec.minAvailable" field of the PDB to an integer '
                                             "value.")
        status = pdb.get("status") or {}
        disrupted, expired = disrupted_pods(pods, status.get("disruptedPods") or {},
                                            datetime.datetime.now(datetime.UTC))
        namespace = pdb["metadata"]["namespace"]
        for pod in expired:
            self.event(pod, "NotDeleted", f"Pod was expected by PDB {namespace}/{namespace} to be deleted but it "
                                          "wasn't")  # sic: upstream names the namespace twice
        current = count_healthy(pods, disrupted)
        new: Obj = {"observedGeneration": pdb["metadata"].get("generation", 1),
                    "disruptionsAllowed": disruptions_allowed(current, desired, expected), "currentHealthy": current,
                    "desiredHealthy": desired, "expectedPods": expected, "conditions": status.get("conditions") or []}
        if disrupted:
            new["disruptedPods"] = disrupted
        self._write(pdb, with_disruption_allowed(new))

    def _pods(self, pdb: Obj) -> list[Obj]:
        """``getPodsForPdb``: the pods of the namespace the selector matches (an invalid selector fails the sync)."""
        selector = (pdb.get("spec") or {}).get("selector")
        if selector is not None:
            try:
                selector_from_dict(selector)
            except SelectorError as exc:
                self.event(pdb, "NoPods", f"Failed to get pods: {exc}")
                raise DisruptionError(str(exc)) from None
        return [p for p in self.items(PODS, pdb["metadata"]["namespace"]) if selects(pdb, p)]

    def _expected_pod_count(self, pdb: Obj, pods: list[Obj]) -> tuple[int, int, list[str]]:
        """``getExpectedPodCount``: (expectedPods, desiredHealthy, unmanaged pods)."""
        spec = pdb.get("spec") or {}
        try:
            if spec.get("maxUnavailable") is not None:
                expected, unmanaged = self._expected_scale(pods)
                return expected, max(0, expected - scaled(spec["maxUnavailable"], expected)), unmanaged
            if isinstance(spec.get("minAvailable"), int):
                return len(pods), spec["minAvailable"], []
            if spec.get("minAvailable") is not None:
                expected, unmanaged = self._expected_scale(pods)
                return expected, scaled(spec["minAvailable"], expected), unmanaged
        except DisruptionError as exc:
            self.event(pdb, "CalculateExpectedPodCountFailed",
                       f"Failed to calculate the number of expected pods: {exc}")
            raise
        return 0, 0, []

    def _expected_scale(self, pods: list[Obj]) -> tuple[int, list[str]]:
        """``getExpectedScale``: the scales of the pods' controllers, each counted once; pods without one apart."""
        scales: dict[str, int] = {}
        unmanaged = []
        for pod in pods:
            ref = controller_of(pod)
            if ref is None:
                unmanaged.append(pod["metadata"]["name"])
                continue
            if ref.get("uid") in scales:
                continue
            found = self._scale(ref, pod["metadata"]["namespace"])
            if found is None:
                raise DisruptionError(f'found no controllers for pod "{pod["metadata"]["name"]}"')
            scales[found[0]] = found[1]
        return sum(scales.values()), unmanaged

    def _scale(self, ref: Obj, namespace: str) -> tuple[str, int] | None:
        """The finders: a StatefulSet's replicas, else the controller's scale subresource; (uid, scale), or None
        when that controller does not exist (any more)."""
        api_version, kind = str(ref.get("apiVersion", "")), str(ref.get("kind", ""))
        group, _, version = api_version.rpartition("/")
        if (group, kind) == ("apps", "StatefulSet"):
            sts = self.get(STATEFULSETS, namespace, str(ref.get("name")))
            return (sts["metadata"]["uid"], (sts.get("spec") or {}).get("replicas", 1)) \
                if sts is not None and sts["metadata"]["uid"] == ref.get("uid") else None
        resource = self.api.registry.by_kind(api_version, kind)
        if resource is None:
            raise DisruptionError(f'no matches for kind "{kind}" in version "{api_version}"')
        path, default = (".spec.replicas", 1) if (group, kind) in _BUILTIN_SCALE else (self._replicas_path(
            group, version, resource.plural), 0)
        if not path:
            raise DisruptionError(f"{resource.plural}.{group} does not implement the scale subresource" if group
                                  else f"{resource.plural} does not implement the scale subresource")
        owner = self.get((group, version, resource.plural), namespace, str(ref.get("name")))
        if owner is None or owner["metadata"]["uid"] != ref.get("uid"):
            return None
        found = json_path(path, owner)
        return owner["metadata"]["uid"], found[0] if found and isinstance(found[0], int) else default

    def _replicas_path(self, group: str, version: str, plural: str) -> str:
        """A custom resource's ``subresources.scale.specReplicasPath`` in this version of its CRD, "" without."""
        for crd in self.items(CRDS):
            spec = crd.get("spec") or {}
            if spec.get("group") == group and (spec.get("names") or {}).get("plural") == plural:
                for served in spec.get("versions") or []:
                    if served.get("name") == version:
                        return str(((served.get("subresources") or {}).get("scale") or {}).get("specReplicasPath")
                                   or "")
        return ""

    def _fail_safe(self, pdb: Obj, message: str) -> None:
        """``failSafe``: no disruption allowed, and why."""
        status = {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0,
                  **(pdb.get("status") or {})}
        status["disruptionsAllowed"] = 0
        status["conditions"] = set_condition(status.get("conditions"), DISRUPTION_ALLOWED, "False", SYNC_FAILED,
                                             message, status.get("observedGeneration") or 0)
        self._write(pdb, status)

    def _write(self, pdb: Obj, status: Obj) -> None:
        """``UpdateStatus``: the whole status, conditional on the resourceVersion read; nothing when unchanged."""
        if status == (pdb.get("status") or {}):
            return
        meta = pdb["metadata"]
        self.client.call("PUT", url(PDBS, meta["namespace"], meta["name"], "status"), {**pdb, "status": status})

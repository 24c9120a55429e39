"""Best-effort gangs: released on a plan that ignores what the controller cannot check, never pinned against it.

A pin is a required node-affinity term on the planned node. For a member whose pod affinity or hard topology
spread the plan did not evaluate, the planned node may be one the scheduler must refuse: pinned there, the pod
would stay Pending for good. Such members are released unpinned; the others of the gang keep their pins.
"""

from __future__ import annotations

import pytest

from controller.engine import Engine, Verdict
from controller.release import release_patch
from controller.state import ClusterState
from gang import keys
from gang.config import Config
from tests.support.contract import OWNER
from tests.support.state_objects import node, pod, root, watch_roots

pytestmark = pytest.mark.unit

SPREAD = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
           "labelSelector": {"matchLabels": {"app": "ps"}}}]


def test_members_the_plan_could_not_check_are_released_unpinned_the_rest_pinned() -> None:
    state = ClusterState()
    for name in ("a", "b"):
        state.upsert_node(node(name))
    spread, plain = pod("ps-0", "2", gated=True), pod("worker-0", "2", gated=True)
    spread["spec"]["topologySpreadConstraints"] = SPREAD
    watch_roots(state, root("kubeflow.org/v1", "TFJob", "job", "root-1"))
    for obj in (spread, plain):
        obj["metadata"]["annotations"][OWNER] = "kubeflow.org/v1/TFJob/job"
        state.upsert_pod(obj)

    engine = Engine(state, Config())
    held = engine.cycle(1e10)
    assert [d.decision for d in held.gangs] == ["not-certifiable"] and not held.releases

    state.upsert_root("kubeflow.org", "TFJob", root("kubeflow.org/v1", "TFJob", "job", "root-1",
                                                    {keys.BEST_EFFORT: "true"}))  # the user's edit, as watched
    cycle = engine.cycle(1e10)
    (decision,) = cycle.gangs
    assert decision.decision == Verdict.RELEASE and "released unpinned" in decision.reason
    pins = {r.pod.name: r.pin for r in cycle.releases}
    assert pins == {"ps-0": False, "worker-0": True}
    for release, obj in zip(sorted(cycle.releases, key=lambda r: r.pod.name), (spread, plain), strict=True):
        patch = release_patch(obj, release.node, (), release.pin)
        touched = {op["path"] for op in patch if op["op"] != "test"}
        assert ("/spec/affinity" in touched) == release.pin, patch
        assert release.node in {"a", "b"}


def test_with_pinning_off_nothing_is_pinned() -> None:
    state = ClusterState()
    state.upsert_node(node("a"))
    for i in range(2):
        state.upsert_pod(pod(f"w-{i}", "2", gated=True))
    cycle = Engine(state, Config(pin_members=False)).cycle(1e10)
    assert [r.pin for r in cycle.releases] == [False, False]

"""The owner cache keeps only what decisions read: every operator scenario decides the same on full owners
(as the apiserver returns them, with managedFields, status, last-applied-configuration and whole pod
templates) and on owners decoded slim (gang/slim.py), in the webhook (``decide``) and in the controller
(``resolve``); and the controller's watch of roots (controller/slim.py, controller/roots.py) keeps every annotation
the contract reads on roots, as the webhook's owner reads do."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from controller import slim as controller_slim
from controller.members import pod_view
from controller.owners import resolve
from controller.roots import snapshot
from gang import keys, slim
from gang.adapters.table import ADAPTERS, adapter_for
from gang.config import Config
from gang.decide import Action, decide
from gang.kinds import INTERMEDIATE, NAMESPACE, Kind, split_api_version
from gang.mutate import desired_pod
from gang.objects import MemorySource
from kube.owner_cache import deep_size
from tests.support.contract import OPT_IN
from tests.support.operator_fixtures import as_returned
from tests.support.operator_scenarios import SCENARIOS

pytestmark = pytest.mark.unit

Obj = dict[str, Any]
NS = "team-a"
def kind_of(obj: Obj) -> Kind:
    group, _ = split_api_version(obj["apiVersion"])
    adapter = adapter_for(obj["apiVersion"], obj["kind"])
    if adapter is not None:
        return adapter.kind
    if (group, obj["kind"]) == (NAMESPACE.group, NAMESPACE.kind):
        return NAMESPACE
    return INTERMEDIATE[(group, obj["kind"])]


def slimmed(obj: Obj) -> Obj:
    return slim.decode(kind_of(obj), json.dumps(obj).encode())


# Every annotation the contract reads on roots, from its one definition (gang/keys.py): ours, those it honours, and
# each per-role prefix with a role. Not written out here: a key added there is in ALL_READ at once, and
# test_every_root_annotation_the_contract_reads_has_a_value fails until VALUES gives it a value it means.
ROLE_PREFIXES = tuple(value for name, value in vars(keys).items() if name.endswith("_ROLE_PREFIX"))
READ_KEYS = (*keys.ROOT_ANNOTATIONS, *keys.HONOURED_ROOT_ANNOTATIONS, *(prefix + "worker" for prefix in ROLE_PREFIXES))
VALUES = {OPT_IN: "true", keys.MIN_AVAILABLE: "2", keys.GROUP_NAME: "renamed", keys.SCHEDULE_TIMEOUT_SECONDS: "600",
          keys.BEST_EFFORT: "true", keys.TOPOLOGY_REQUIRED: "example.com/zone",
          keys.TOPOLOGY_PREFERRED: "example.com/rack", keys.QUEUE: "research",
          f"{keys.TOPOLOGY_REQUIRED_ROLE_PREFIX}worker": "example.com/zone",
          keys.JOBSET_EXCLUSIVE_TOPOLOGY: "example.com/rack"}
NOT_OURS = "example.com/not-ours"
ALL_READ = {**{key: VALUES.get(key, "1") for key in READ_KEYS}, NOT_OURS: "x"}
CASES = [(name, ann, label) for name in SCENARIOS for ann in (ALL_READ, {}) for label in (None, "enabled", "disabled")]


@pytest.mark.parametrize("name, ann, label", CASES)
def test_decisions_on_full_and_slim_owners_are_the_same(name: str, ann: Obj, label: str | None) -> None:
    scenario = SCENARIOS[name](NS, ann)
    namespace: Obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    if label:
        namespace["metadata"]["labels"] = {keys.GANG_SCHEDULING: label}
    full = [as_returned(o) for o in [*scenario.owners, namespace]]
    thin = [slimmed(o) for o in full]
    assert sum(len(json.dumps(o)) for o in thin) * 10 < sum(len(json.dumps(o)) for o in full)
    full_source, thin_source = MemorySource(full), MemorySource(thin)
    for config in (Config(), Config(auto_inject="all")):
        decision = decide(scenario.pod, NS, full_source, config)
        assert decide(scenario.pod, NS, thin_source, config) == decision
        if decision.action is not Action.GANG:
            continue
        # The controller: the root's constraints from its watch, and a pod admission left unresolved.
        admitted = desired_pod(scenario.pod, decision, config)
        admitted["metadata"].setdefault("namespace", NS)
        view = pod_view(admitted)
        root = next(o for o in full if adapter_for(o["apiVersion"], o["kind"]) is not None)
        listed = controller_slim.ROOTS.page(json.dumps({"metadata": {}, "items": [root]}).encode())["items"]
        read = dict(snapshot(listed).constraints(view))  # type: ignore[arg-type]
        assert read == {k: v for k, v in root["metadata"]["annotations"].items() if keys.read_on_roots(k)}
        assert set(read) >= set(ann) - {NOT_OURS}, "every key read on roots kept (values: the root's own, above)"
        assert dict(snapshot(full).constraints(view)) == read  # type: ignore[arg-type]
        assert {k: v for k, v in slimmed(root)["metadata"].get("annotations", {}).items()} == read
        unresolved_pod = {**copy.deepcopy(scenario.pod), "metadata": {
            **copy.deepcopy(scenario.pod["metadata"]), "namespace": NS, "uid": "pod-uid"}}
        assert resolve(unresolved_pod, thin_source, config) == resolve(unresolved_pod, full_source, config)


def test_every_root_annotation_the_contract_reads_has_a_value() -> None:
    """ALL_READ is derived from gang/keys.py; a key read on roots that it lacks, or that has no value of its own in
    VALUES, would go unchecked by the comparison above."""
    spelled = {value for value in vars(keys).values() if isinstance(value, str) and keys.read_on_roots(value)}
    assert spelled <= {keys.PREFIX, *keys.ROOT_ANNOTATIONS, *keys.HONOURED_ROOT_ANNOTATIONS, *ROLE_PREFIXES}, \
        "a key read on roots that is in neither ROOT_ANNOTATIONS nor HONOURED_ROOT_ANNOTATIONS"
    assert ROLE_PREFIXES == (keys.TOPOLOGY_REQUIRED_ROLE_PREFIX,)
    assert sorted(VALUES) == sorted(READ_KEYS), "give each key read on roots a value in VALUES"
    assert all(keys.read_on_roots(key) for key in READ_KEYS) and not keys.read_on_roots(NOT_OURS)


def test_every_kind_the_walk_reads_has_a_slim_shape() -> None:
    walked = {(a.kind.group, a.kind.kind) for a in ADAPTERS} | set(INTERMEDIATE) | {(NAMESPACE.group, NAMESPACE.kind)}
    assert walked <= slim.shaped_kinds()


def test_slim_owners_are_small() -> None:
    """A 50 KiB PyTorchJob (big pod templates, kubectl's annotation, managedFields) is a few KiB in memory."""
    scenario = SCENARIOS["training-PyTorchJob"](NS, {OPT_IN: "true"})
    full = as_returned(scenario.owners[0])
    full["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] += " " * 35_000
    body = json.dumps(full).encode()
    assert len(body) > 50 * 1024
    thin, whole = deep_size(slim.decode(kind_of(full), body)), deep_size(json.loads(body))
    assert thin < 4 * 1024 and thin * 30 < whole, (thin, whole)


@pytest.mark.parametrize("surprise", [
    {"pytorchReplicaSpecs": ["Master", "Worker"]},  # a list where a map belongs
    {"pytorchReplicaSpecs": {"Master": "one"}},
    {"runPolicy": "strict", "pytorchReplicaSpecs": {"Worker": {"replicas": "3"}}},
])
def test_an_owner_of_unexpected_structure_is_kept_whole_and_decides_the_same(surprise: Obj) -> None:
    scenario = SCENARIOS["training-PyTorchJob"](NS, {OPT_IN: "true"})
    job = as_returned(scenario.owners[0])
    job["spec"].update(surprise)
    decoded = slimmed(job)
    assert decoded["spec"] == job["spec"] or decoded["spec"]["pytorchReplicaSpecs"] == surprise["pytorchReplicaSpecs"]
    assert decide(scenario.pod, NS, MemorySource([decoded]), Config()) == decide(
        scenario.pod, NS, MemorySource([job]), Config())


def test_invalid_json_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        slim.decode(NAMESPACE, b'{"metadata": ')

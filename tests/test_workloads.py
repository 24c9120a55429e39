"""One home per operator kind: every registered kind (``workloads.KINDS``) is one folder, and what the rest of the
repository says about the kinds (RBAC, webhook rules, the emulator's CRDs and operators, the docs' table of
supported operators, the adapter table) is its records' and nothing else."""

from __future__ import annotations

import importlib
import importlib.util
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster.crds import crd_manifests
from cluster.operators.base import PODS, Operator
from cluster.operators.table import OPERATORS
from gang.adapters.base import WorkloadAdapter
from gang.adapters.table import ADAPTERS
from workloads import KINDS, readme, records
from workloads.record import Workload

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
RECORDS = records()
ROOTS = [(record, r) for record in RECORDS.values() for r in record.roots]

Obj = dict[str, Any]


def deploy(name: str) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all((ROOT / "deploy" / "base" / name).read_text()) if doc]


def one(objects: list[Obj], kind: str, name: str) -> Obj:
    [found] = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


# --- the folders -------------------------------------------------------------------------------------------------


def test_every_kind_folder_is_registered_once() -> None:
    folders = {p.parent.name for p in (ROOT / "workloads").glob("*/__init__.py")}
    assert len(set(KINDS)) == len(KINDS) and set(KINDS) == folders


@pytest.mark.parametrize("name", KINDS)
def test_a_kind_is_a_record_and_its_adapters(name: str) -> None:
    record = RECORDS[name]
    assert isinstance(record, Workload) and record.roots and record.readme
    adapters = importlib.import_module(f"workloads.{name}.adapter").ADAPTERS
    assert adapters and all(isinstance(a, WorkloadAdapter) for a in adapters)
    # the adapters serve exactly the record's roots, at its version when they serve only some
    assert {(a.kind.group, a.kind.kind, a.kind.plural) for a in adapters} == {
        (r.group, r.kind, r.plural) for r in record.roots}
    for adapter in adapters:
        [root] = [r for r in record.roots if (r.group, r.kind) == (adapter.kind.group, adapter.kind.kind)]
        assert adapter.api_versions is None or root.version in adapter.api_versions, adapter
        assert adapter.kind.namespaced == root.namespaced


@pytest.mark.parametrize("name", KINDS)
def test_a_custom_kind_has_its_operators_in_the_emulator(name: str) -> None:
    """A kind whose roots need a CRD has an emulator module with its operators, each reconciling one of the kind's
    roots (or the pods of a stage: a Spark driver's, an LWS leader's); a built-in kind (batch) is run by the
    emulator's built-in controllers and has none."""
    record = RECORDS[name]
    crd_roots = {(r.group, r.version, r.plural) for r in record.roots if r.crd}
    if importlib.util.find_spec(f"workloads.{name}.emulator") is None:
        assert not crd_roots, f"workloads/{name}/emulator.py: nothing emulates {crd_roots}"
        return
    operators = importlib.import_module(f"workloads.{name}.emulator").OPERATORS
    assert operators and all(issubclass(cls, Operator) for cls in operators.values())
    assert {cls.root for cls in operators.values()} - {PODS} <= crd_roots
    assert all(OPERATORS[op] is cls for op, cls in operators.items())


def test_adapter_entries_never_collide() -> None:
    """Two adapters serve one kind only at disjoint versions (MPIJob v1 and v2beta1), so the table's order decides
    nothing."""
    versions: dict[tuple[str, str], list[tuple[str, ...] | None]] = defaultdict(list)
    for adapter in ADAPTERS:
        versions[(adapter.kind.group, adapter.kind.kind)].append(adapter.api_versions)
    for kind, served in versions.items():
        if len(served) > 1:
            assert None not in served, kind
            flat = [v for vs in served for v in vs or ()]
            assert len(flat) == len(set(flat)), kind


@pytest.mark.parametrize("name", KINDS)
def test_examples_parse_and_are_listed(name: str) -> None:
    folder = ROOT / "workloads" / name / "examples"
    files = {p.name for p in folder.glob("*.yaml")}
    listed = {f for example in RECORDS[name].examples for f in (example.pod, example.objects)}
    assert files == listed
    for file in files:
        docs = [doc for doc in yaml.safe_load_all((folder / file).read_text()) if doc]
        assert docs and all({"apiVersion", "kind", "metadata"} <= set(doc) for doc in docs), file
    for example in RECORDS[name].examples:
        [pod] = [doc for doc in yaml.safe_load_all((folder / example.pod).read_text()) if doc]
        assert pod["kind"] == "Pod"


# --- what the rest of the repository says about the kinds --------------------------------------------------------


def granted(role: Obj) -> set[tuple[str, str, str]]:
    """(group, resource, verb) a ClusterRole grants on every object of the resource (no resourceNames)."""
    return {(group, resource, verb) for rule in role["rules"] if not rule.get("resourceNames")
            for group in rule["apiGroups"] for resource in rule["resources"] for verb in rule["verbs"]}


@pytest.mark.parametrize("role, verbs", [("kubenexus-webhook", "webhook_verbs"),
                                         ("kubenexus-controller", "controller_verbs")])
def test_rbac_on_roots_is_what_the_records_ask(role: str, verbs: str) -> None:
    rules = granted(one(deploy("rbac.yaml"), "ClusterRole", role))
    roots = {(r.group, r.plural) for _, r in ROOTS}
    on_roots = {(group, resource, verb) for group, resource, verb in rules if (group, resource) in roots}
    assert on_roots == {(r.group, r.plural, verb) for record, r in ROOTS for verb in getattr(record, verbs)}


def test_the_validating_webhook_covers_exactly_the_records_roots() -> None:
    configuration = one(deploy("webhookconfigurations.yaml"), "ValidatingWebhookConfiguration",
                        "kubenexus-gang-admission")
    [hook] = [h for h in configuration["webhooks"] if h["name"] == "validate-roots.kubenexus.io"]
    covered = [(group, version, resource, operation, rule["scope"]) for rule in hook["rules"]
               for group in rule["apiGroups"] for version in rule["apiVersions"] for resource in rule["resources"]
               for operation in rule["operations"]]
    assert len(covered) == len(set(covered))
    assert set(covered) == {(r.group, "*", r.plural, operation, "Namespaced" if r.namespaced else "Cluster")
                            for record, r in ROOTS if record.validated for operation in ("CREATE", "UPDATE")}


def test_the_emulators_crds_are_the_records() -> None:
    served = [(crd["spec"]["group"], crd["spec"]["versions"][0]["name"], crd["spec"]["names"]["kind"],
               crd["spec"]["names"]["plural"], tuple(crd["spec"]["names"].get("shortNames", ())),
               crd["spec"]["scope"] == "Namespaced") for crd in crd_manifests()]
    wanted = [(r.group, r.version, r.kind, r.plural, r.short_names, r.namespaced)
              for record in RECORDS.values() for r in record.crds()]
    assert served == wanted


def test_the_operators_table_is_generated_from_the_records() -> None:
    text = readme.PAGE.read_text(encoding="utf-8")  # docs/reference/operators.md
    assert readme.rendered(text) == text, "run `python -m workloads.readme`"
    assert readme.table().count("\n") == 1 + sum(len(record.readme) for record in RECORDS.values())

"""The documentation site against the code: every annotation and label (gang/keys.py), configuration key
(gang/config.py), command (kubenexus/cli.py), metric (controller/metrics.py, webhook/metrics.py), event reason
(controller/), PodGroup and Queue field (deploy/base/podgroup-crd.yaml, queue-crd.yaml) the code defines is the first
column of a row of its reference page, and nothing else is; the version has its CHANGELOG section and its upgrade
notes. Each list is read from the code, never written out here. (`mkdocs build --strict` in `make test` checks the
links and the navigation.)
"""

from __future__ import annotations

import argparse
import ast
import re

import pytest
import yaml

from gang import config, keys
from kubenexus import cli
from tools.release import ROOT, version

pytestmark = pytest.mark.unit

REFERENCE = ROOT / "docs" / "reference"
KEY = re.compile(r"[a-z0-9.-]+/[A-Za-z0-9._-]*[A-Za-z0-9]")  # a label or annotation key: prefix/name
METRIC_TYPES = {"Counter", "Gauge", "Histogram", "Summary"}


def documented(page: str) -> set[str]:
    """The backquoted names in the first column of every table row of a reference page (its header aside)."""
    rows = [line for line in (REFERENCE / page).read_text().splitlines() if line.startswith("| ")]
    return {name for row in rows[1:] for name in re.findall(r"`([^`]+)`", row.split("|")[1])}


def defined_keys() -> set[str]:
    return {value for name, value in vars(keys).items()
            if isinstance(value, str) and KEY.fullmatch(value) and not name.startswith("PODGROUP_")}


def defined_commands() -> set[str]:
    def walk(parser: argparse.ArgumentParser, words: str) -> set[str]:
        found: set[str] = set()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found |= {f"{words} {name}"} | walk(sub, f"{words} {name}")
        return found

    return walk(cli.parser(), "kubenexus")


def defined_metrics() -> set[str]:
    names = set()
    for module in ("controller/metrics.py", "webhook/metrics.py"):
        for node in ast.walk(ast.parse((ROOT / module).read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in METRIC_TYPES:
                first = node.args[0]
                assert isinstance(first, ast.Constant), ast.dump(node)
                names.add(first.value)
    return names


def defined_event_reasons() -> set[str]:
    return {node.value for path in sorted((ROOT / "controller").glob("*.py"))
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and re.fullmatch(r"Gang[A-Z][A-Za-z]+", node.value)}


def defined_crd_fields(file: str, nested: bool = False) -> set[str]:
    """The fields of a CRD's spec and status; ``nested``: those of their objects' own properties instead of the
    objects (not of an atomic object, such as a label selector)."""
    crd = yaml.safe_load((ROOT / "deploy/base" / file).read_text())
    [served] = crd["spec"]["versions"]
    schema = served["schema"]["openAPIV3Schema"]["properties"]

    def fields(path: str, node: dict) -> set[str]:
        if nested and node.get("properties") and node.get("x-kubernetes-map-type") != "atomic":
            return {field for name, child in node["properties"].items() for field in fields(f"{path}.{name}", child)}
        return {path}

    return {field for part in ("spec", "status") for name, child in schema[part]["properties"].items()
            for field in fields(f"{part}.{name}", child)}


@pytest.mark.parametrize(("page", "defined"), [
    ("annotations.md", defined_keys),
    ("configuration.md", lambda: {path for path, _, _ in config._FIELDS}),
    ("cli.md", defined_commands),
    ("metrics.md", defined_metrics),
    ("events.md", defined_event_reasons),
    ("podgroup.md", lambda: defined_crd_fields("podgroup-crd.yaml")),
    ("queue.md", lambda: defined_crd_fields("queue-crd.yaml", nested=True)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_the_reference_lists_what_the_code_defines(page: str, defined: object) -> None:
    code = defined()  # type: ignore[operator]
    assert code, f"nothing read from the code for {page}"
    docs = documented(page)
    assert not code - docs, f"defined in the code, missing from docs/reference/{page}: {sorted(code - docs)}"
    assert not docs - code, f"in docs/reference/{page}, not defined in the code: {sorted(docs - code)}"


def test_the_lists_are_read_from_the_code() -> None:
    assert "kubenexus.io/gang-scheduling" in defined_keys() and "scheduling.kubenexus.io/v1alpha1" not in defined_keys()
    assert {"kubenexus certs ensure", "kubenexus cluster serve"} <= defined_commands()
    assert "kubenexus_controller_gangs_not_scheduled" in defined_metrics()
    assert {"GangNotScheduled", "GangMemberEscaped", "GangReleased"} <= defined_event_reasons()
    queue = defined_crd_fields("queue-crd.yaml", nested=True)
    assert {"spec.fairSharing.weight", "spec.namespaceSelector", "status.conditions"} <= queue
    assert not {"spec.fairSharing", "spec.namespaceSelector.matchLabels"} & queue


def test_every_version_has_its_changelog_section_and_upgrade_notes() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    sections = re.findall(r"^## \[([^\]]+)\]", changelog, re.MULTILINE)
    assert sections[0] == "Unreleased" and version() in sections, sections
    notes = re.findall(r"^### (\S+)$", (ROOT / "docs/tasks/upgrade.md").read_text(), re.MULTILINE)
    assert notes == sections, "docs/tasks/upgrade.md: one section of notes per CHANGELOG section, in its order"

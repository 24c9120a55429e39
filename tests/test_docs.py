"""The documentation site against the code: every annotation and label (gang/keys.py, and a key of our domains
wherever the product defines one), configuration key (gang/config.py), command (kubenexus/cli.py), metric
(controller/metrics.py, webhook/metrics.py), event reason (every component that records Events), PodGroup and Queue
field (deploy/base/podgroup-crd.yaml, queue-crd.yaml) the code defines is the first column of a row of its reference
page, and nothing else is; the version has its CHANGELOG section and its upgrade notes, and is the one the docs'
commands name. Each list is read from the code, never written out here. (`mkdocs build --strict` in `make test`
checks the links and the navigation.)
"""

from __future__ import annotations

import argparse
import ast
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from gang import config, keys
from kubenexus import cli
from tools.release import ROOT, version

pytestmark = pytest.mark.unit

REFERENCE = ROOT / "docs" / "reference"
KEY = re.compile(r"[a-z0-9.-]+/[A-Za-z0-9._-]*[A-Za-z0-9]")  # a label or annotation key: prefix/name
METRIC_TYPES = {"Counter", "Gauge", "Histogram", "Summary"}
API_VERSION = re.compile(r"v\d+((alpha|beta)\d+)?")  # the name part of group/version: not a key
REASON = re.compile(r"Gang[A-Z][A-Za-z]+")


def documented(page: str) -> set[str]:
    """The backquoted names in the first column of every table row of a reference page (its header aside)."""
    rows = [line for line in (REFERENCE / page).read_text().splitlines() if line.startswith("| ")]
    return {name for row in rows[1:] for name in re.findall(r"`([^`]+)`", row.split("|")[1])}


def product_modules() -> list[Path]:
    """Every module of the shipped packages (pyproject.toml's) but the local cluster: test equipment, not product."""
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = sorted({pattern.rstrip("*") for pattern in include} - {"cluster"})
    return [path for package in packages for path in sorted((ROOT / package).rglob("*.py"))]


def strings(path: Path) -> set[str]:
    """Every string literal of a module."""
    return {str(node.value) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def ours(key: str) -> bool:
    """A key of our domains (kubenexus.io and its subdomains), not a group/version."""
    domain, name = key.split("/", 1)
    return (domain == "kubenexus.io" or domain.endswith(".kubenexus.io")) and not API_VERSION.fullmatch(name)


def defined_keys() -> set[str]:
    """gang/keys.py's (the contract's, other projects' keys it honours included), and every key of our domains any
    module of the product spells (as certs/store.py does the certificate Secret's)."""
    contract = {value for name, value in vars(keys).items()
                if isinstance(value, str) and KEY.fullmatch(value) and not name.startswith("PODGROUP_")}
    elsewhere = {value for path in product_modules() for value in strings(path) if KEY.fullmatch(value) and ours(value)}
    return contract | elsewhere


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


def recorders() -> set[str]:
    """The packages whose code records Events: those with a module that makes an ``EventRecorder``."""
    return {path.relative_to(ROOT).parts[0] for path in product_modules()
            if any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "EventRecorder"
                   for node in ast.walk(ast.parse(path.read_text())))}


def defined_event_reasons() -> set[str]:
    """Every ``Gang...`` reason spelled in a package that records Events (the controller's, the webhook's)."""
    packages = recorders()
    return {value for path in product_modules() if path.relative_to(ROOT).parts[0] in packages
            for value in strings(path) if REASON.fullmatch(value)}


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
    assert "certs.kubenexus.io/ca-bundle-published-at" in defined_keys()  # certs/store.py's
    assert {"kubenexus certs ensure", "kubenexus cluster serve"} <= defined_commands()
    assert "kubenexus_controller_gangs_not_scheduled" in defined_metrics()
    assert {"GangNotScheduled", "GangMemberEscaped", "GangReleased", "GangSchedulingSkipped"} <= defined_event_reasons()
    assert {"controller", "webhook"} <= recorders() and "kubenexus" not in recorders()  # doctor reads reasons only
    queue = defined_crd_fields("queue-crd.yaml", nested=True)
    assert {"spec.fairSharing.weight", "spec.namespaceSelector", "status.conditions"} <= queue
    assert not {"spec.fairSharing", "spec.namespaceSelector.matchLabels"} & queue


def test_every_version_has_its_changelog_section_and_upgrade_notes() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    sections = re.findall(r"^## \[([^\]]+)\]", changelog, re.MULTILINE)
    assert sections[0] == "Unreleased" and version() in sections, sections
    dated = re.findall(r"^## \[(\d[^\]]*)\] - (\d{4}-\d{2}-\d{2})$", changelog, re.MULTILINE)
    assert [v for v, _ in dated] == sections[1:], "CHANGELOG.md: every released section is '## [X.Y.Z] - YYYY-MM-DD'"
    assert [d for _, d in dated] == sorted((d for _, d in dated), reverse=True), "newest release first"
    # "### Unreleased", "### 0.1.0 → 0.2.0" (from the version before, which is the next section), "### 0.1.0"
    notes = re.findall(r"^### (?:(\S+) → )?(\S+)$", (ROOT / "docs/tasks/upgrade.md").read_text(), re.MULTILINE)
    assert [to for _, to in notes] == sections, "docs/tasks/upgrade.md: one section of notes per CHANGELOG section"
    starts = ["" if v == "Unreleased" or i == len(sections) - 1 else sections[i + 1] for i, v in enumerate(sections)]
    assert [start for start, _ in notes] == starts, "docs/tasks/upgrade.md: a release's notes say 'previous → it'"


FENCED = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
#: How the docs' commands name a version of this project: an image tag, a kustomization's newTag, `kubenexus --version`.
VERSIONED = re.compile(r"kubenexus-gang-admission:(\S+)|newTag: *(\S+)|^kubenexus (\d\S*)$", re.MULTILINE)


def written_versions() -> dict[str, list[str]]:
    """The versions of this project named in the code blocks of every page (the docs site's and README.md)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = {str(page.relative_to(ROOT)): [next(filter(None, match.groups()))
                                           for block in FENCED.findall(page.read_text())
                                           for match in VERSIONED.finditer(block)] for page in pages}
    return {page: versions for page, versions in found.items() if versions}


def test_the_install_commands_name_this_version() -> None:
    written = written_versions()
    assert len(written.get("docs/tasks/install.md", [])) >= 3, written  # docker build, docker push, newTag
    wrong = {page: versions for page, versions in written.items() if set(versions) != {version()}}
    assert not wrong, f"pyproject.toml's version is {version()}; the docs' commands say otherwise: {wrong}"

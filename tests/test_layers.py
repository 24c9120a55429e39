"""The layering, pinned: which package may import which (ARCHITECTURE.md draws it).

Every import counts, also those inside functions: a lazy import is still a dependency. A new edge fails
here; if it is right, change ``MAY_IMPORT`` and ARCHITECTURE.md together.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("gang", "kube", "certs", "webhook", "controller", "kubenexus")
OURS = (*PRODUCT, "cluster", "workloads", "bench", "tests", "tools")

#: Our packages each package may import (itself always).
MAY_IMPORT: dict[str, set[str]] = {
    "gang": {"workloads"},  # the pure core: the gang contract, adapters, decisions, mutation (WORKLOAD_READERS)
    "kube": {"gang"},  # Kubernetes I/O
    "certs": {"gang", "kube"},
    "webhook": {"gang", "kube", "certs"},
    "controller": {"gang", "kube"},
    "kubenexus": {"gang", "kube", "certs", "webhook", "controller", "cluster"},  # the CLI: every edge
    "cluster": {"workloads"},  # the emulator: an independent check of the product, sharing none of its code
    "workloads": {"gang", "cluster"},  # one folder per operator kind, pinned by part (WORKLOAD_PARTS)
    "bench": {*PRODUCT, "cluster", "workloads"},
    "tests": {*PRODUCT, "cluster", "workloads", "tools"},
    "tools": set(),  # maintainers' tools (make release): they render deploy/, they import nothing of the product
}

#: workloads/ by part. A kind's records (its ``__init__.py``; and ``workloads/__init__.py``, ``record.py``,
#: ``readme.py``) are data both sides read; its ``adapter.py`` is core code, its ``emulator.py`` emulator code. A part
#: may import these packages, the records, and the same part of another kind (TrainJob's adapter uses JobSet's).
WORKLOAD_PARTS: dict[str, set[str]] = {"records": set(), "adapter": {"gang"}, "emulator": {"cluster"}}
#: The part of workloads/ the core and the emulator may use: the registration and the records; and their tables, the
#: kinds' adapters and emulators, which they load by name (``importlib``; that counts as importing them).
WORKLOAD_READERS: dict[str, set[str]] = {"gang": {"records"}, "cluster": {"records"}}
WORKLOAD_TABLES: dict[str, str] = {"gang/adapters/table.py": "adapter", "cluster/operators/table.py": "emulator"}

#: Third-party distributions the core may use: pure data handling, no I/O, no client, no web framework.
CORE_THIRD_PARTY = {"msgspec", "yaml", "jsonpatch"}
#: Standard modules that do I/O the core must not do (network, processes, threads).
CORE_FORBIDDEN_STDLIB = {"socket", "ssl", "http", "urllib", "subprocess", "threading", "asyncio", "select",
                         "selectors", "concurrent", "multiprocessing"}


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _imports(path: Path) -> set[str]:
    """Absolute module names imported anywhere in ``path``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}: relative import; spell the package so the layering stays visible")
    return names


def _loaded(path: Path) -> set[str]:
    """Modules of workloads/ named in a string (``importlib.import_module(f"workloads.{name}.adapter")``), with
    ``{}`` for what is filled in."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    parts = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    texts = ["".join(str(v.value) if isinstance(v, ast.Constant) else "{}" for v in node.values)
             for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)]
    texts += [node.value for node in ast.walk(tree)
              if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts]
    return {text for text in texts if text.startswith("workloads.")}


def _top(name: str) -> str:
    return name.split(".", 1)[0]


def _part(name: str) -> str:
    """The part of workloads/ a module name is: ``workloads.<kind>.adapter`` or ``.emulator``, else the records."""
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and parts[2] in ("adapter", "emulator") else "records"


def _part_of(path: Path) -> str:
    return path.stem if path.stem in ("adapter", "emulator") else "records"


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_packages_import_only_the_layers_below_them(package: str) -> None:
    allowed = MAY_IMPORT[package] | {package}
    wrong = {f"{path.relative_to(ROOT)}: {name}" for path in _modules(package) for name in _imports(path)
             if _top(name) in OURS and _top(name) not in allowed}
    assert not wrong, f"{package} may import only {sorted(allowed)}:\n" + "\n".join(sorted(wrong))


def test_workload_parts_import_only_their_side() -> None:
    wrong = set()
    for path in _modules("workloads"):
        part = _part_of(path)
        for name in _imports(path) | _loaded(path):
            top = _top(name)
            allowed = _part(name) in ("records", part) if top == "workloads" else top in WORKLOAD_PARTS[part]
            if top in OURS and not allowed:
                wrong.add(f"{path.relative_to(ROOT)} ({part}): {name}")
    assert not wrong, "a kind's records import nothing of ours, its adapter only gang, its emulator only cluster:\n" + (
        "\n".join(sorted(wrong)))


@pytest.mark.parametrize("package", sorted(WORKLOAD_READERS))
def test_the_core_and_the_emulator_use_only_their_side_of_workloads(package: str) -> None:
    wrong = set()
    for path in _modules(package):
        table = WORKLOAD_TABLES.get(str(path.relative_to(ROOT)))
        wrong |= {f"{path.relative_to(ROOT)}: {name}" for name in _imports(path) | _loaded(path)
                  if _top(name) == "workloads" and _part(name) not in WORKLOAD_READERS[package] | {table}}
    assert not wrong, f"{package} may use only the {sorted(WORKLOAD_READERS[package])} of workloads/:\n" + (
        "\n".join(sorted(wrong)))


def _core_modules() -> list[Path]:
    """gang/, and the records and adapters of workloads/ (not the emulators, nor the operators-table generator)."""
    return _modules("gang") + [p for p in _modules("workloads") if p.stem not in ("emulator", "readme")]


def test_the_core_is_pure() -> None:
    stdlib = set(sys.stdlib_module_names)
    wrong = set()
    for path in _core_modules():
        for name in _imports(path):
            top = _top(name)
            if top in OURS or top == "__future__":
                continue
            if (top in stdlib and top in CORE_FORBIDDEN_STDLIB) or (top not in stdlib and top not in CORE_THIRD_PARTY):
                wrong.add(f"{path.relative_to(ROOT)}: {name}")
    assert not wrong, "the core (gang/, workloads' records and adapters) does no I/O and uses no client or " \
                      "framework:\n" + "\n".join(sorted(wrong))


def test_test_modules_share_helpers_only_through_tests_support() -> None:
    wrong = {f"{path.relative_to(ROOT)}: {name}" for path in _modules("tests") for name in _imports(path)
             if _top(name) == "tests" and not name.startswith("tests.support")}
    assert not wrong, "tests import each other (or conftest); move the shared part to tests/support/:\n" + "\n".join(
        sorted(wrong))


def test_the_checker_sees_a_forbidden_edge(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from webhook.mutate import x\n    import controller.engine\n")
    assert {"webhook.mutate", "webhook.mutate.x", "controller.engine"} <= _imports(module)


def test_the_checker_sees_a_kind_loaded_by_name(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import importlib\nimportlib.import_module(f'workloads.{name}.emulator')\n")
    assert _loaded(module) == {"workloads.{}.emulator"} and _part("workloads.{}.emulator") == "emulator"

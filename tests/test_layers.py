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
OURS = (*PRODUCT, "cluster", "bench", "tests")

#: Our packages each package may import (itself always).
MAY_IMPORT: dict[str, set[str]] = {
    "gang": set(),  # the pure core: the gang contract, adapters, decisions, mutation
    "kube": {"gang"},  # Kubernetes I/O
    "certs": {"gang", "kube"},
    "webhook": {"gang", "kube", "certs"},
    "controller": {"gang", "kube"},
    "kubenexus": {"gang", "kube", "certs", "webhook", "controller", "cluster"},  # the CLI: every edge
    "cluster": set(),  # the emulator: an independent check of the product, sharing none of its code
    "bench": {*PRODUCT, "cluster"},
    "tests": {*PRODUCT, "cluster"},
}

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


def _top(name: str) -> str:
    return name.split(".", 1)[0]


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_packages_import_only_the_layers_below_them(package: str) -> None:
    allowed = MAY_IMPORT[package] | {package}
    wrong = {f"{path.relative_to(ROOT)}: {name}" for path in _modules(package) for name in _imports(path)
             if _top(name) in OURS and _top(name) not in allowed}
    assert not wrong, f"{package} may import only {sorted(allowed)}:\n" + "\n".join(sorted(wrong))


def test_the_core_is_pure() -> None:
    stdlib = set(sys.stdlib_module_names)
    wrong = set()
    for path in _modules("gang"):
        for name in _imports(path):
            top = _top(name)
            if top in OURS or top == "__future__":
                continue
            if (top in stdlib and top in CORE_FORBIDDEN_STDLIB) or (top not in stdlib and top not in CORE_THIRD_PARTY):
                wrong.add(f"{path.relative_to(ROOT)}: {name}")
    assert not wrong, "the core (gang/) does no I/O and uses no client or framework:\n" + "\n".join(sorted(wrong))


def test_test_modules_share_helpers_only_through_tests_support() -> None:
    wrong = {f"{path.relative_to(ROOT)}: {name}" for path in _modules("tests") for name in _imports(path)
             if _top(name) == "tests" and not name.startswith("tests.support")}
    assert not wrong, "tests import each other (or conftest); move the shared part to tests/support/:\n" + "\n".join(
        sorted(wrong))


def test_the_checker_sees_a_forbidden_edge(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from webhook.mutate import x\n    import controller.engine\n")
    assert {"webhook.mutate", "webhook.mutate.x", "controller.engine"} <= _imports(module)

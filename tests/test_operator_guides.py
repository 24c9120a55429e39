"""The per-operator guides (docs/tasks/operators/*.md), run as written: every command of each page's ``console``
blocks, pages in the order of their index, against one ``kubenexus cluster serve`` started as Getting started starts
it, with its KUBECONFIG exported; the output a page shows under a command must appear in what it printed
(``tests/support/console.py``). Each guide applies an example of ``examples/`` and deletes it at the end, so the
next one has the cluster to itself once those pods are gone."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.console import DOCS, ROOT, environment, run, scratch, section, serve_command, served, steps

pytestmark = pytest.mark.e2e

GUIDES = DOCS / "tasks" / "operators"
INDEX = GUIDES / "index.md"
ORDER = re.findall(r"^\| \[[^\]]+\]\(([a-z-]+\.md)\) \|", INDEX.read_text(encoding="utf-8"), re.M)
EXAMPLE = re.compile(r"examples/[a-z0-9-]+\.yaml")


def test_every_guide_is_in_the_index_and_runs_an_example() -> None:
    assert sorted(ORDER) == sorted(p.name for p in GUIDES.glob("*.md") if p.name != "index.md")
    used = set()
    for name in ORDER:
        commands = [step.command for step in steps((GUIDES / name).read_text(encoding="utf-8"))]
        applied = {m for c in commands if " apply " in c for m in EXAMPLE.findall(c)}
        deleted = {m for c in commands if " delete " in c for m in EXAMPLE.findall(c)}
        assert applied and applied == deleted, f"{name}: applies {applied}, deletes {deleted}"
        used |= applied
    assert used == {f"examples/{p.name}" for p in (ROOT / "examples").glob("*.yaml")}, "an example no guide runs"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], Path]]:
    tmp_path = tmp_path_factory.mktemp("guides")
    getting_started = section((DOCS / "getting-started.md").read_text(encoding="utf-8"), "Walkthrough")
    env, work = environment(tmp_path), scratch(tmp_path)
    with served(serve_command(getting_started), env, work):
        env["KUBECONFIG"] = str(tmp_path / "kubenexus" / "kubeconfig")
        yield env, work


@pytest.mark.parametrize("name", ORDER)
def test_the_guide(name: str, cluster: tuple[dict[str, str], Path]) -> None:
    env, work = cluster
    run(steps((GUIDES / name).read_text(encoding="utf-8")), dict(env), work)

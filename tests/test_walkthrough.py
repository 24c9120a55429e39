"""Getting started's walkthrough (docs/getting-started.md), run as written: ``kubenexus cluster serve`` started as the
page starts it, then every command of its ``console`` blocks, in order, in one served cluster; the output the page
shows under a command must appear in what the command printed (``tests/support/console.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.console import DOCS, environment, missing, run, scratch, section, serve_command, served, steps

pytestmark = pytest.mark.e2e

PAGE = DOCS / "getting-started.md"
SECTION = "Walkthrough"


def test_the_matching_rules() -> None:
    printed = "NAME   PHASE\nresnet     Waiting   4s\nspark-pi   Running   11s\n"
    assert missing(("NAME PHASE", "…", "spark-pi   Running   …"), printed) == []
    assert missing(("spark-pi Running …", "resnet Waiting …"), printed) == ["resnet Waiting …"]  # in order
    assert missing(("resnet Running …",), printed) == ["resnet Running …"]


def test_the_walkthrough(tmp_path: Path) -> None:
    text = section(PAGE.read_text(encoding="utf-8"), SECTION)
    env, work = environment(tmp_path), scratch(tmp_path)
    with served(serve_command(text), env, work) as printed:
        assert f"export KUBECONFIG={tmp_path}/kubenexus/kubeconfig" in printed, printed
        assert "namespace   gang-jobs" in printed, printed
        walkthrough = steps(text)
        assert walkthrough[0].command.startswith("export KUBECONFIG=")
        assert any(step.command.startswith("kubenexus doctor") for step in walkthrough)
        run(walkthrough, env, work)

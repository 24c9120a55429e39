"""The README's walkthrough, run as written: ``kubenexus cluster serve`` started as the README starts it, then every
command of its ``console`` blocks, in order, in one served cluster; the output the README shows under a command must
appear in what the command printed, line by line in order, ``…`` standing for what varies.

The commands find ``kubectl`` and ``kubenexus`` on PATH, as after ``source .venv/bin/activate``: the directory of
this interpreter first. TMPDIR is the test's own, so the default kubeconfig path is too (the README exports it as
``${TMPDIR:-/tmp}/kubenexus/kubeconfig``), and the commands run in a scratch directory that links ``examples/``.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Walkthrough"
STARTED = "Ctrl-C stops it."


@dataclass(frozen=True)
class Step:
    command: str
    shown: tuple[str, ...]  # the output the README shows under it


def section(readme: str) -> str:
    start = readme.index(SECTION)
    end = readme.find("\n## ", start + 1)
    return readme[start:end if end >= 0 else None]


def blocks(text: str, language: str) -> list[list[str]]:
    return [match.group(1).splitlines() for match in re.finditer(rf"^```{language}\n(.*?)^```$", text, re.M | re.S)]


def steps(text: str) -> list[Step]:
    found: list[Step] = []
    for block in blocks(text, "console"):
        for line in block:
            if line.startswith("$ "):
                found.append(Step(line[2:], ()))
            else:
                found[-1] = Step(found[-1].command, (*found[-1].shown, line))
    return found


def serve_command(text: str) -> list[str]:
    [line] = [line for block in blocks(text, "sh") for line in block if line.startswith("kubenexus cluster serve")]
    return shlex.split(line.split("#")[0])


def pattern(shown: str) -> re.Pattern[str]:
    """A line as the README shows it: ``…`` is any text, a run of spaces any run of whitespace (column widths)."""
    pieces = [r"\s+".join(re.escape(word) for word in piece.split()) for piece in shown.strip().split("…")]
    return re.compile(".*?".join(pieces))


def missing(shown: tuple[str, ...], printed: str) -> list[str]:
    """The shown lines not found in order among the printed ones (empty when all are)."""
    lines = iter(line.strip() for line in printed.splitlines())
    return [line for line in shown if not any(pattern(line).fullmatch(actual) for actual in lines)]


def test_the_matching_rules() -> None:
    printed = "NAME   PHASE\nresnet     Waiting   4s\nspark-pi   Running   11s\n"
    assert missing(("NAME PHASE", "…", "spark-pi   Running   …"), printed) == []
    assert missing(("spark-pi Running …", "resnet Waiting …"), printed) == ["resnet Waiting …"]  # in order
    assert missing(("resnet Running …",), printed) == ["resnet Running …"]


def _read_until_started(process: subprocess.Popen[str], timeout: float) -> str:
    """What ``cluster serve`` printed up to its last line of start-up (read off-thread: readline blocks)."""
    assert process.stdout is not None
    stdout, printed, started = process.stdout, [], threading.Event()

    def read() -> None:
        for line in stdout:
            printed.append(line)
            if STARTED in line:
                started.set()

    threading.Thread(target=read, daemon=True).start()
    assert started.wait(timeout), f"cluster serve did not start: {''.join(printed)}"
    return "".join(printed)


def test_the_walkthrough(tmp_path: Path) -> None:
    text = section((ROOT / "README.md").read_text(encoding="utf-8"))
    scratch = tmp_path / "work"
    scratch.mkdir()
    (scratch / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "TMPDIR": str(tmp_path), "KUBECACHEDIR": str(tmp_path / "kube-cache"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("KUBECONFIG", None)
    serve = subprocess.Popen(serve_command(text), stdout=subprocess.PIPE, text=True, env=env, cwd=scratch)
    try:
        printed = _read_until_started(serve, 120)
        assert f"export KUBECONFIG={tmp_path}/kubenexus/kubeconfig" in printed, printed
        assert "namespace   gang-jobs" in printed, printed
        walkthrough = steps(text)
        assert any(step.command.startswith("kubenexus doctor") for step in walkthrough)
        for step in walkthrough:
            if step.command.startswith("export "):
                name, _, _ = step.command.removeprefix("export ").partition("=")
                done = subprocess.run(["bash", "-c", f'{step.command} && printf %s "${name}"'], env=env,
                                      capture_output=True, text=True, timeout=10)
                env[name] = done.stdout
                continue
            done = subprocess.run(["bash", "-c", step.command], env=env, cwd=scratch, capture_output=True, text=True,
                                  timeout=120)
            assert done.returncode == 0, f"$ {step.command}\nexit {done.returncode}\n{done.stdout}{done.stderr}"
            assert not missing(step.shown, done.stdout), (
                f"$ {step.command}\nnot printed: {missing(step.shown, done.stdout)}\nprinted:\n{done.stdout}")
    finally:
        serve.send_signal(signal.SIGINT)
        code = serve.wait(timeout=30)
    assert code == 0

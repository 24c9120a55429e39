"""Documentation pages run as written: their ``console`` blocks are commands (``$ ...``) and what each prints, run in
order against a ``kubenexus cluster serve`` started as the page starts it; the output a page shows under a command
must appear in what the command printed, line by line in order, ``…`` standing for what varies.

The commands find ``kubectl`` and ``kubenexus`` on PATH, as after ``source .venv/bin/activate``: the directory of
this interpreter first. TMPDIR is the caller's, so the default kubeconfig path is too (the pages export it as
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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
STARTED = "Ctrl-C stops it."


@dataclass(frozen=True)
class Step:
    command: str
    shown: tuple[str, ...]  # the output the page shows under it


def section(page: str, heading: str) -> str:
    """The part of ``page`` from the ``## `` heading that starts with ``heading`` to the next one."""
    start = page.index(f"\n## {heading}")
    end = page.find("\n## ", start + 1)
    return page[start:end if end >= 0 else None]


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
    """The one ``kubenexus cluster serve`` line of the text's ``sh`` blocks, as arguments."""
    [line] = [line for block in blocks(text, "sh") for line in block if line.startswith("kubenexus cluster serve")]
    return shlex.split(line.split("#")[0])


def pattern(shown: str) -> re.Pattern[str]:
    """A line as a page shows it: ``…`` is any text, a run of spaces any run of whitespace (column widths)."""
    pieces = [r"\s+".join(re.escape(word) for word in piece.split()) for piece in shown.strip().split("…")]
    return re.compile(".*?".join(pieces))


def missing(shown: tuple[str, ...], printed: str) -> list[str]:
    """The shown lines not found in order among the printed ones (empty when all are)."""
    lines = iter(line.strip() for line in printed.splitlines())
    return [line for line in shown if not any(pattern(line).fullmatch(actual) for actual in lines)]


def environment(tmp_path: Path) -> dict[str, str]:
    """The shell environment of the pages' commands: this interpreter's directory first on PATH, TMPDIR the test's,
    no KUBECONFIG of the developer's."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "KUBECACHEDIR": str(tmp_path / "kube-cache"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("KUBECONFIG", None)
    return env


def scratch(tmp_path: Path) -> Path:
    """A working directory with ``examples/`` in it, as in a clone."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    return work


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


@contextmanager
def served(command: list[str], env: dict[str, str], cwd: Path) -> Iterator[str]:
    """``command`` (a ``kubenexus cluster serve``) running until the block ends, stopped with Ctrl-C as a user
    stops it, which must end it with status 0; yields what it printed while starting."""
    serve = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, cwd=cwd)
    try:
        yield _read_until_started(serve, 120)
    finally:
        serve.send_signal(signal.SIGINT)
        code = serve.wait(timeout=30)
    assert code == 0


def run(walkthrough: list[Step], env: dict[str, str], cwd: Path) -> None:
    """Every step in order: exit status 0 and the output shown printed. ``export NAME=...`` sets ``NAME`` in ``env``
    for the steps after it, as in a shell."""
    for step in walkthrough:
        if step.command.startswith("export "):
            name, _, _ = step.command.removeprefix("export ").partition("=")
            done = subprocess.run(["bash", "-c", f'{step.command} && printf %s "${name}"'], env=env,
                                  capture_output=True, text=True, timeout=10)
            env[name] = done.stdout
            continue
        done = subprocess.run(["bash", "-c", step.command], env=env, cwd=cwd, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, f"$ {step.command}\nexit {done.returncode}\n{done.stdout}{done.stderr}"
        assert not missing(step.shown, done.stdout), (
            f"$ {step.command}\nnot printed: {missing(step.shown, done.stdout)}\nprinted:\n{done.stdout}")

"""The ``kubenexus`` command's conventions, through the installed console script as a user runs it: ``--version``;
every error one line ``kubenexus <command>: ...`` with a meaningful exit status and no traceback (the ones users met
are reproduced here); and the lazy imports that keep ``--help``, ``webhook`` and ``controller`` from loading the
local cluster and the tools.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from kubenexus import cli
from kubenexus.local_webhook import KUBENEXUS, free_port
from tests.support.cli import ENV, kubenexus, one_line, unreachable_kubeconfig

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
SPARK = ROOT / "workloads" / "spark" / "examples"
EXPLAIN = ["explain", "--pod", str(SPARK / "spark-pi-driver.yaml"), "--objects", str(SPARK / "spark-pi-objects.yaml")]
HEAVY = ("cluster", "kubenexus.demo", "kubenexus.simulate", "kubenexus.doctor", "kubenexus.explain")


def test_version_is_the_installed_package_s() -> None:
    done = kubenexus("--version")
    assert (done.returncode, done.stdout) == (0, f"kubenexus {version('kubenexus-gang-admission')}\n")


def test_the_tracebacks_users_met_are_one_line_errors(tmp_path: Path) -> None:
    kubeconfig, port = unreachable_kubeconfig(tmp_path)
    home = tmp_path / "home"  # no ~/.kube/config, no KUBECONFIG, not in a pod
    home.mkdir()
    runs = {
        "unreachable": (["doctor", "--kubeconfig", str(kubeconfig)], ENV),
        "no kubeconfig": (["doctor"], {**ENV, "HOME": str(home)}),
        "controller": (["controller", "--kubeconfig", "/nonexistent"], ENV),
        "certs": (["certs", "ensure", "--kubeconfig", "/nonexistent"], ENV),
        "usage": (["cluster"], ENV),
        "timeline stopped cluster": (["timeline", "--kubeconfig", str(kubeconfig), str(tmp_path / "t.html")], ENV),
        "timeline missing folder": (["timeline", "--kubeconfig", str(kubeconfig), "/nonexistent/dir/t.html"], ENV),
        "explain pod stopped cluster": (["explain", "pod", "spark-pi-driver", "--kubeconfig", str(kubeconfig)], ENV),
    }
    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        done = dict(zip(runs, pool.map(lambda run: kubenexus(*run[0], env=run[1]), runs.values()), strict=True))
    stopped = (f"cannot reach the cluster at https://127.0.0.1:{port}: connection refused: is it running, and is "
               "--kubeconfig (or KUBECONFIG) the right one?")
    for command, run in (("doctor", "unreachable"), ("timeline", "timeline stopped cluster"),
                         ("explain", "explain pod stopped cluster")):
        assert one_line(done[run], "", 3) == f"kubenexus {command}: {stopped}"
    assert one_line(done["timeline missing folder"], "", 2) == (
        "kubenexus timeline: cannot write /nonexistent/dir/t.html: directory /nonexistent/dir does not exist")
    line = one_line(done["no kubeconfig"], "kubenexus doctor: no usable kubeconfig", 2)
    assert line.endswith("pass --kubeconfig FILE or set KUBECONFIG")
    one_line(done["controller"], "kubenexus controller: kubeconfig /nonexistent does not exist", 2)
    one_line(done["certs"], "kubenexus certs ensure: kubeconfig /nonexistent does not exist", 2)
    line = one_line(done["usage"], "kubenexus cluster: the following arguments are required: COMMAND", 2)
    assert "cluster_command" not in line and line.endswith("(see kubenexus cluster --help)")


def test_a_reader_that_goes_away_ends_the_command_quietly() -> None:
    """``kubenexus explain ... | head``: the pipe is closed before the command writes."""
    process = subprocess.Popen([KUBENEXUS, *EXPLAIN], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    assert process.wait(timeout=60) == 141  # as a shell reports a command ended by SIGPIPE
    assert process.stderr.read() == b""
    process.stderr.close()


@pytest.mark.parametrize("mode", ["external", "self-managed"])
def test_a_webhook_without_its_certificate_directory_fails_at_once(tmp_path: Path, mode: str) -> None:
    """The directory will never appear by itself (a mounted volume always exists; only a successful ``certs
    ensure`` creates one): fail in one line naming it and ``kubenexus certs generate``, not after two minutes."""
    kubeconfig, _ = unreachable_kubeconfig(tmp_path)
    missing = tmp_path / "no-such-dir"
    config = tmp_path / "config.yaml"
    config.write_text(f"server: {{certDir: {missing}}}\ncerts: {{mode: {mode}}}\nkubeconfig: {kubeconfig}\n"
                      "apiTimeoutSeconds: 1\n")
    started = time.monotonic()
    done = kubenexus("webhook", "--config", str(config), "--bind", f"127.0.0.1:{free_port()}", timeout=60)
    assert time.monotonic() - started < 30
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    # Besides its JSON log lines (self-managed: the failed requests of certs ensure), one line says what is wrong.
    [line] = [line for line in done.stderr.splitlines() if line and not line.startswith("{")]
    assert line.startswith(f"kubenexus webhook: the certificate directory {missing} does not exist"), line
    assert "kubenexus certs generate" in line


def test_stdin_and_the_output_formats() -> None:
    pod = (SPARK / "spark-pi-driver.yaml").read_text()
    runs = {output: kubenexus(*EXPLAIN[:2], "-", *EXPLAIN[3:], "-o", output, stdin=pod)
            for output in ("json", "yaml")}
    for output, done in runs.items():
        assert done.returncode == 0, (output, done.stderr)
    assert json.loads(runs["json"].stdout) == yaml.safe_load(runs["yaml"].stdout)
    assert json.loads(runs["json"].stdout)["action"] == "gang"
    both = kubenexus("explain", "--pod", "-", "--objects", "-", stdin=pod)
    one_line(both, "kubenexus explain: only one of --pod and --objects can be read from stdin", 2)
    nodes = kubenexus("cluster", "serve", "--nodes-file", "-", "--kubeconfig-out", "/nonexistent/kubeconfig",
                      stdin="apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    one_line(nodes, "kubenexus cluster serve: -: expected one or more Node objects", 2)  # read from stdin, refused
    missing = kubenexus("explain", "--pod", "/nonexistent.yaml")
    one_line(missing, "kubenexus explain: cannot read /nonexistent.yaml: No such file or directory", 2)


# --- lazy imports --------------------------------------------------------------------------------------------------


def _imported(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run the console script with ``-X importtime``: what it did, and every module it imported."""
    done = kubenexus(*args, env={**(env or ENV), "PYTHONPROFILEIMPORTTIME": "1"})
    modules = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return done, modules - {"module"}  # the header line


def _heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)}


def test_help_webhook_and_controller_start_without_the_local_cluster_or_the_tools(tmp_path: Path) -> None:
    done, modules = _imported("--help")
    assert done.returncode == 0 and "simulate" in done.stdout
    assert not _heavy(modules), _heavy(modules)
    assert not {m for m in modules if m.split(".")[0] in ("kubernetes", "controller", "webhook", "flask",
                                                          "cryptography")}
    # The webhook as far as it gets without a certificate (gunicorn, the server module, its configuration), and
    # the app its workers load; the controller up to its client.
    config = tmp_path / "config.yaml"
    config.write_text(f"server: {{certDir: {tmp_path / 'absent'}}}\ncerts: {{mode: external}}\n")
    webhook, modules = _imported("webhook", "--config", str(config))
    assert webhook.returncode == 1 and "webhook.server" in modules, webhook.stderr[-500:]
    assert not _heavy(modules), _heavy(modules)
    app = subprocess.run([sys.executable, "-c", "import sys, webhook.app, webhook.server; "
                          "print('\\n'.join(sys.modules))"], capture_output=True, text=True, env=ENV, check=True)
    assert not _heavy(set(app.stdout.split())), _heavy(set(app.stdout.split()))
    controller, modules = _imported("controller", "--kubeconfig", "/nonexistent")
    assert controller.returncode == 2 and "controller.run" in modules
    assert not _heavy(modules), _heavy(modules)


def test_every_command_is_listed_as_it_defines_itself() -> None:
    """``--help`` lists the commands from ``COMMANDS`` without loading them: the same text as their own parsers."""
    full, lazy = cli.parser(), cli.parser(["--help"])

    def listed(parser: argparse.ArgumentParser) -> dict[str, str | None]:
        [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return {action.dest: action.help for action in commands._choices_actions}

    assert listed(full) == listed(lazy) == {name: text for name, (text, _) in cli.COMMANDS.items()}


# --- unexpected errors ----------------------------------------------------------------------------------------------


def _boom(args: argparse.Namespace) -> int:
    raise RuntimeError("a bug\nover two lines")


@pytest.fixture
def broken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(cli.COMMANDS, "boom", ("", lambda commands: commands.add_parser("boom").set_defaults(
        func=_boom)))


def test_an_unexpected_error_is_one_line_and_debug_shows_the_traceback(broken: None,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        cli.main(["boom"])
    assert ended.value.code == 1
    assert capsys.readouterr().err == ("kubenexus boom: unexpected error: RuntimeError: a bug over two lines (run "
                                       "kubenexus --debug boom for the traceback)\n")
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main(["--debug", "boom"])

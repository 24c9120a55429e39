"""The ``kubenexus`` command: one entry point, one subcommand per component or tool.

Only the command being run is imported: ``kubenexus --help`` lists the commands from ``COMMANDS`` alone, and
``kubenexus webhook`` or ``controller`` never load the local cluster or the tools (``tests/test_cli.py`` checks it).
Every error is one line, ``kubenexus <command>: <message>`` (``kubenexus.errors``); a traceback only with ``--debug``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from kube.client import KubeconfigError
from kubenexus.errors import USAGE, CommandError

Commands = Any  # argparse's subparsers action (a private class)


def _webhook_parser(commands: Commands) -> None:
    webhook = commands.add_parser("webhook", help=COMMANDS["webhook"][0])
    webhook.add_argument("--config", help="configuration file (YAML); KUBENEXUS_* variables override it")
    webhook.add_argument("--bind", help="address:port to listen on (default 0.0.0.0:<server.port>)")
    webhook.set_defaults(func=_webhook)


def _webhook(args: argparse.Namespace) -> int:
    from gang.config import config_or_exit
    from kube import logs
    from webhook import server

    config = config_or_exit(args.config, "kubenexus webhook")
    logs.configure(config.log_level)
    server.serve(config, args.bind)
    return 0


def _controller_parser(commands: Commands) -> None:
    controller = commands.add_parser("controller", help=COMMANDS["controller"][0])
    controller.add_argument("--config", help="configuration file (YAML); KUBENEXUS_* variables override it")
    controller.add_argument("--kubeconfig", help="kubeconfig (default: the configured one, in-cluster, ~/.kube)")
    controller.add_argument("--leader-elect", action="store_true", help="campaign for a Lease; only the leader acts")
    controller.add_argument("--identity", help="this replica's name in the Lease (default: hostname_pid)")
    controller.add_argument("--port", type=int, help="/healthz, /readyz, /metrics port (default: controller.port)")
    controller.set_defaults(func=_controller)


def _controller(args: argparse.Namespace) -> int:
    from controller.run import run_controller
    from gang.config import config_or_exit
    from kube import logs
    from kube.client import new_api_client

    config = config_or_exit(args.config, "kubenexus controller")
    logs.configure(config.log_level)
    client = new_api_client(args.kubeconfig or config.kubeconfig, pool_size=32, retries=3)
    port = config.controller_port if args.port is None else args.port
    return run_controller(config, client, leader_elect=args.leader_elect, identity=args.identity, port=port)


def _certs_parser(commands: Commands) -> None:
    from certs import ensure, generate

    certs = commands.add_parser("certs", help=COMMANDS["certs"][0])
    certs_commands = certs.add_subparsers(dest="certs_command", required=True, metavar="COMMAND")
    generate.add_parser(certs_commands)
    ensure.add_parser(certs_commands)


def _explain_parser(commands: Commands) -> None:
    from kubenexus import explain

    explain.add_parser(commands)


def _cluster_parser(commands: Commands) -> None:
    from kubenexus import serve

    serve.add_parser(commands)


def _demo_parser(commands: Commands) -> None:
    from kubenexus import demo

    demo.add_parser(commands)


def _simulate_parser(commands: Commands) -> None:
    from kubenexus import simulate

    simulate.add_parser(commands)


def _doctor_parser(commands: Commands) -> None:
    from kubenexus import doctor

    doctor.add_parser(commands)


def _timeline_parser(commands: Commands) -> None:
    from kubenexus import timeline

    timeline.add_parser(commands)


#: Every command: its line in ``kubenexus --help``, and what defines its arguments (imported only when it runs).
COMMANDS: dict[str, tuple[str, Callable[[Commands], None]]] = {
    "webhook": ("run the admission webhook (gunicorn, TLS)", _webhook_parser),
    "controller": ("run the gate controller (releases gangs that fit)", _controller_parser),
    "certs": ("TLS material for the webhook", _certs_parser),
    "explain": ("show what the webhook would do to a pod (files, or a live pod)", _explain_parser),
    "cluster": ("the embedded local Kubernetes cluster", _cluster_parser),
    "demo": ("show gang admission on the embedded local cluster", _demo_parser),
    "simulate": ("what the gate controller would decide for a cluster snapshot", _simulate_parser),
    "doctor": ("check a live installation and say what is wrong", _doctor_parser),
    "timeline": ("draw each gang's members, waiting -> released -> running, as an HTML/SVG file", _timeline_parser),
}


class Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors naming the command and where its help is (exit 2)."""

    def error(self, message: str) -> NoReturn:
        raise SystemExit(_line(self.prog, f"{message} (see {self.prog} --help)", USAGE))

    def add_subparsers(self, **kwargs: Any) -> Any:
        kwargs.setdefault("metavar", "COMMAND")  # "required: COMMAND", never the internal dest name
        return super().add_subparsers(**kwargs)


def _line(prog: str, message: str, code: int) -> int:
    print(f"{prog}: {message}", file=sys.stderr)
    return code


class Version(argparse.Action):
    """``--version``: the installed distribution's version, looked up only when asked (importlib.metadata is slow
    to load)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the installed version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("kubenexus-gang-admission")
        except PackageNotFoundError:
            found = "unknown (not installed: pip install .)"
        print(f"{parser.prog} {found}")
        parser.exit()


def _wanted(argv: Sequence[str]) -> str | None:
    """The command ``argv`` runs: its first word that is not a top-level option."""
    return next((word for word in argv if not word.startswith("-")), None)


def parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line; with ``argv``, only the command it names is loaded (the others are listed by name)."""
    top = Parser(prog="kubenexus", description="KubeNexus gang admission")
    top.add_argument("--version", action=Version)
    top.add_argument("--debug", action="store_true", help="show the traceback of an unexpected error")
    commands = top.add_subparsers(dest="command", required=True)
    wanted = None if argv is None else _wanted(argv)
    for name, (text, define) in COMMANDS.items():
        if argv is None or name == wanted:
            define(commands)
        else:
            commands.add_parser(name, help=text)
    return top


def _command(args: argparse.Namespace) -> str:
    """``kubenexus certs generate``: the prefix of every error of the command run."""
    words = ["kubenexus", args.command]
    sub = getattr(args, f"{args.command}_command", None)
    return " ".join([*words, sub] if sub else words)


def _quiet_stdout() -> None:
    """Whoever read our output has gone (``kubenexus explain ... | head``): nothing more to write, nor to flush at
    exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parser(argv).parse_args(argv)
    prog = _command(args)
    try:
        code = args.func(args)
        sys.stdout.flush()
    except (CommandError, KubeconfigError) as exc:
        code = _line(prog, str(exc), getattr(exc, "code", USAGE))
    except BrokenPipeError:
        _quiet_stdout()
        code = 141  # as a shell reports a command ended by SIGPIPE
    except KeyboardInterrupt:
        code = 130
    except Exception as exc:
        if args.debug:
            raise
        text = " ".join(str(exc).split())  # one line, whatever the exception's message holds
        code = _line(prog, f"unexpected error: {type(exc).__name__}: {text} (run kubenexus --debug "
                     f"{' '.join(argv)} for the traceback)", 1)
    sys.exit(code)

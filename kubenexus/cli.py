"""The ``kubenexus`` command: one entry point, one subcommand per component or tool."""

from __future__ import annotations

import argparse
import sys

from certs import generate as certs_generate
from cluster import serve as cluster_serve
from kubenexus import demo, explain


def _webhook(args: argparse.Namespace) -> int:
    from gang.config import ConfigError, load_config
    from webhook import logs, server

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logs.configure(config.log_level)
    server.serve(config, args.bind)
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="kubenexus", description="KubeNexus gang admission")
    commands = top.add_subparsers(dest="command", required=True)
    webhook = commands.add_parser("webhook", help="run the admission webhook (gunicorn, TLS)")
    webhook.add_argument("--config", help="configuration file (YAML); KUBENEXUS_* variables override it")
    webhook.add_argument("--bind", help="address:port to listen on (default 0.0.0.0:<server.port>)")
    webhook.set_defaults(func=_webhook)
    certs = commands.add_parser("certs", help="TLS material for the webhook")
    certs_generate.add_parser(certs.add_subparsers(dest="certs_command", required=True))
    explain.add_parser(commands)
    cluster_serve.add_parser(commands)
    demo.add_parser(commands)
    return top


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    sys.exit(args.func(args))

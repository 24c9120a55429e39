"""The ``kubenexus`` command: one entry point, one subcommand per component or tool."""

from __future__ import annotations

import argparse
import sys

from certs import ensure as certs_ensure
from certs import generate as certs_generate
from kubenexus import demo, doctor, explain, serve, simulate, timeline


def _webhook(args: argparse.Namespace) -> int:
    from gang.config import config_or_exit
    from kube import logs
    from webhook import server

    config = config_or_exit(args.config, "kubenexus webhook")
    logs.configure(config.log_level)
    server.serve(config, args.bind)
    return 0


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


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="kubenexus", description="KubeNexus gang admission")
    commands = top.add_subparsers(dest="command", required=True)
    webhook = commands.add_parser("webhook", help="run the admission webhook (gunicorn, TLS)")
    webhook.add_argument("--config", help="configuration file (YAML); KUBENEXUS_* variables override it")
    webhook.add_argument("--bind", help="address:port to listen on (default 0.0.0.0:<server.port>)")
    webhook.set_defaults(func=_webhook)
    controller = commands.add_parser("controller", help="run the gate controller (releases gangs that fit)")
    controller.add_argument("--config", help="configuration file (YAML); KUBENEXUS_* variables override it")
    controller.add_argument("--kubeconfig", help="kubeconfig (default: the configured one, in-cluster, ~/.kube)")
    controller.add_argument("--leader-elect", action="store_true", help="campaign for a Lease; only the leader acts")
    controller.add_argument("--identity", help="this replica's name in the Lease (default: hostname_pid)")
    controller.add_argument("--port", type=int, help="/healthz, /readyz, /metrics port (default: controller.port)")
    controller.set_defaults(func=_controller)
    certs = commands.add_parser("certs", help="TLS material for the webhook")
    certs_commands = certs.add_subparsers(dest="certs_command", required=True)
    certs_generate.add_parser(certs_commands)
    certs_ensure.add_parser(certs_commands)
    explain.add_parser(commands)
    serve.add_parser(commands)
    demo.add_parser(commands)
    simulate.add_parser(commands)
    doctor.add_parser(commands)
    timeline.add_parser(commands)
    return top


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    sys.exit(args.func(args))

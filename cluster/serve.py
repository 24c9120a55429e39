"""``kubenexus cluster serve``: the local cluster alone, until interrupted."""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from cluster.local import NodeSpec


def _nodes(args: argparse.Namespace) -> list[NodeSpec | dict[str, Any]]:
    from cluster.local import NodeSpec

    if args.nodes_file:
        try:
            with open(args.nodes_file, encoding="utf-8") as handle:
                nodes = [d for d in yaml.safe_load_all(handle) if d is not None]
        except (OSError, yaml.YAMLError) as exc:
            raise ValueError(f"cannot read {args.nodes_file}: {exc}") from None
        if not nodes or not all(isinstance(n, dict) and n.get("kind") == "Node" for n in nodes):
            raise ValueError(f"{args.nodes_file}: expected one or more Node objects")
        return list(nodes)
    if args.nodes < 1:
        raise ValueError("--nodes must be at least 1")
    return [NodeSpec(f"node-{i}", cpu=args.node_cpu, memory=args.node_memory) for i in range(args.nodes)]


def run(args: argparse.Namespace) -> int:
    try:
        nodes = _nodes(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from cluster.local import LocalCluster  # the emulator loads only for this command

    cluster = LocalCluster(nodes).start()
    cluster.run_components()
    shutil.copyfile(cluster.kubeconfig, args.kubeconfig_out)
    print(f"local cluster at {cluster.http.url} with {len(nodes)} node(s); kubeconfig: {args.kubeconfig_out}",
          flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    cluster.stop()
    return 0


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("cluster", help="the embedded local Kubernetes cluster")
    commands = parser.add_subparsers(dest="cluster_command", required=True)
    serve = commands.add_parser("serve", help="run the local cluster until interrupted")
    serve.add_argument("--nodes-file", help="YAML file with the Node objects to create")
    serve.add_argument("--nodes", type=int, default=3, help="number of nodes (without --nodes-file)")
    serve.add_argument("--node-cpu", default="8")
    serve.add_argument("--node-memory", default="32Gi")
    serve.add_argument("--kubeconfig-out", required=True, help="where to write the admin kubeconfig")
    serve.set_defaults(func=run)

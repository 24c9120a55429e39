"""``kubenexus cluster serve``: the local cluster with the product installed and running, until interrupted.

By default the cluster runs the webhook and the gate controller as deploy/base installs them
(``kubenexus/local_product.py``) and has a namespace ready for jobs; ``--bare`` serves the API alone. The
controller's log and decisions (its Events) are printed here. When a component stops by itself (the webhook process
exits, the controller loses its Lease) it says so on one line and exits 1: a cluster whose pods nobody gates or
releases any more is not one to keep using, and a restart would hide the cause. The cluster's work folder (TLS keys,
the service accounts' kubeconfigs, the webhook's log) goes with it (``LocalCluster.stop``).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cluster.local import NodeSpec

#: Where the kubeconfig goes by default: the same path every time, so a second terminal's KUBECONFIG stays right.
DEFAULT_KUBECONFIG = Path(tempfile.gettempdir()) / "kubenexus" / "kubeconfig"


def _quantity(text: str) -> str:
    """A node's capacity: a positive Kubernetes quantity (8, 500m, 32Gi), checked before anything starts."""
    from gang.quantity import parse_quantity

    try:
        value = parse_quantity(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a quantity (for example 8, 500m, 32Gi)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive quantity")
    return text


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def _nodes(args: argparse.Namespace) -> list[NodeSpec | dict[str, Any]]:
    import yaml

    from cluster.local import NodeSpec
    from kubenexus.errors import opened
    from kubenexus.simulate import objects_in

    if not args.nodes_file:
        return [NodeSpec(f"node-{i}", cpu=args.node_cpu, memory=args.node_memory) for i in range(args.nodes)]
    try:
        with opened(args.nodes_file) as handle:  # - for stdin
            nodes = objects_in(yaml.safe_load_all(handle))
    except yaml.YAMLError as exc:
        raise ValueError(f"cannot read {args.nodes_file}: {exc}") from None
    if not nodes or any(node.get("kind") != "Node" for node in nodes):
        raise ValueError(f"{args.nodes_file}: expected one or more Node objects (or a List of them)")
    return list(nodes)


def _kubeconfig_out(args: argparse.Namespace) -> Path:
    path = Path(args.kubeconfig_out) if args.kubeconfig_out else DEFAULT_KUBECONFIG
    if not args.kubeconfig_out:
        path.parent.mkdir(parents=True, exist_ok=True)
    if not path.parent.is_dir():
        raise ValueError(f"--kubeconfig-out {path}: directory {path.parent} does not exist")
    return path


def _sizes(args: argparse.Namespace, count: int) -> str:
    if args.nodes_file:
        return f"{count} node(s) from {args.nodes_file}"
    return f"{count} node(s), {args.node_cpu} cpu and {args.node_memory} memory each"


def _shown(path: Path) -> str:
    """``path`` as the user types it here: relative to the working directory when under it."""
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def run(args: argparse.Namespace) -> int:
    try:
        nodes = _nodes(args)
        kubeconfig = _kubeconfig_out(args)
    except ValueError as exc:
        print(f"kubenexus cluster serve: {exc}", file=sys.stderr)
        return 2
    from cluster.local import LocalCluster
    from kubenexus.local_product import DEPLOY, EXAMPLES, READY_NAMESPACE, LocalProduct, NotShipped, stop_on_signal

    stopping = stop_on_signal()  # from here on: Ctrl-C during the start stops it once started
    failed: str | None = None
    with LocalCluster(nodes) as cluster:
        cluster.run_components()
        try:  # the admin's token: readable by this user alone, as kubectl writes ~/.kube/config
            kubeconfig.touch(mode=0o600)
            kubeconfig.chmod(0o600)
            kubeconfig.write_text(Path(cluster.kubeconfig).read_text())
        except OSError as exc:
            print(f"kubenexus cluster serve: cannot write {kubeconfig}: {exc.strerror}", file=sys.stderr)
            return 1
        print(f"local cluster at {cluster.http.url} with {_sizes(args, len(nodes))}"
              + (" (the API alone: no webhook, no controller)" if args.bare else ""), flush=True)
        try:
            product = None if args.bare else LocalProduct(cluster).start()
        except (NotShipped, RuntimeError) as exc:
            print(f"kubenexus cluster serve: the product did not start: {exc}", file=sys.stderr)
            return 1
        try:
            if product is not None:
                assert product.webhook is not None
                print(f"  installed   {_shown(DEPLOY)}: the PodGroup CRD, service accounts, RBAC, webhook "
                      "configurations, config\n"
                      f"  webhook     {product.webhook_url}, as {product.webhook_identity}\n"
                      f"  controller  leading, as {product.controller_identity}\n"
                      f"  namespace   {READY_NAMESPACE}, labelled kubenexus.io/gang-scheduling=enabled: every job "
                      "there is a gang\n"
                      f"  logs        webhook: {product.webhook.log_path}; controller: below, with its decisions "
                      "(its events)\n"
                      "In another terminal:\n"
                      f"  export KUBECONFIG={kubeconfig}\n"
                      f"  kubectl -n {READY_NAMESPACE} apply -f {_shown(EXAMPLES / 'spark-pi.yaml')}\n"
                      f"  kubectl -n {READY_NAMESPACE} get pods,podgroups")
            else:
                print(f"  export KUBECONFIG={kubeconfig}")
            print("Ctrl-C stops it.", flush=True)
            if product is not None:
                _tell_decisions(cluster.kubeconfig, stopping)
                product.watch(stopping)
            stopping.wait()
            failed = product.failure() if product is not None else None
        finally:
            stopping.set()
            logging.getLogger("urllib3").setLevel(logging.ERROR)  # clients retrying a cluster that stops: not news
            if product is not None:
                product.stop()
    if failed:  # nothing would gate new pods, or release them, any more: not a cluster to keep using
        print(f"kubenexus cluster serve: {failed}; the cluster is stopped", file=sys.stderr, flush=True)
        return 1
    return 0


def _tell_decisions(kubeconfig: str, stopping: threading.Event) -> None:
    """The gate controller in this terminal: its log (from INFO: PodGroups created, pods resolved; warnings) and
    its decisions, the Events it writes about gangs (released, waiting for capacity, never fits, evicted)."""
    logging.basicConfig(format="%(asctime)s %(name)s %(levelname)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("kubenexus.controller").setLevel(logging.INFO)
    threading.Thread(target=_print_events, args=(kubeconfig, stopping), name="controller-events", daemon=True).start()


def _print_events(kubeconfig: str, stopping: threading.Event) -> None:
    from kubernetes import config

    from kubenexus.local_product import controller_events

    api_client = config.new_client_from_config(kubeconfig)
    try:
        for event in controller_events(api_client):
            regarding = event.get("regarding") or {}
            print(f"{time.strftime('%H:%M:%S')} controller: {event.get('reason')} on {regarding.get('kind')} "
                  f"{regarding.get('namespace')}/{regarding.get('name')}: {event.get('note')}", flush=True)
    except Exception as exc:  # noqa: BLE001 — the watch ended: said, unless the cluster is stopping
        if not stopping.is_set():
            print(f"kubenexus cluster serve: the controller's events are no longer shown: "
                  f"{' '.join(str(exc).split())}", file=sys.stderr, flush=True)


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("cluster", help="the embedded local Kubernetes cluster")
    commands = parser.add_subparsers(dest="cluster_command", required=True)
    serve = commands.add_parser("serve", help="run the local cluster with the webhook and the gate controller",
                                description=__doc__)
    serve.add_argument("--bare", action="store_true", help="serve the Kubernetes API alone (no webhook, controller)")
    serve.add_argument("--nodes-file",
                       help="YAML (- for stdin) with the Node objects to create (kubectl get nodes -o yaml works)")
    serve.add_argument("--nodes", type=_count, default=3, help="number of nodes (without --nodes-file)")
    serve.add_argument("--node-cpu", type=_quantity, default="8", help="each node's cpu (default 8)")
    serve.add_argument("--node-memory", type=_quantity, default="32Gi", help="each node's memory (default 32Gi)")
    serve.add_argument("--kubeconfig-out", help=f"where to write the admin kubeconfig (default {DEFAULT_KUBECONFIG})")
    serve.set_defaults(func=run)

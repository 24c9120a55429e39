"""Local cluster benchmark: pod creations per second through the emulated apiserver with the
webhook in the path (``make bench``; ``--smoke`` in ``make test``).

Every create is a real HTTPS request from the official client to the emulator, which calls
``kubenexus webhook`` over TLS (mutating and validating), applies the patch, validates and stores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kubernetes import client, config  # noqa: E402

from bench.admission_bench import spark_objects  # noqa: E402
from certs.generate import generate  # noqa: E402
from kubenexus.local_webhook import KUBENEXUS, LocalWebhook, register  # noqa: E402

GOAL_PODS_PER_S = 200.0
def _serve(workdir: Path) -> tuple[subprocess.Popen, str]:
    """``kubenexus cluster serve`` in its own process: the clients below do not share its interpreter."""
    kubeconfig = str(workdir / "kubeconfig")
    process = subprocess.Popen([KUBENEXUS, "cluster", "serve", "--bare", "--nodes", "3",
                                "--kubeconfig-out", kubeconfig],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = process.stdout.readline() if process.stdout else ""
    if "local cluster at" not in line:
        process.kill()
        raise RuntimeError(f"cluster serve failed: {line}")
    return process, kubeconfig


def _wait_for_driver(core: client.CoreV1Api, timeout: float = 30) -> client.V1Pod:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = core.list_namespaced_pod("default", label_selector="spark-role=driver").items
        if pods:
            return pods[0]
        time.sleep(0.1)
    raise RuntimeError("the emulated spark-operator did not create the driver")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=4, help="concurrent creating clients")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    pods = 100 if args.smoke else args.pods
    workdir = Path(tempfile.mkdtemp(prefix="kubenexus-cluster-bench-"))
    cluster, kubeconfig = _serve(workdir)
    webhook = None
    try:
        tls = generate("kubenexus-webhook", "kubenexus-system", str(workdir / "certs"), extra_ips=["127.0.0.1"])
        webhook = LocalWebhook(workdir, tls, kubeconfig, {})
        webhook.wait_ready()
        kube = config.new_client_from_config(kubeconfig)
        register(client.AdmissionregistrationV1Api(kube), webhook)
        app, _, executor = spark_objects("default", pods)
        client.CustomObjectsApi(kube).create_namespaced_custom_object(
            "sparkoperator.k8s.io", "v1beta2", "default", "sparkapplications",
            {k: v for k, v in app.items() if k != "metadata"} | {"metadata": {
                "name": "spark-pi", "annotations": app["metadata"]["annotations"]}})
        driver = _wait_for_driver(client.CoreV1Api(kube))  # created (and gated) by the emulated spark-operator
        executor["metadata"]["ownerReferences"][0]["uid"] = driver.metadata.uid
        local = threading.local()

        def create(_: int) -> bool:
            if not hasattr(local, "core"):
                local.core = client.CoreV1Api(config.new_client_from_config(kubeconfig))
            response = local.core.create_namespaced_pod("default", executor, _preload_content=False)
            return bool(json.loads(response.data)["spec"].get("schedulingGates"))

        started = time.perf_counter()
        with ThreadPoolExecutor(args.clients) as pool:
            gated = sum(pool.map(create, range(pods)))
        elapsed = time.perf_counter() - started
    finally:
        if webhook is not None:
            webhook.stop()
        cluster.terminate()
        cluster.wait(timeout=15)
        shutil.rmtree(workdir, ignore_errors=True)
    rate = pods / elapsed
    print(json.dumps({"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                  "platform": platform.platform()},
                      "pods": pods, "clients": args.clients, "seconds": round(elapsed, 2),
                      "pods_per_s": round(rate, 1), "gated": gated}, indent=2))
    if gated != pods:
        print(f"GOAL MISSED: only {gated}/{pods} pods came out of admission gated", file=sys.stderr)
        return 1
    if not args.smoke and rate < GOAL_PODS_PER_S:
        print(f"GOAL MISSED: {rate:.0f} pods/s < {GOAL_PODS_PER_S:.0f} pods/s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

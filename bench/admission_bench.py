"""Admission webhook benchmark (``make bench``; ``--smoke`` for the fast run in ``make test``).

Starts ``kubenexus webhook`` with the shipped gunicorn settings against the stub apiserver,
warms the owner cache with a Spark application, then measures over reused TLS connections:

1. latency at a fixed 200 requests/s (open loop, no coordinated omission) for /mutate and for
   the no-op floor (the same body POSTed to /healthz on the same server);
2. sustained closed-loop throughput for both, with errors counted;
3. API reads for one Spark driver plus 1,000 executor pods: the reads of its owners, GETs of named objects
   (judged), and apart from them what each worker's watches read (the namespace list of its label watch, the
   discovery and lists of its watch of roots), which the stub (it serves no watches) makes retry on their own
   schedule, so how many fall into the measured window is a matter of timing.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadgen import run  # noqa: E402
from bench.reviews import admit, review_body  # noqa: E402
from certs.generate import generate  # noqa: E402
from cluster.stub import StubApiServer  # noqa: E402
from gang.config import Config  # noqa: E402
from kubenexus.local_webhook import LocalWebhook  # noqa: E402

GOALS = {"p50_ms": 2.0, "p99_ms": 10.0, "throughput_rps": 1000.0, "reads": 3}


def _names_an_object(path: str) -> bool:
    """A GET of one namespaced object (``.../namespaces/NS/RESOURCE/NAME``): an owner read, not a watch's list or
    discovery."""
    parts = path.strip("/").split("/")
    return "namespaces" in parts and len(parts) - parts.index("namespaces") >= 4


def spark_objects(namespace: str, executors: int) -> tuple[dict, dict, dict]:
    app = {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
           "metadata": {"name": "spark-pi", "namespace": namespace, "uid": f"app-{namespace}",
                        "annotations": {"kubenexus.io/gang-scheduling": "true"}},
           "spec": {"type": "Scala", "image": "spark:3.5.3", "driver": {"cores": 1, "memory": "2g"},
                    "executor": {"instances": executors, "cores": 2, "memory": "4g"}}}
    driver = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "spark-pi-driver", "namespace": namespace, "uid": f"driver-{namespace}",
                           "labels": {"spark-role": "driver", "spark-app-selector": "spark-1"},
                           "ownerReferences": [{"apiVersion": app["apiVersion"], "kind": "SparkApplication",
                                                "name": "spark-pi", "uid": app["metadata"]["uid"],
                                                "controller": True}]},
              "spec": {"containers": [{"name": "spark-kubernetes-driver", "image": "spark:3.5",
                                       "resources": {"requests": {"cpu": "1", "memory": "2432Mi"}}}]}}
    executor = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": "spark-pi-exec-",
                             "labels": {"spark-role": "executor", "spark-app-selector": "spark-1",
                                        "spark-exec-id": "1", "sparkoperator.k8s.io/app-name": "spark-pi"},
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "spark-pi-driver",
                                                  "uid": driver["metadata"]["uid"], "controller": True}]},
                "spec": {"containers": [{"name": "spark-kubernetes-executor", "image": "spark:3.5",
                                         "resources": {"requests": {"cpu": "2", "memory": "4505Mi"}}}]}}
    return app, driver, executor


def _median(summaries: list[dict], key: str) -> dict:
    """The run with the median ``key`` (a whole run, so its numbers stay consistent)."""
    return sorted(summaries, key=lambda s: s[key])[len(summaries) // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="short run: checks it works, not the figures")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the median run is reported")
    args = parser.parse_args()
    duration = 1.0 if args.smoke else args.duration
    workdir = Path(tempfile.mkdtemp(prefix="kubenexus-bench-"))
    apiserver = StubApiServer()
    tls = generate("kubenexus-webhook", "kubenexus-system", str(workdir / "certs"), extra_ips=["127.0.0.1"])
    webhook = LocalWebhook(workdir, tls, apiserver.write_kubeconfig(str(workdir / "kubeconfig")), {})
    try:
        webhook.wait_ready()
        conn = http.client.HTTPSConnection("127.0.0.1", webhook.port, context=webhook.context, timeout=10)
        namespace = f"bench-{uuid.uuid4().hex[:8]}"
        apiserver.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        app, driver, executor = spark_objects(namespace, 1000)
        apiserver.put(app, driver)
        # 3. API reads: the driver, then 1,000 executors (cold cache for this namespace).
        before = dict(apiserver.reads)
        admitted = admit(conn, driver, namespace)
        assert admitted["spec"].get("schedulingGates"), "driver was not gated"
        for _ in range(10 if args.smoke else 1000):
            admitted = admit(conn, executor, namespace)
        assert admitted["metadata"]["labels"]["pod-group.scheduling.kubenexus.io/name"] == "spark-pi"
        read = {path: n - before.get(path, 0) for path, n in apiserver.reads.items() if n > before.get(path, 0)}
        read.pop("/version", None)
        watches = {path: n for path, n in read.items() if not _names_an_object(path)}
        read = {path: n for path, n in read.items() if path not in watches}
        reads = sum(read.values())
        conn.close()

        body = review_body(executor, namespace)  # warm cache: every request is a full decision + patch
        common = {"cafile": tls.ca_cert, "server_hostname": "127.0.0.1", "connections": args.connections}
        runs: dict[str, dict[str, list]] = {"mutate": {"fixed": [], "max": []}, "noop": {"fixed": [], "max": []}}
        for _ in range(1 if args.smoke else args.repeat):  # interleaved, so drift hits both alike
            for name, path in (("mutate", "/mutate"), ("noop", "/healthz")):
                runs[name]["fixed"].append(run("127.0.0.1", webhook.port, path, body, duration_s=duration,
                                               rate=200.0, **common).summary())
                runs[name]["max"].append(run("127.0.0.1", webhook.port, path, body, duration_s=duration,
                                             **common).summary())
        results = {name: {"at_200_rps": _median(r["fixed"], "p50_ms"), "max": _median(r["max"], "rate_per_s"),
                          "runs": r} for name, r in runs.items()}
    finally:
        webhook.stop()
        apiserver.close()
        shutil.rmtree(workdir, ignore_errors=True)
    report = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "settings": {"duration_s": duration, "connections": args.connections, "repeat": args.repeat,
                     "workers": Config().workers, "threads": Config().threads},
        "spark_1000_executors_api_reads": reads,
        "spark_1000_executors_api_reads_by_path": read,
        "watch_reads_meanwhile": watches,
        **results,
        "ratio_mutate_over_noop": {
            "p50": results["mutate"]["at_200_rps"]["p50_ms"] / max(results["noop"]["at_200_rps"]["p50_ms"], 1e-9),
            "throughput": results["mutate"]["max"]["rate_per_s"] / max(results["noop"]["max"]["rate_per_s"], 1e-9),
        },
    }
    print(json.dumps(report, indent=2))
    failures = []
    mutate = results["mutate"]
    errors = sum(r["errors"] for kind in mutate["runs"].values() for r in kind)
    if errors:
        failures.append(f"{errors} failed mutate requests")
    if reads > GOALS["reads"]:
        failures.append(f"{reads} API reads for one Spark application (goal ≤ {GOALS['reads']})")
    if not args.smoke:
        if mutate["at_200_rps"]["p50_ms"] > GOALS["p50_ms"]:
            failures.append(f"mutate p50 {mutate['at_200_rps']['p50_ms']:.2f} ms > {GOALS['p50_ms']} ms")
        if mutate["at_200_rps"]["p99_ms"] > GOALS["p99_ms"]:
            failures.append(f"mutate p99 {mutate['at_200_rps']['p99_ms']:.2f} ms > {GOALS['p99_ms']} ms")
        if mutate["max"]["rate_per_s"] < GOALS["throughput_rps"]:
            failures.append(f"mutate throughput {mutate['max']['rate_per_s']:.0f}/s < {GOALS['throughput_rps']:.0f}/s")
    for failure in failures:
        print(f"GOAL MISSED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

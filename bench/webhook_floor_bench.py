"""The webhook against the stack's floor, measured from outside (``make bench``; ``--smoke`` in ``make test``).

Starts ``kubenexus webhook`` exactly as the shipped Deployment does (``kubenexus webhook --config FILE`` with
deploy/base/config.yaml: gunicorn gthread, 2 workers x 8 threads, TLS, JSON logs at INFO, metrics on, no
``PROMETHEUS_MULTIPROC_DIR`` in the environment), with the local cluster as its apiserver, and the Flask no-op
AdmissionReview responder of bench/floor/ under stock gunicorn gthread with the same settings. After warming the
webhook's owner cache with a Spark application, both are driven with the same 3 KB Spark executor AdmissionReview
by external load generators, interleaved (webhook, floor, webhook, floor, ...) so that whatever else the machine
does hits both alike:

- ``wrk`` (closed loop, TLS keep-alive) at 4 and 16 connections: throughput;
- ``hey`` at a fixed 200 requests/s over 4 kept-alive connections: p50 (the client's own overhead included);
- ``wrk`` on the webhook alone for 60 s (16 connections), answers counted per second: the median of the last
  10 s against that of the first 10 s.

Goals, as ratios to the floor measured in the same run: throughput >= 0.8x at 4 and 16 connections, p50 at
200 requests/s <= 1.2x, the last 10 s of a 60 s run within 10 % of the first, and no error (non-2xx answer or
socket error) anywhere. The ratios reported are the medians over the interleaved rounds, with their spread.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import platform
import re
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml  # noqa: E402

from bench.reviews import review_body  # noqa: E402
from certs.generate import generate  # noqa: E402
from cluster.controllers import Client  # noqa: E402
from cluster.crds import crd_manifests  # noqa: E402
from cluster.local import ADMIN, LocalCluster  # noqa: E402
from gang import keys  # noqa: E402
from gang.config import config_from_text  # noqa: E402
from kubenexus.local_webhook import KUBENEXUS, deployment_env, free_port  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FLOOR = ROOT / "bench" / "floor"
SHIPPED_CONFIG = ROOT / "deploy" / "base" / "config.yaml"
WEBHOOK_IDENTITY = "system:serviceaccount:kubenexus-system:kubenexus-webhook"
INSTALL = "apt-get install wrk hey  (Debian/Ubuntu packages `wrk` and `hey`)"
WARM_UP_REQUESTS = 21  # the driver, then executors on new connections
GOALS = {"throughput_ratio": 0.8, "p50_ratio": 1.2, "drift": 0.10}


# --- the workload ----------------------------------------------------------------------------------------------

def _application(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
           "metadata": {"name": "spark-pi", "namespace": namespace},
           "spec": {"type": "Scala", "mode": "cluster", "image": "spark:3.5.3", "sparkVersion": "3.5.3",
                    "mainClass": "org.apache.spark.examples.SparkPi",
                    "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
                    "driver": {"cores": 1, "memory": "2g", "serviceAccount": "spark"},
                    "executor": {"instances": 1000, "cores": 2, "memory": "4g"}}}


def _driver(app: dict[str, Any], namespace: str) -> dict[str, Any]:
    meta = app["metadata"]
    labels = {"spark-role": "driver", "spark-app-selector": "spark-8f2c1d7e", "spark-app-name": "spark-pi",
              "sparkoperator.k8s.io/app-name": "spark-pi", "sparkoperator.k8s.io/launched-by-spark-operator": "true"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "spark-pi-driver", "namespace": namespace, "labels": labels,
                         "ownerReferences": [{"apiVersion": app["apiVersion"], "kind": "SparkApplication",
                                              "name": meta["name"], "uid": meta["uid"], "controller": True}]},
            "spec": {"serviceAccountName": "spark",
                     "containers": [{"name": "spark-kubernetes-driver", "image": "spark:3.5.3",
                                     "resources": {"requests": {"cpu": "1", "memory": "2432Mi"},
                                                   "limits": {"memory": "2432Mi"}}}]}}


def _executor(driver: dict[str, Any]) -> dict[str, Any]:
    """An executor pod as the Spark 3.5 driver POSTs it (the AdmissionReview's ``object``; the review is ~3 KB)."""
    meta = driver["metadata"]
    env: list[dict[str, Any]] = [{"name": name, "value": value} for name, value in (
        ("SPARK_USER", "spark"), ("SPARK_DRIVER_URL", "spark://CoarseGrainedScheduler@spark-pi-8f2c1d7e-driver-svc."
                                                      f"{meta['namespace']}.svc:7078"),
        ("SPARK_EXECUTOR_CORES", "2"), ("SPARK_EXECUTOR_MEMORY", "4096m"),
        ("SPARK_APPLICATION_ID", "spark-8f2c1d7e"), ("SPARK_CONF_DIR", "/opt/spark/conf"),
        ("SPARK_EXECUTOR_ID", "17"), ("SPARK_RESOURCE_PROFILE_ID", "0"),
        ("SPARK_JAVA_OPT_0", "-Dspark.driver.port=7078"), ("SPARK_JAVA_OPT_1", "-Dspark.driver.blockManager.port=7079"),
        ("SPARK_LOCAL_DIRS", "/var/data/spark-1f0c6a2e-3b9d-4c55-9a57-1d0f1b2c3d4e"))]
    env.append({"name": "SPARK_EXECUTOR_POD_IP",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}})
    env.append({"name": "SPARK_EXECUTOR_POD_NAME",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "spark-pi-8f2c1d7e-exec-", "namespace": meta["namespace"],
                         "labels": {"spark-role": "executor", "spark-app-selector": "spark-8f2c1d7e",
                                    "spark-app-name": "spark-pi", "spark-exec-id": "17",
                                    "spark-exec-resourceprofile-id": "0",
                                    "sparkoperator.k8s.io/app-name": "spark-pi",
                                    "sparkoperator.k8s.io/launched-by-spark-operator": "true"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                              "uid": meta["uid"], "controller": True}]},
            "spec": {"restartPolicy": "Never", "hostname": "spark-pi-8f2c1d7e-exec-17",
                     "serviceAccountName": "spark", "enableServiceLinks": False,
                     "securityContext": {"fsGroup": 185},
                     "containers": [{
                         "name": "spark-kubernetes-executor", "image": "spark:3.5.3",
                         "imagePullPolicy": "IfNotPresent", "args": ["executor"], "env": env,
                         "ports": [{"name": "blockmanager", "containerPort": 7079, "protocol": "TCP"}],
                         "resources": {"requests": {"cpu": "2", "memory": "4505Mi"},
                                       "limits": {"cpu": "2", "memory": "4505Mi"}},
                         "securityContext": {"runAsUser": 185, "allowPrivilegeEscalation": False,
                                             "capabilities": {"drop": ["ALL"]}},
                         "volumeMounts": [{"name": "spark-local-dir-1",
                                           "mountPath": "/var/data/spark-1f0c6a2e-3b9d-4c55-9a57-1d0f1b2c3d4e"},
                                          {"name": "spark-conf-volume-exec", "mountPath": "/opt/spark/conf"}]}],
                     "volumes": [{"name": "spark-local-dir-1", "emptyDir": {}},
                                 {"name": "spark-conf-volume-exec",
                                  "configMap": {"name": "spark-exec-8f2c1d7e-conf-map", "defaultMode": 420}}]}}


# --- the servers -----------------------------------------------------------------------------------------------

class Server:
    """A server process whose output goes to a file; ``url`` is its HTTPS base."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], cwd: Path, workdir: Path, port: int) -> None:
        self.name, self.port = name, port
        self.url = f"https://127.0.0.1:{port}"
        self.log_path = workdir / f"{name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop())
        self.process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT)

    def request(self, context: ssl.SSLContext, method: str, path: str, body: bytes | None = None,
                timeout: float = 10) -> tuple[int, bytes, str]:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=context, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, response.read(), response.getheader("Content-Type") or ""
        finally:
            conn.close()

    def wait_ready(self, context: ssl.SSLContext, method: str, path: str, timeout: float = 60) -> None:
        """Until ``method path`` gets an answer below 500 (the floor has no readiness endpoint: a 400 will do)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log_path.read_text(errors='replace')[-3000:]}")
            try:
                if self.request(context, method, path, b"{}" if method == "POST" else None, timeout=2)[0] < 500:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready: {self.log_path.read_text(errors='replace')[-3000:]}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()


def start_webhook(workdir: Path, tls: Any, kubeconfig: str) -> tuple[Server, Any]:
    """``kubenexus webhook --config FILE`` as the Deployment runs it: the shipped config.yaml with only what a
    cluster provides changed (port, certificate directory, the API server), and no metrics directory set."""
    settings = yaml.safe_load(SHIPPED_CONFIG.read_text())
    port = free_port()
    settings["server"].update({"port": port, "certDir": str(Path(tls.cert).parent)})
    settings["kubeconfig"] = kubeconfig
    settings["certs"] = {"mode": "external"}  # the certificates are given (the Deployment's pod writes its own)
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(settings))
    env = {k: v for k, v in deployment_env().items() if not k.startswith("KUBENEXUS_")}
    return (Server("webhook", [KUBENEXUS, "webhook", "--config", str(path)], env, workdir, workdir, port),
            config_from_text(path.read_text(), str(path)))


def start_floor(workdir: Path, tls: Any, config: Any) -> Server:
    """The Flask no-op of bench/floor/ under stock gunicorn gthread, with the webhook's workers, threads,
    keep-alive and TLS settings."""
    port = free_port()
    conf = workdir / "floor_conf.py"
    conf.write_text(
        "import ssl\n"
        f"bind = '127.0.0.1:{port}'\nworker_class = 'gthread'\nworkers = {config.workers}\n"
        f"threads = {config.threads}\nkeepalive = {config.keep_alive_seconds}\n"
        f"certfile = {tls.cert!r}\nkeyfile = {tls.key!r}\n"
        "def ssl_context(conf, default_ssl_context_factory):\n"
        "    ctx = default_ssl_context_factory()\n"
        "    ctx.minimum_version = ssl.TLSVersion.TLSv1_2\n"
        "    return ctx\n")
    return Server("floor", [sys.executable, "-m", "gunicorn", "-c", str(conf), "noop_app:app"],
                  dict(os.environ), FLOOR, workdir, port)


# --- the load generators ---------------------------------------------------------------------------------------

_WRK_RATE = re.compile(r"^Requests/sec:\s+([0-9.]+)", re.M)
_WRK_TOTAL = re.compile(r"^\s*([0-9]+) requests in ", re.M)
_WRK_NON_2XX = re.compile(r"^\s*Non-2xx or 3xx responses:\s+([0-9]+)", re.M)
_WRK_SOCKET = re.compile(r"Socket errors: connect ([0-9]+), read ([0-9]+), write ([0-9]+), timeout ([0-9]+)")


def parse_wrk(output: str) -> dict[str, float]:
    """Requests, rate and errors from wrk's report (non-2xx: the server never answers 3xx here)."""
    rate, total = _WRK_RATE.search(output), _WRK_TOTAL.search(output)
    if rate is None or total is None:
        raise RuntimeError(f"unexpected wrk output:\n{output}")
    non_2xx = _WRK_NON_2XX.search(output)
    socket_errors = _WRK_SOCKET.search(output)
    return {"requests": int(total.group(1)), "rate_per_s": float(rate.group(1)),
            "errors": (int(non_2xx.group(1)) if non_2xx else 0)
            + (sum(int(g) for g in socket_errors.groups()) if socket_errors else 0)}


def _run_wrk(url: str, body_file: Path, connections: int, seconds: int, script: str) -> str:
    """wrk's output for ``seconds`` of POSTs of ``body_file`` through ``script`` (in bench/floor)."""
    out = subprocess.run(["wrk", "-t", str(min(connections, 2)), "-c", str(connections), "-d", f"{seconds}s",
                          "-s", str(FLOOR / script), url], env={**os.environ, "BODY": str(body_file)},
                         capture_output=True, text=True, timeout=seconds + 60)
    if out.returncode != 0:
        raise RuntimeError(f"wrk failed: {out.stderr}{out.stdout}")
    return out.stdout


def wrk(url: str, body_file: Path, connections: int, seconds: int) -> dict[str, float]:
    return parse_wrk(_run_wrk(url, body_file, connections, seconds, "post.lua"))


def wrk_timeline(url: str, body_file: Path, connections: int, seconds: int) -> dict[str, Any]:
    """One continuous wrk run; answers per whole second of it (the first and last seconds are partial: left out)."""
    output = _run_wrk(url, body_file, connections, seconds, "timeline.lua")
    counts = {int(second): int(n) for second, n in re.findall(r"^second ([0-9]+) ([0-9]+)$", output, re.M)}
    if len(counts) < 3:
        raise RuntimeError(f"wrk reported no timeline:\n{output}")
    first, last = min(counts), max(counts)
    return {**parse_wrk(output), "per_second": [counts.get(s, 0) for s in range(first + 1, last)]}


def drift(per_second: list[int]) -> float:
    """The median rate of the last 10 s over that of the first 10 s (medians: a second lost to another process on
    the machine is not a trend)."""
    window = max(1, min(10, len(per_second) // 2))
    return statistics.median(per_second[-window:]) / max(statistics.median(per_second[:window]), 1)


def parse_hey_csv(output: str, sent: int) -> dict[str, float]:
    """p50 and errors from hey's CSV (one row per answered request; requests with a socket error have none)."""
    latencies, non_2xx = [], 0
    for line in output.splitlines():
        fields = line.split(",")
        if len(fields) < 8 or not fields[0][:1].isdigit():
            continue  # the header
        latencies.append(float(fields[0]) * 1000)
        non_2xx += not 200 <= int(fields[6]) < 300
    if not latencies:
        raise RuntimeError(f"hey answered nothing:\n{output[-2000:]}")
    latencies.sort()
    return {"requests": len(latencies), "p50_ms": statistics.median(latencies),
            "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            "errors": non_2xx + sent - len(latencies)}


def hey(url: str, body_file: Path, rate: float, seconds: float, connections: int = 4) -> dict[str, float]:
    """A fixed ``rate`` over ``connections`` kept-alive connections (hey paces each one at rate/connections)."""
    total = int(rate * seconds)
    out = subprocess.run(["hey", "-n", str(total), "-c", str(connections), "-q", f"{rate / connections:g}",
                          "-m", "POST", "-T", "application/json", "-D", str(body_file), "-o", "csv", url],
                         capture_output=True, text=True, timeout=seconds + 60)
    if out.returncode != 0:
        raise RuntimeError(f"hey failed: {out.stderr}{out.stdout}")
    return parse_hey_csv(out.stdout, total)


# --- the run ---------------------------------------------------------------------------------------------------

def _checked(status: int, body: bytes, what: str) -> dict[str, Any]:
    if status != 200:
        raise RuntimeError(f"{what}: HTTP {status}: {body[:300]!r}")
    return json.loads(body)["response"]


def warm_up(webhook: Server, floor: Server, context: ssl.SSLContext, driver: dict[str, Any],
            executor: dict[str, Any], namespace: str) -> bytes:
    """Admit the driver and an executor (the owner cache of the worker that answers is warm from then on), check
    both answers and the floor's, and return the executor's review body for the load generators."""
    answer = _checked(*webhook.request(context, "POST", "/mutate", review_body(driver, namespace))[:2], "driver")
    assert answer["allowed"] and "patch" in answer, answer
    body = review_body(executor, namespace)
    for _ in range(WARM_UP_REQUESTS - 1):  # both workers' caches (connections land on either)
        answer = _checked(*webhook.request(context, "POST", "/mutate", body)[:2], "executor")
        patch = json.loads(base64.b64decode(answer["patch"]))
        group = [op for op in patch if op["path"].endswith(keys.POD_GROUP_LABEL.replace("/", "~1"))]
        assert group and group[0]["value"] == "spark-pi", patch
    floor_answer = _checked(*floor.request(context, "POST", "/mutate", body)[:2], "floor")
    assert floor_answer == {"uid": json.loads(body)["request"]["uid"], "allowed": True}, floor_answer
    return body


def _metrics_total(webhook: Server, context: ssl.SSLContext) -> float:
    """Requests /metrics counts as answered by /mutate (all workers): the metrics must see the load too."""
    status, text, content_type = webhook.request(context, "GET", "/metrics")
    assert status == 200 and content_type.startswith("text/plain"), (status, content_type)
    pattern = re.compile(r'^kubenexus_webhook_requests_total\{endpoint="mutate",result="[a-z]+"\} ([0-9.e+]+)$', re.M)
    return sum(float(v) for v in pattern.findall(text.decode()))


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure(webhook: Server, floor: Server, body_file: Path, rounds: int, seconds: int,
            drift_seconds: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {}
    servers = {"webhook": webhook, "floor": floor}
    for index in range(rounds):
        order = ("webhook", "floor") if index % 2 == 0 else ("floor", "webhook")  # A,B,B,A: no position bias
        for connections in (4, 16):
            for name in order:
                runs.setdefault(f"{name}_wrk{connections}", []).append(
                    wrk(servers[name].url + "/mutate", body_file, connections, seconds))
        for name in order:
            runs.setdefault(f"{name}_hey200", []).append(hey(servers[name].url + "/mutate", body_file, 200, seconds))
    ratios = {
        f"throughput_{c}": spread([w["rate_per_s"] / f["rate_per_s"]
                                   for w, f in zip(runs[f"webhook_wrk{c}"], runs[f"floor_wrk{c}"], strict=True)])
        for c in (4, 16)}
    ratios["p50_at_200"] = spread([w["p50_ms"] / f["p50_ms"]
                                   for w, f in zip(runs["webhook_hey200"], runs["floor_hey200"], strict=True)])
    timeline = wrk_timeline(webhook.url + "/mutate", body_file, 16, drift_seconds)
    return {"runs": runs, "ratios": ratios,
            "drift": {"per_second": timeline["per_second"], "last_over_first": drift(timeline["per_second"]),
                      "requests": timeline["requests"], "errors": timeline["errors"]}}


def summary(result: dict[str, Any]) -> str:
    """The figures as docs/operations/performance-admission.md shows them: medians of the interleaved runs, the
    ratios' medians and spread."""
    runs, ratios = result["runs"], result["ratios"]
    lines = []
    for c in (4, 16):
        webhook = statistics.median(r["rate_per_s"] for r in runs[f"webhook_wrk{c}"])
        floor = statistics.median(r["rate_per_s"] for r in runs[f"floor_wrk{c}"])
        ratio = ratios[f"throughput_{c}"]
        lines.append(f"wrk {c:>2} connections: webhook {webhook:,.0f} req/s, floor {floor:,.0f} req/s, ratio "
                     f"{ratio['median']:.2f}x ({ratio['min']:.2f}-{ratio['max']:.2f})")
    webhook = statistics.median(r["p50_ms"] for r in runs["webhook_hey200"])
    floor = statistics.median(r["p50_ms"] for r in runs["floor_hey200"])
    ratio = ratios["p50_at_200"]
    lines.append(f"hey p50 at 200 req/s: webhook {webhook:.2f} ms, floor {floor:.2f} ms, ratio {ratio['median']:.2f}x "
                 f"({ratio['min']:.2f}-{ratio['max']:.2f})")
    seconds = result["drift"]["per_second"]
    window = max(1, min(10, len(seconds) // 2))
    lines.append(f"webhook over a {len(seconds) + 2} s run (16 connections): first {window} s "
                 f"{statistics.median(seconds[:window]):,.0f} req/s, last {window} s "
                 f"{statistics.median(seconds[-window:]):,.0f} req/s (medians), ratio "
                 f"{result['drift']['last_over_first']:.2f}")
    return "\n".join(lines)


def failures_of(result: dict[str, Any], smoke: bool) -> list[str]:
    failures = []
    errors = sum(r["errors"] for runs in result["runs"].values() for r in runs) + result["drift"]["errors"]
    if errors:
        failures.append(f"{errors} errors (non-2xx answers or socket errors)")
    if any(r["requests"] <= 0 for runs in result["runs"].values() for r in runs):
        failures.append("a run answered no request")
    if smoke:
        return failures
    ratios = result["ratios"]
    for c in (4, 16):
        if ratios[f"throughput_{c}"]["median"] < GOALS["throughput_ratio"]:
            failures.append(f"throughput at {c} connections {ratios[f'throughput_{c}']['median']:.2f}x the floor "
                            f"(goal >= {GOALS['throughput_ratio']}x)")
    if ratios["p50_at_200"]["median"] > GOALS["p50_ratio"]:
        failures.append(f"p50 at 200 requests/s {ratios['p50_at_200']['median']:.2f}x the floor "
                        f"(goal <= {GOALS['p50_ratio']}x)")
    if abs(result["drift"]["last_over_first"] - 1) > GOALS["drift"]:
        failures.append(f"last 10 s at {result['drift']['last_over_first']:.2f}x the first (goal within 10 %)")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true",
                        help="a few seconds: checks the servers, the load generators' plumbing and zero errors")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (webhook, floor) per figure")
    parser.add_argument("--seconds", type=int, default=8, help="length of each run (whole seconds, as wrk takes them)")
    parser.add_argument("--drift-seconds", type=int, default=60, help="the degradation run")
    args = parser.parse_args()
    missing = [tool for tool in ("wrk", "hey") if shutil.which(tool) is None]
    if missing:
        print(f"webhook_floor_bench: {' and '.join(missing)} not found; install with: {INSTALL}", file=sys.stderr)
        if not args.smoke:
            return 2
    rounds, seconds, drift_seconds = (1, 1, 5) if args.smoke else (args.rounds, args.seconds, args.drift_seconds)

    workdir = Path(tempfile.mkdtemp(prefix="kubenexus-floor-bench-"))
    cluster = LocalCluster(workdir=str(workdir / "cluster")).start()
    servers: list[Server] = []
    try:
        admin = Client(cluster.api, ADMIN)
        for crd in crd_manifests():
            admin.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        namespace = "spark-jobs"
        admin.create("/api/v1/namespaces", {"metadata": {"name": namespace,
                                                         "labels": {keys.GANG_SCHEDULING: keys.NAMESPACE_ENABLED}}})
        app = admin.create(f"/apis/sparkoperator.k8s.io/v1beta2/namespaces/{namespace}/sparkapplications",
                           _application(namespace))
        driver = admin.create(f"/api/v1/namespaces/{namespace}/pods", _driver(app, namespace))
        executor = _executor(driver)
        tls = generate("kubenexus-webhook", "kubenexus-system", str(workdir / "certs"), extra_ips=["127.0.0.1"])
        context = ssl.create_default_context(cafile=tls.ca_cert)
        webhook, config = start_webhook(workdir, tls, cluster.add_user(WEBHOOK_IDENTITY))
        servers.append(webhook)
        floor = start_floor(workdir, tls, config)
        servers.append(floor)
        webhook.wait_ready(context, "GET", "/readyz")
        floor.wait_ready(context, "POST", "/mutate")
        body = warm_up(webhook, floor, context, driver, executor, namespace)
        body_file = workdir / "review.json"
        body_file.write_bytes(body)
        before = _metrics_total(webhook, context)
        if before < WARM_UP_REQUESTS:  # /metrics must see every worker's samples, however the webhook was started
            raise RuntimeError(f"/metrics counted {before:.0f} /mutate requests after {WARM_UP_REQUESTS} answered")
        result: dict[str, Any] = {"runs": {}, "ratios": {}, "drift": {"errors": 0, "last_over_first": 1.0}}
        if not missing:
            result = measure(webhook, floor, body_file, rounds, seconds, drift_seconds)
            answered = _metrics_total(webhook, context) - before
            sent = sum(r["requests"] for name, runs in result["runs"].items() if name.startswith("webhook")
                       for r in runs)
            if answered < sent:  # wrk counts requests it completed; the webhook's counter must have seen them
                raise RuntimeError(f"/metrics counted {answered:.0f} /mutate requests, the load generators {sent}")
    finally:
        for server in servers:
            server.stop()
        cluster.stop()
    report = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "cpu_model": _cpu_model()},
        "settings": {"rounds": rounds, "seconds_per_run": seconds, "drift_seconds": drift_seconds,
                     "workers": config.workers, "threads": config.threads, "review_bytes": len(body)},
        **result,
    }
    print(json.dumps(report, indent=2))
    if result["runs"]:
        print(summary(result), file=sys.stderr)
    failures = failures_of(result, args.smoke)
    for failure in failures:
        print(f"GOAL MISSED: {failure}", file=sys.stderr)
    shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failures else 0


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())

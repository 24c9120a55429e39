"""Owner cache memory benchmark (``make bench``; ``--smoke`` for the fast run in ``make test``).

Starts ``kubenexus webhook`` with the shipped gunicorn settings (2 workers) against the stub apiserver,
which serves N distinct owners of ~50 KiB of JSON each, as the apiserver returns them (managedFields,
kubectl's last-applied-configuration, pod templates with images, env, volumes and probes), a mix of
PyTorchJobs, SparkApplications, RayClusters and MPIJobs, all opted in. From outside the process it
sends one admission for a pod of every owner to *each* worker (connections are matched to workers
through /proc), so every worker reads and caches all N owners, and it reports each worker's RSS
(VmRSS from /proc) before and after. The owner cache's TTL is set to an hour so that nothing expires
during the run: the worst case. Goal: 10,000 owners grow no worker by 64 MiB or more.

``--baseline REV`` runs the same against the code of a git revision first (e.g. the one before the
cache was slimmed and bounded in bytes), for a side-by-side figure.
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
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.reviews import review_body  # noqa: E402
from certs.generate import generate  # noqa: E402
from cluster.stub import StubApiServer  # noqa: E402
from gang import keys  # noqa: E402
from gang.config import Config  # noqa: E402
from kubenexus.local_webhook import LocalWebhook  # noqa: E402

GOAL_MIB = 64.0
OWNER_BYTES = 50 * 1024
NAMESPACE = "bench-memory"
ROOT = Path(__file__).resolve().parent.parent
#: One owner of each kind, as the apiserver returns it (server-side fields, kubectl's annotation, pod templates as
#: real ones are; captured from tests/support/operator_fixtures.py's ``as_returned``), and the pod its operator
#: creates; ``NAME`` and ``UID`` stand for each owner's name and uid.
OWNERS = Path(__file__).resolve().parent / "owners.jsonl"


def _owner_json(owner: dict) -> str:
    """The owner padded (an unread spec field) to ~OWNER_BYTES."""
    owner["spec"]["padding"] = ""
    text = json.dumps(owner)
    owner["spec"]["padding"] = "p" * max(0, OWNER_BYTES - len(text))  # an unread spec field of the real size
    return json.dumps(owner)


class Owners:
    """N owners behind the stub's ``generate``: owner i is the (i mod 4)th kind, named ``o<i>``."""

    def __init__(self) -> None:
        with open(OWNERS, encoding="utf-8") as lines:
            kinds = [json.loads(line) for line in lines]
        self.kinds = [(kind["plural"], _owner_json(kind["owner"]), json.dumps(kind["pod"])) for kind in kinds]
        self.pattern = re.compile(rf"/namespaces/{NAMESPACE}/([a-z]+)/o([0-9]+)$")

    def body(self, path: str) -> bytes | None:
        found = self.pattern.search(path)
        if not found:
            return None
        index = int(found.group(2))
        plural, owner, _ = self.kinds[index % len(self.kinds)]
        if plural != found.group(1):
            return None
        return owner.replace("NAME", f"o{index}").replace("UID", f"uid-{index}").encode()

    def review(self, index: int) -> bytes:
        pod = json.loads(self.kinds[index % len(self.kinds)][2].replace("NAME", f"o{index}").replace(
            "UID", f"uid-{index}"))
        return review_body(pod, NAMESPACE)


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        return int(re.search(r"^VmRSS:\s+(\d+) kB", status.read(), re.MULTILINE).group(1)) / 1024


def _workers(master: int, expected: int) -> list[int]:
    """The pids of the gunicorn master's workers, once all ``expected`` have booted."""
    deadline = time.monotonic() + 30
    while len(pids := _children(master)) < expected:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(pids)} of {expected} webhook workers booted")
        time.sleep(0.1)
    return pids


def _children(master: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii") as stat:
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == master:
                        pids.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return sorted(pids)


def _serving_pid(local_port: int, server_port: int, workers: list[int]) -> int | None:
    """The worker holding the server side of the connection from ``local_port`` (/proc/net/tcp + fds)."""
    inode = None
    with open("/proc/net/tcp", encoding="ascii") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if (int(fields[1].split(":")[1], 16), int(fields[2].split(":")[1], 16)) == (server_port, local_port):
                inode = fields[9]
    for pid in workers:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                    return pid
        except OSError:
            continue
    return None


def _connections(webhook: LocalWebhook, workers: list[int], per_worker: int) -> dict[int, list[Any]]:
    """``per_worker`` TLS connections served by each worker (new ones until every worker has its share)."""
    found: dict[int, list[Any]] = {pid: [] for pid in workers}
    for _ in range(200):
        if all(len(c) >= per_worker for c in found.values()):
            return found
        conn = http.client.HTTPSConnection("127.0.0.1", webhook.port, context=webhook.context, timeout=30)
        conn.request("GET", "/healthz")
        conn.getresponse().read()
        pid = _serving_pid(conn.sock.getsockname()[1], webhook.port, workers)
        if pid is not None and len(found[pid]) < per_worker:
            found[pid].append(conn)
        else:
            conn.close()
    raise RuntimeError(f"could not reach every worker: {[(p, len(c)) for p, c in found.items()]}")


def _cache_sizes(conn: Any) -> dict[int, dict[str, float]]:
    """Per worker pid: the owner cache's entries and measured MiB, from /metrics (absent before they existed)."""
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    sizes: dict[int, dict[str, float]] = {}
    for name, key, scale in (("entries", "cache_entries", 1), ("bytes", "cache_mib", 2**20)):
        sample = rf'^kubenexus_webhook_owner_cache_{name}{{pid="(\d+)"}} (\S+)$'
        for pid, value in re.findall(sample, text, re.MULTILINE):
            sizes.setdefault(int(pid), {})[key] = round(float(value) / scale, 1)
    return sizes


def _drive(conns: list[Any], owners: Owners, indexes: range, errors: list[str]) -> None:
    """Admit a pod of every owner in ``indexes`` over ``conns`` (one thread each, owners split between them)."""

    def run(conn: Any, share: range) -> None:
        for index in share:
            conn.request("POST", "/mutate", body=owners.review(index), headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            body = response.read()
            if response.status != 200 or keys.GANG_GATE.encode() not in base64.b64decode(
                    json.loads(body)["response"].get("patch", "")):
                errors.append(f"owner {index}: HTTP {response.status} {body[:200]!r}")

    threads = [threading.Thread(target=run, args=(conn, indexes[i::len(conns)])) for i, conn in enumerate(conns)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def measure(owners_count: int, code: Path | None, workdir: Path, tls: Any) -> dict[str, Any]:
    """One run: the webhook from the working tree (``code`` None) or from an extracted revision."""
    apiserver = StubApiServer()
    owners = Owners()
    apiserver.generate = owners.body
    apiserver.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    saved = os.environ.get("PYTHONPATH")
    if code is not None:
        os.environ["PYTHONPATH"] = str(code)
    try:
        webhook = LocalWebhook(workdir, tls,
                               apiserver.write_kubeconfig(str(workdir / f"kubeconfig-{uuid.uuid4().hex}")),
                               {"ownerCache": {"ttlSeconds": 3600}})
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    try:
        webhook.wait_ready()
        workers = _workers(webhook.process.pid, Config().workers)
        conns = _connections(webhook, workers, per_worker=2)
        errors: list[str] = []
        warm = range(owners_count, owners_count + 40)  # load every code path once, not counted
        for pid in workers:
            _drive(conns[pid], owners, warm, errors)
        time.sleep(0.5)
        before = {pid: _rss_mib(pid) for pid in workers}
        started = time.monotonic()
        for pid in workers:  # each worker reads and caches every owner
            _drive(conns[pid], owners, range(owners_count), errors)
        took = time.monotonic() - started
        after = {pid: _rss_mib(pid) for pid in workers}
        cache = _cache_sizes(conns[workers[0]][0])
        reads = sum(n for path, n in apiserver.reads.items() if owners.pattern.search(path))
        for conn in (c for cs in conns.values() for c in cs):
            conn.close()
    finally:
        webhook.stop()
        apiserver.close()
    return {"workers": [{"pid": pid, "rss_before_mib": round(before[pid], 1), "rss_after_mib": round(after[pid], 1),
                         "growth_mib": round(after[pid] - before[pid], 1), **cache.get(pid, {})} for pid in workers],
            "owner_reads": reads, "admissions": len(workers) * owners_count, "seconds": round(took, 1),
            "errors": len(errors), "first_errors": errors[:3]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="300 owners: checks it works, not the figure")
    parser.add_argument("--owners", type=int, default=10_000)
    parser.add_argument("--baseline", metavar="REV", help="also run the code of this git revision, first")
    args = parser.parse_args()
    count = 300 if args.smoke else args.owners
    workdir = Path(tempfile.mkdtemp(prefix="kubenexus-membench-"))
    tls = generate("kubenexus-webhook", "kubenexus-system", str(workdir / "certs"), extra_ips=["127.0.0.1"])
    report: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "host": socket.gethostname()},
        "owners": count, "owner_json_bytes": len(Owners().body(f"/namespaces/{NAMESPACE}/pytorchjobs/o1") or b""),
        "goal_growth_mib": GOAL_MIB}
    try:
        if args.baseline:
            code = workdir / "baseline"
            code.mkdir()
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.baseline], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(code)], input=archive, check=True)
            report["baseline"] = {"revision": args.baseline, **measure(count, code, workdir, tls)}
        report["current"] = measure(count, None, workdir, tls)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(report, indent=2))
    current = report["current"]
    failures = [f"{current['errors']} admissions not answered with a gate"] if current["errors"] else []
    workers = len(current["workers"])
    if current["owner_reads"] < workers * count:
        failures.append(f"{current['owner_reads']} owner reads for {count} owners on {workers} workers: not every "
                        "worker read every owner")
    worst = max(w["growth_mib"] for w in current["workers"])
    if not args.smoke and count >= 10_000 and worst >= GOAL_MIB:
        failures.append(f"a worker grew by {worst} MiB (goal < {GOAL_MIB} MiB)")
    for failure in failures:
        print(f"GOAL MISSED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""``kubenexus cluster serve`` and ``kubenexus controller`` as users run them (the demo: ``tests/test_demo.py``)."""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.request

import pytest
import yaml
from kubernetes import client, config

from cluster.local import LocalCluster
from kubenexus.local_webhook import KUBENEXUS, free_port

pytestmark = pytest.mark.e2e


def test_cluster_serve_runs_until_interrupted_and_serves_its_kubeconfig(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    serve = subprocess.Popen([KUBENEXUS, "cluster", "serve", "--bare", "--nodes", "2", "--node-cpu", "4",
                              "--kubeconfig-out", str(kubeconfig)], stdout=subprocess.PIPE, text=True)
    try:
        assert "local cluster at https://127.0.0.1:" in serve.stdout.readline()
        assert serve.stdout.readline().strip() == f"export KUBECONFIG={kubeconfig}"
        nodes = client.CoreV1Api(config.new_client_from_config(str(kubeconfig))).list_node().items
        assert sorted(n.metadata.name for n in nodes) == ["node-0", "node-1"]
        assert {n.status.allocatable["cpu"] for n in nodes} == {"4"}
    finally:
        serve.send_signal(signal.SIGINT)
        assert serve.wait(timeout=20) == 0


def test_cluster_serve_nodes_file_takes_what_kubectl_get_nodes_prints(tmp_path):
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-a", "labels": {"accelerator": "a100"}},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"},
                       "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}}}
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [node]}))
    kubeconfig = tmp_path / "kubeconfig"
    serve = subprocess.Popen([KUBENEXUS, "cluster", "serve", "--bare", "--nodes-file", str(nodes), "--kubeconfig-out",
                              str(kubeconfig)], stdout=subprocess.PIPE, text=True)
    try:
        assert "1 node(s)" in serve.stdout.readline()
        node = client.CoreV1Api(config.new_client_from_config(str(kubeconfig))).read_node("gpu-a")
        assert node.status.allocatable["nvidia.com/gpu"] == "8" and node.metadata.labels["accelerator"] == "a100"
    finally:
        serve.terminate()
        assert serve.wait(timeout=20) == 0


def test_cluster_serve_rejects_a_bad_nodes_file(tmp_path):
    bad = tmp_path / "nodes.yaml"
    bad.write_text("kind: Pod\nmetadata: {name: x}\n")
    done = subprocess.run([KUBENEXUS, "cluster", "serve", "--bare", "--nodes-file", str(bad), "--kubeconfig-out",
                           str(tmp_path / "kc")], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "expected one or more Node objects" in done.stderr


def test_controller_serves_health_leads_and_hands_back_its_lease_on_sigterm(tmp_path):
    with LocalCluster(workdir=str(tmp_path)) as cluster:
        admin = config.new_client_from_config(cluster.kubeconfig)
        client.CoreV1Api(admin).create_namespace({"metadata": {"name": "kubenexus-system"}})
        kubeconfig = cluster.add_user("system:serviceaccount:kubenexus-system:kubenexus-controller")
        port = free_port()
        run = subprocess.Popen([KUBENEXUS, "controller", "--kubeconfig", kubeconfig, "--leader-elect",
                                "--identity", "replica-a", "--port", str(port)], stderr=subprocess.PIPE, text=True)
        try:
            leases = client.CoordinationV1Api(admin)
            deadline = time.monotonic() + 20
            holder = None
            while time.monotonic() < deadline and holder != "replica-a":
                time.sleep(0.2)
                try:
                    lease = leases.read_namespaced_lease("kubenexus-controller", "kubenexus-system")
                    holder = lease.spec.holder_identity
                except client.ApiException:
                    continue
            assert holder == "replica-a"
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
                assert response.status == 200
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                assert "kubenexus_controller_is_leader 1.0" in response.read().decode()
        finally:
            run.send_signal(signal.SIGTERM)
            code = run.wait(timeout=20)
        assert code == 0, run.stderr.read()
        lease = leases.read_namespaced_lease("kubenexus-controller", "kubenexus-system")
        assert not lease.spec.holder_identity, "the Lease is handed back on a clean shutdown"


def test_controller_refuses_an_invalid_config(tmp_path):
    bad = tmp_path / "config.yaml"
    bad.write_text("controller:\n  starvationSeconds: -5\n")
    done = subprocess.run([KUBENEXUS, "controller", "--config", str(bad)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "controller.starvationSeconds" in done.stderr

"""``kubenexus cluster serve`` with the product, as a user runs it: the gate controller's decisions in its terminal,
a component that stops by itself said on one line (and the command exits 1), and nothing left behind in the temp
directory (TLS keys, the service accounts' kubeconfigs, the webhook's metrics), whichever way it ends."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from kubenexus.local_webhook import KUBENEXUS
from tests.support.cli import ENV

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
STARTED = "Ctrl-C stops it."


class Serve:
    """A running ``kubenexus cluster serve``: what it printed, line by line, waited for as it comes."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp / "tmp"  # its TMPDIR: where its work folder goes
        self.tmp.mkdir()
        self.kubeconfig = tmp / "kubeconfig"
        self.process = subprocess.Popen([KUBENEXUS, "cluster", "serve", "--kubeconfig-out", str(self.kubeconfig)],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        env={**ENV, "TMPDIR": str(self.tmp)})
        self.out: list[str] = []
        self.err: list[str] = []
        self._changed = threading.Condition()
        for stream, lines in ((self.process.stdout, self.out), (self.process.stderr, self.err)):
            threading.Thread(target=self._read, args=(stream, lines), daemon=True).start()
        self.wait_for(lambda: any(STARTED in line for line in self.out), "its start")

    def _read(self, stream: object, lines: list[str]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            with self._changed:
                lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, check: Callable[[], bool], what: str, timeout: float = 60) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: check() or self.process.poll() is not None, timeout) or not check():
                raise AssertionError(f"no {what}: printed {self.out}, {self.err}, exit {self.process.poll()}")

    def ended(self, timeout: float = 30) -> int:
        code = self.process.wait(timeout=timeout)
        self.wait_for(lambda: True, "end of output")
        return code

    def left_behind(self) -> list[str]:
        return sorted(os.listdir(self.tmp))


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    running = Serve(tmp_path)
    yield running
    if running.process.poll() is None:
        running.process.send_signal(signal.SIGINT)
        running.process.wait(timeout=30)


def test_the_controllers_decisions_are_printed_and_ctrl_c_leaves_nothing_behind(serve: Serve) -> None:
    """Its banner said the controller's output was in this terminal: only its warnings were."""
    api = config.new_client_from_config(str(serve.kubeconfig))
    app = yaml.safe_load((EXAMPLES / "spark-pi.yaml").read_text())
    client.CustomObjectsApi(api).create_namespaced_custom_object("sparkoperator.k8s.io", "v1beta2", "gang-jobs",
                                                                 "sparkapplications", app)
    api.close()
    released = "controller: GangReleased on SparkApplication gang-jobs/spark-pi: released "
    serve.wait_for(lambda: any(released in line for line in serve.out), "release told")
    serve.wait_for(lambda: any("kubenexus.controller INFO: PodGroup gang-jobs/spark-pi created" in line
                               for line in serve.err), "the controller's log")
    assert any("kubenexus-cluster-" in name for name in serve.left_behind())
    serve.process.send_signal(signal.SIGINT)
    assert serve.ended() == 0, serve.err
    assert serve.left_behind() == []


def test_a_webhook_that_dies_is_said_and_ends_the_command(serve: Serve) -> None:
    """It went on serving silently, with nothing to admit pods."""
    pid = serve.process.pid  # its main thread started the webhook process
    [webhook] = [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    assert "webhook" in Path(f"/proc/{webhook}/cmdline").read_text()
    os.kill(webhook, signal.SIGKILL)
    assert serve.ended() == 1
    assert serve.err[-1] == ("kubenexus cluster serve: the webhook was killed by signal 9 (SIGKILL); the cluster is "
                             "stopped")
    assert serve.left_behind() == []


def test_a_controller_that_loses_its_lease_is_said_and_ends_the_command(serve: Serve) -> None:
    """Another holder takes the Lease: the controller stops leading, and nothing releases gangs any more."""
    api = config.new_client_from_config(str(serve.kubeconfig))
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    client.CoordinationV1Api(api).patch_namespaced_lease("kubenexus-controller", "kubenexus-system", {
        "spec": {"holderIdentity": "another-replica", "renewTime": now, "acquireTime": now}})
    api.close()
    assert serve.ended() == 1
    assert serve.err[-1] == ("kubenexus cluster serve: the gate controller stopped: it lost its Lease (its log is "
                             "above); the cluster is stopped")
    assert serve.left_behind() == []

"""``kubenexus timeline`` against a cluster: it reads pods, Events (and PodGroups, when the CRD is there) through the
kubeconfig it is given, in one namespace, the context's, or all, and writes the picture."""

from __future__ import annotations

import contextlib
import io
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from cluster.local import LocalCluster
from gang import keys
from kubenexus import cli
from tests.support.cli import kubenexus, one_line

pytestmark = pytest.mark.e2e


def gang_pod(name: str, gang: str, gated: bool) -> dict[str, Any]:
    return {"metadata": {"name": name,
                         "labels": {keys.POD_GROUP_LABEL: gang, keys.POD_GROUP_MIN_LABEL: "2"},
                         "annotations": {keys.OWNER_ANNOTATION: f"kubeflow.org/v1/PyTorchJob/{gang}"}},
            "spec": {"containers": [{"name": "main", "image": "pytorch:2.5"}],
                     "schedulingGates": [{"name": keys.GANG_GATE}] if gated else []}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Gangs in two namespaces, as the webhook labels them; no PodGroup CRD; one release Event."""
    with LocalCluster(workdir=str(tmp_path_factory.mktemp("timeline-cluster"))) as local:
        api = config.new_client_from_config(local.kubeconfig)
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": "ml"}})
        created = [core.create_namespaced_pod("ml", gang_pod(name, "train", gated=False)).metadata.creation_timestamp
                   for name in ("train-0", "train-1")]
        core.create_namespaced_pod("ml", {"metadata": {"name": "plain"},
                                          "spec": {"containers": [{"name": "main", "image": "busybox"}]}})
        core.create_namespaced_pod("default", gang_pod("eval-0", "eval", gated=True))
        released = max(created) + timedelta(seconds=0.5)  # the API keeps creation times in whole seconds
        client.EventsV1Api(api).create_namespaced_event("ml", {
            "metadata": {"name": "train.release"}, "eventTime": released.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "reason": "GangReleased", "type": "Normal", "action": "RemoveGate", "note": "released 2 members",
            "reportingController": "kubenexus-controller", "reportingInstance": "test",
            "regarding": {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "train", "namespace": "ml"}})
        api.close()
        yield local


def timeline(cluster: Any, out: Path, *scope: str) -> tuple[str, dict[str, list[str]]]:
    """Run the command (in this process: its start-up is not what is tested) and read the gangs it drew."""
    args = cli.parser().parse_args(["timeline", *scope, "--kubeconfig", cluster.kubeconfig, str(out)])
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert args.func(args) == 0
    page = out.read_text()
    blocks = re.findall(r'<g class="gang" data-gang="([^"]+)"[^>]*>(.*?)(?=<g class="gang"|</svg>)', page, re.S)
    return printed.getvalue(), {name: re.findall(r'data-pod="([^"]+)"', body) for name, body in blocks}


def test_one_namespace_its_gangs_and_members(cluster, tmp_path):
    out, gangs = timeline(cluster, tmp_path / "ml.html", "-n", "ml")
    assert out.strip() == f"{tmp_path / 'ml.html'}: 1 gang(s), 2 member(s)"
    assert gangs == {"train": ["train-0", "train-1"]}
    page = (tmp_path / "ml.html").read_text()
    assert "Gang timeline: namespace ml" in page
    # released by the Event, half a second after creation; not bound (no scheduler here): released until now
    member = re.findall(r'data-pod="train-1">.*?</g>', page, re.S)[0]
    assert "train-1: waiting 0.5s" in member and member.count('<rect class="released"') == 1


def test_every_namespace_and_the_contexts_default(cluster, tmp_path):
    _, everywhere = timeline(cluster, tmp_path / "all.html", "-A")
    assert everywhere == {"train": ["train-0", "train-1"], "eval": ["eval-0"]}
    _, default = timeline(cluster, tmp_path / "default.html")
    assert default == {"eval": ["eval-0"]}
    assert "waiting" in (tmp_path / "default.html").read_text()


def test_a_namespace_that_does_not_exist_is_said_not_drawn_empty(cluster, tmp_path):
    """It drew "0 gang(s)" and exited 0: as if the namespace had no gangs."""
    out = tmp_path / "none.html"
    done = kubenexus("timeline", "--kubeconfig", cluster.kubeconfig, "-n", "nosuchns", str(out))
    assert one_line(done, "", 2) == "kubenexus timeline: namespace nosuchns does not exist (kubectl get namespaces " \
                                    "lists them)"
    assert not out.exists() and done.stdout == ""

"""``kubenexus demo`` as a user reads it: short lines, each webhook decision under the pod it explains, every term
explained once, and a closing table per gang that says what the cluster's pods and PodGroups say; with
``--timeline``, the picture of the same gangs.

The demo runs once, in this process, through the command's entry point; just before its closing part (which reads
the cluster), the test lists the cluster's pods and PodGroups itself."""

from __future__ import annotations

import contextlib
import io
import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from gang import keys
from kube.client import api_request
from kubenexus import cli, demo

pytestmark = pytest.mark.e2e

POD_LINE = re.compile(r"^\[ *[\d.]+s\] pod (\S+) \(([^)]+)\): (.*)$")


@dataclass
class Run:
    code: int
    lines: list[str]
    pods: list[dict[str, Any]]  # the cluster's, as the story ended
    podgroups: list[dict[str, Any]]
    picture: Path
    kept: list[str]  # with --keep: the pods kubectl would list after the story, through the kubeconfig printed
    workdir: Path  # the cluster's, where that kubeconfig was


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    picture = tmp_path_factory.mktemp("demo") / "timeline.html"
    seen: dict[str, list[dict[str, Any]]] = {}
    finale = demo.finale

    def listing(kube: Any, story: demo.Story, args: Any) -> None:
        for what, path in (("pods", f"/api/v1/namespaces/{demo.NAMESPACE}/pods"),
                           ("podgroups", f"/apis/{keys.PODGROUP_API_VERSION}/namespaces/{demo.NAMESPACE}/podgroups")):
            code, body = api_request(kube, "GET", path, timeout=10)
            assert code == 200, body
            seen[what] = json.loads(body)["items"]
        finale(kube, story, args)

    out = io.StringIO()
    kept: list[str] = []
    workdir: list[Path] = []

    def keep() -> threading.Event:
        """Instead of waiting for Ctrl-C: look at the kept cluster as the printed lines say, then stop it."""
        kubeconfig = out.getvalue().split("export KUBECONFIG=")[1].split()[0]
        workdir.append(Path(kubeconfig).parent)
        api = config.new_client_from_config(kubeconfig)
        kept.extend(p.metadata.name for p in client.CoreV1Api(api).list_namespaced_pod(demo.NAMESPACE).items)
        api.close()
        stop = threading.Event()
        stop.set()
        return stop

    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        patch.setattr(demo, "finale", listing)
        patch.setattr(demo, "stop_on_signal", keep)
        args = cli.parser().parse_args(["demo", "--seconds", "5", "--timeline", str(picture), "--keep"])
        code = args.func(args)
    return Run(code, out.getvalue().splitlines(), seen["pods"], seen["podgroups"], picture, kept, workdir[0])


def gang_of(pod: dict[str, Any]) -> str | None:
    return (pod["metadata"].get("labels") or {}).get(keys.POD_GROUP_LABEL)


def test_every_line_is_short(run):
    assert run.code == 0
    long = [line for line in run.lines if len(line) > demo.WIDTH]
    assert not long, long


def test_each_pod_is_told_once_with_the_webhooks_decision_right_under_it(run):
    told: dict[str, str] = {}
    for index, line in enumerate(run.lines):
        match = POD_LINE.match(line)
        if match and not match.group(3).startswith("is Running"):
            name = match.group(1)
            assert name not in told, f"{name} told twice"
            following, words = index + 1, match.group(3)
            while run.lines[following].startswith(demo.INDENT + "  "):  # the pod line's own continuation
                words += " " + run.lines[following].strip()
                following += 1
            told[name] = words
            assert run.lines[following].startswith(demo.INDENT + "webhook: "), run.lines[index:following + 1]
        if line.startswith(demo.INDENT + "webhook: "):
            before = index - 1
            while run.lines[before].startswith(demo.INDENT + "  "):
                before -= 1
            assert POD_LINE.match(run.lines[before]), run.lines[before:index + 1]
    assert set(told) == {p["metadata"]["name"] for p in run.pods}
    for pod in run.pods:
        labels = pod["metadata"].get("labels") or {}
        words = told[pod["metadata"]["name"]]
        if gang_of(pod):
            assert words == (f"gated, gang {gang_of(pod)}, min-available {labels[keys.POD_GROUP_MIN_LABEL]}")
        else:
            assert words == "not gated, scheduled as usual"
    text = "\n".join(run.lines)
    assert "skip: root sparkoperator.k8s.io/v1beta2/SparkApplication/adhoc-report is not" in text
    assert "pod adhoc-report-driver is Running" in text


def test_each_term_is_explained_once(run):
    notes = [line for line in run.lines if line.startswith(demo.INDENT + "note: ")]
    assert len(notes) == len(demo.GLOSSARY)
    text = " ".join(line.strip() for line in run.lines)
    for explanation in demo.GLOSSARY.values():
        assert text.count(explanation) == 1, explanation


def table(lines: list[str], header: str) -> dict[str, list[str]]:
    start = next(i for i, line in enumerate(lines) if line.split() and line.split()[0] == header)
    rows = {}
    for line in lines[start + 1:]:
        if not line.strip():
            break
        rows[line.split()[0 if header == "GANG" else 1]] = line.split()
    return rows


def test_the_closing_table_says_what_the_cluster_says(run):
    closing = table(run.lines, "GANG")
    phases = {g["metadata"]["name"]: g["status"]["phase"] for g in run.podgroups}
    assert set(closing) == set(phases) == {"spark-pi", "resnet", "bert", "giant"}
    for name, (_, phase, submitted, waited, released, running) in closing.items():
        members = [p for p in run.pods if gang_of(p) == name]
        ungated = [p for p in members
                   if not any(g["name"] == keys.GANG_GATE for g in p["spec"].get("schedulingGates") or [])]
        assert phase == phases[name]
        assert int(submitted) == len(members)
        assert int(released) == len(ungated)
        assert int(running) == sum(p["status"].get("phase") == "Running" for p in members)
        assert waited.endswith("+") == (len(ungated) < len(members)), name
    waited = {name: float(row[3].rstrip("+")) for name, row in closing.items()}
    assert waited["bert"] > waited["resnet"]  # bert waited for resnet's GPUs, released when resnet finished
    assert closing["giant"][4] == "0" and closing["resnet"][1] == "Succeeded"
    # and the PodGroups as `kubectl get podgroups -A` shows them, before it
    listed = table(run.lines, "NAMESPACE")
    assert set(listed) == set(phases)
    assert listed["giant"][2:4] == ["NeverFits", "2"] and "never fits" in " ".join(listed["giant"])


def test_the_timeline_picture_draws_every_gang_member(run):
    page = run.picture.read_text()
    drawn = re.findall(r'<g class="member" data-pod="([^"]+)">', page)
    assert sorted(drawn) == sorted(p["metadata"]["name"] for p in run.pods if gang_of(p))
    assert sorted(re.findall(r'<g class="gang" data-gang="([^"]+)"', page)) == ["bert", "giant", "resnet",
                                                                               "spark-pi"]
    assert f"{demo.INDENT}{run.picture}" in run.lines


def test_keep_leaves_the_cluster_running_for_kubectl(run):
    assert run.code == 0
    running = {p["metadata"]["name"] for p in run.pods if (p.get("status") or {}).get("phase") == "Running"}
    assert running and running <= set(run.kept)
    assert "The cluster keeps running (Ctrl-C stops it). In another terminal:" in run.lines


def test_nothing_is_left_behind_but_the_picture(run):
    """Every run left its cluster's work folder (TLS keys, the service accounts' kubeconfigs) in the temp directory;
    the picture, whose path it printed, is the user's."""
    assert run.workdir.name.startswith("kubenexus-cluster-")
    assert not run.workdir.exists() and run.picture.exists()

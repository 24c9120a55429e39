"""``kubenexus explain`` as users run it: on files (every ``--objects`` file read; a wrong ``--pod`` file said what it
holds) and on a pod of a live cluster by name (``explain pod NAME -n NS``: the pod and its owners read from the
cluster, decided as on files), through the console script."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from cluster.local import LocalCluster
from tests.support.cli import kubenexus, one_line
from tests.support.contract import GATE, GROUP, MIN
from tests.support.polling import wait_for

pytestmark = pytest.mark.e2e

SPARK = Path(__file__).resolve().parent.parent / "workloads" / "spark" / "examples"
POD, OBJECTS = SPARK / "spark-pi-driver.yaml", SPARK / "spark-pi-objects.yaml"


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The example's Namespace and SparkApplication; the emulated spark-operator creates its driver (no webhook, no
    scheduler: the pod is as its operator created it)."""
    with LocalCluster(workdir=str(tmp_path_factory.mktemp("explain-cluster"))) as local:
        local.run_components(scheduler_names=())
        api = config.new_client_from_config(local.kubeconfig)
        namespace, app, _ = documents(OBJECTS)
        client.CoreV1Api(api).create_namespace(namespace)
        app["metadata"].pop("uid")
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "sparkoperator.k8s.io", "v1beta2", "analytics", "sparkapplications", app)
        core = client.CoreV1Api(api)
        wait_for(lambda: core.list_namespaced_pod("analytics", field_selector="metadata.name=spark-pi-driver").items,
                 what="the driver pod")
        for name in ("etl-0", "etl-1"):  # a gang of two as admission left it
            core.create_namespaced_pod("analytics", {
                "metadata": {"name": name, "labels": {GROUP: "etl", MIN: "2"}},
                "spec": {"containers": [{"name": "main", "image": "busybox"}], "schedulingGates": [{"name": GATE}]}})
        api.close()
        yield local


def test_objects_given_in_several_files_are_all_read(tmp_path: Path) -> None:
    """``--objects a.yaml --objects b.yaml`` kept only b.yaml: the SparkApplication went missing, silently."""
    namespace, app, _ = documents(OBJECTS)
    (tmp_path / "namespace.yaml").write_text(yaml.safe_dump(namespace))
    (tmp_path / "app.yaml").write_text(yaml.safe_dump(app))
    done = kubenexus("explain", "--pod", str(POD), "--objects", str(tmp_path / "app.yaml"), "--objects",
                     str(tmp_path / "namespace.yaml"), "-o", "json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["action"], result["missing"]) == ("gang", [])


def test_a_pod_file_that_holds_something_else_is_said_what_it_holds() -> None:
    """It said "expected exactly one Pod, found 1 object(s)", whatever that object was."""
    done = kubenexus("explain", "--pod", str(OBJECTS))
    assert one_line(done, "", 2) == (
        f"kubenexus explain: {OBJECTS}: expected exactly one Pod, found 3 object(s): Namespace analytics, "
        "SparkApplication spark-pi, Pod spark-pi-driver; owner objects go in --objects FILE")


def test_a_pod_file_of_the_wrong_structure_names_the_field(tmp_path: Path) -> None:
    pod = documents(POD)[0]
    pod["metadata"]["ownerReferences"] = True
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(pod))
    done = kubenexus("explain", "--pod", str(tmp_path / "pod.yaml"), "--objects", str(OBJECTS))
    assert one_line(done, "", 2) == (f"kubenexus explain: {tmp_path / 'pod.yaml'}: Pod spark-pi-driver: "
                                     "metadata.ownerReferences: expected a list, got a boolean")


def test_a_pod_of_the_cluster_is_explained_by_name_as_its_files_are(cluster: LocalCluster) -> None:
    live = kubenexus("explain", "pod", "spark-pi-driver", "-n", "analytics", "--kubeconfig", cluster.kubeconfig,
                     "-o", "json")
    files = kubenexus("explain", "--pod", str(POD), "--objects", str(OBJECTS), "-o", "json")
    assert live.returncode == files.returncode == 0, (live.stderr, files.stderr)
    live_result, file_result = json.loads(live.stdout), json.loads(files.stdout)
    assert (live_result["action"], live_result["missing"], live_result["admitted"]) == ("gang", [], None)
    assert live_result["reasons"] == file_result["reasons"]
    assert live_result["reasons"][0] == ("root sparkoperator.k8s.io/v1beta2/SparkApplication/spark-pi opts in "
                                         "(kubenexus.io/gang-scheduling=true)")
    text = kubenexus("explain", "pod", "spark-pi-driver", "-n", "analytics", "--kubeconfig", cluster.kubeconfig)
    assert text.stdout.startswith("decision: gang (allowed: true)\n"), text.stdout


def test_a_gang_member_of_the_cluster_is_counted_with_the_others(cluster: LocalCluster) -> None:
    done = kubenexus("explain", "pod", "etl-0", "-n", "analytics", "--kubeconfig", cluster.kubeconfig)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == ("admitted: gang etl of 2, 2 of its member pods in the cluster; gated: "
                                           "waiting for the gate controller to release the whole gang")


def test_a_pod_or_namespace_the_cluster_lacks_is_one_line(cluster: LocalCluster) -> None:
    absent = kubenexus("explain", "pod", "spark-pi-exec-1", "-n", "analytics", "--kubeconfig", cluster.kubeconfig)
    assert one_line(absent, "", 2) == ("kubenexus explain: pod spark-pi-exec-1 not found in namespace analytics "
                                       "(kubectl -n analytics get pods lists them; -n NAMESPACE names another)")
    elsewhere = kubenexus("explain", "pod", "spark-pi-driver", "-n", "nosuchns", "--kubeconfig", cluster.kubeconfig)
    assert one_line(elsewhere, "", 2) == ("kubenexus explain: namespace nosuchns does not exist (kubectl get "
                                          "namespaces lists them)")


@pytest.mark.parametrize(("args", "error"), [
    ([], "give the pod once: --pod FILE (its owners with --objects FILE), or pod NAME to read it and its owners from "
         "the cluster"),
    (["pod"], "which pod? kubenexus explain pod NAME [-n NAMESPACE]"),
    (["pod", "p", "--pod", str(POD)], "give the pod once: --pod FILE (its owners with --objects FILE), or pod NAME "
                                      "to read it and its owners from the cluster"),
    (["pod", "p", "--objects", str(OBJECTS)], "--objects goes with --pod FILE: explain pod NAME reads the pod's "
                                              "owners from the cluster"),
])
def test_which_pod_is_asked_once(args: list[str], error: str) -> None:
    assert one_line(kubenexus("explain", *args), "", 2) == f"kubenexus explain: {error}"

"""Fixtures: the stub apiserver, generated TLS material, running ``kubenexus webhook`` servers, and clients of a
module's local cluster (the module defines ``cluster``); and the rule that every test is marked ``unit`` or ``e2e``.
Helpers the test modules share are in ``tests/support``."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from certs.generate import generate
from cluster.local import LocalCluster
from cluster.stub import StubApiServer
from controller.run import Controller
from gang.config import Config
from kube.client import new_api_client
from tests.support.contract import CONTROLLER
from tests.support.webhook import Webhook

#: Every test carries exactly one: ``pytest -m unit`` runs the fast in-process tests, ``pytest -m e2e`` the rest.
KINDS = ("unit", "e2e")


@pytest.fixture(scope="session", autouse=True)
def _scratch() -> Iterator[None]:
    """Every temporary file of the run, this process's and its subprocesses' alike, in one folder removed at the end:
    the workdirs of the local clusters a test builds and never starts (their keys and kubeconfigs), the metrics
    folders of webhooks killed with SIGKILL. Nothing is left in the machine's /tmp. A short path, as a user's /tmp:
    the demo prints paths within its line width."""
    scratch = tempfile.mkdtemp(prefix="kn-")
    before = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = tempfile.tempdir = scratch
    yield
    if before[0] is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before[0]
    tempfile.tempdir = before[1]
    shutil.rmtree(scratch, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Fail the collection when a test is marked neither ``unit`` nor ``e2e`` (or both): unmarked, it would silently
    drop out of ``pytest -m unit`` and ``pytest -m e2e`` alike. Runs before ``-m`` deselects anything."""
    wrong = [f"{item.nodeid}: {sorted(kinds) or 'neither'}" for item in items
             if len(kinds := {mark.name for mark in item.iter_markers() if mark.name in KINDS}) != 1]
    if wrong:
        raise pytest.UsageError(f"mark each test with exactly one of {KINDS} (pytestmark = pytest.mark.unit, per "
                                "module or per test):\n" + "\n".join(wrong))


@pytest.fixture(scope="module")
def api(cluster: Any) -> Iterator[client.ApiClient]:
    """The admin client of the module's ``cluster`` fixture (a LocalCluster)."""
    api_client = config.new_client_from_config(cluster.kubeconfig)
    yield api_client
    api_client.close()


@pytest.fixture(scope="module")
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture(scope="session")
def apiserver() -> Iterator[StubApiServer]:
    server = StubApiServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kubenexus")


@pytest.fixture(scope="session")
def tls(workdir: Path) -> Any:
    return generate("kubenexus-webhook", "kubenexus-system", str(workdir / "certs"),
                    extra_dns=["localhost"], extra_ips=["127.0.0.1"])


@pytest.fixture(scope="session")
def start_webhook(workdir: Path, tls: Any, apiserver: StubApiServer) -> Iterator[Any]:
    """Start a webhook with the given settings; all are stopped at the end of the session."""
    kubeconfig = apiserver.write_kubeconfig(str(workdir / "kubeconfig"))
    running: dict[str, Webhook] = {}

    def start(**settings: Any) -> Webhook:
        key = json.dumps(settings, sort_keys=True)
        if key not in running:
            running[key] = Webhook(workdir, tls, kubeconfig, settings)
        return running[key]

    yield start
    for hook in running.values():
        hook.stop()


@pytest.fixture(scope="session")
def webhook(start_webhook: Any) -> Webhook:
    """The webhook with the shipped defaults."""
    return start_webhook()


@pytest.fixture
def namespace(apiserver: StubApiServer) -> str:
    """A fresh namespace (fresh owner-cache keys), registered in the stub apiserver."""
    name = f"ns-{uuid.uuid4().hex[:10]}"
    apiserver.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "uid": name}})
    return name


@pytest.fixture(scope="module")
def controller_kubeconfig(cluster: LocalCluster) -> str:
    """The controller's service account on the module's local cluster (each e2e module defines ``cluster``)."""
    return cluster.add_user(CONTROLLER)


@pytest.fixture
def controllers(controller_kubeconfig: str) -> Iterator[Callable[..., Controller]]:
    """Start a gate controller as the controller's service account; every one is stopped after the test."""
    started: list[Controller] = []

    def start(**options: Any) -> Controller:
        controller = Controller(new_api_client(controller_kubeconfig, 32, 3), Config(), port=0, **options)
        started.append(controller.start())
        return controller

    yield start
    for controller in started:
        controller.stop()

"""Applying a root whose gang will wait for its Queue prints a warning, never a denial (the Queue may be created
next): ``kubenexus.io/queue`` naming a Queue that does not exist (CREATE, or an UPDATE that changes it), or a new
root without it in a namespace that two or more Queues select. The words are the gate controller's (gang/queues.py
``queue_of``). While the webhook does not know the Queues (its list refused) the warning says the Queue could not be
checked.

Through a running webhook with real AdmissionReview v1 requests over HTTPS (the stub apiserver serves Queues and
namespaces to its watch and reads), then on the local cluster behind the shipped webhook configurations, where
kubectl prints the warning.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import config

from cluster.local import LocalCluster
from cluster.stub import StubApiServer
from gang.objects import MemorySource
from gang.queues import GROUP, KIND, PLURAL, VERSION, QueueProblem, parse_queue, queue_of
from gang.validate import queue_warnings
from kubenexus.local_webhook import LocalWebhook
from tests.support.contract import OPT_IN
from tests.support.deploy import WEBHOOK, register_shipped
from tests.support.kube import Kube
from tests.support.kubectl import Kubectl, manifest
from tests.support.polling import wait_for

QUEUE_KEY = "kubenexus.io/queue"
ROOT = Path(__file__).resolve().parent.parent
Obj = dict[str, Any]


def queue(name: str, selector: Obj | None = None) -> Obj:
    spec = {"namespaceSelector": selector} if selector is not None else {}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": name}, "spec": spec}


QUEUES = [queue("team-a", {"matchLabels": {"team": "a"}}), queue("shared", {"matchLabels": {"shared": "yes"}}),
          queue("team-a-too", {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]})]
SPECS = {spec.name: spec for spec in map(parse_queue, QUEUES)}


def reason(named: str | None, namespace: str, labels: dict[str, str]) -> str:
    """What the gate controller says of such a gang (gang/queues.py): the warning's words."""
    found = queue_of(named, namespace, labels, SPECS)
    assert isinstance(found, QueueProblem)
    return found.reason


def job(annotations: dict[str, str]) -> Obj:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "etl", "annotations": annotations},
            "spec": {"parallelism": 2, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}


def root_request(obj: Obj, namespace: str, operation: str = "CREATE", old: Obj | None = None) -> Obj:
    group, _, version = obj["apiVersion"].rpartition("/")
    gvk = {"group": group, "version": version, "kind": obj["kind"]}
    return {"uid": str(uuid.uuid4()), "kind": gvk, "requestKind": gvk,
            "resource": {"group": group, "version": version, "resource": obj["kind"].lower() + "s"},
            "name": obj["metadata"]["name"], "namespace": namespace, "operation": operation,
            "userInfo": {"username": "alice@example.com"}, "object": obj, "oldObject": old}


def namespace(apiserver: StubApiServer, labels: dict[str, str]) -> str:
    name = f"ns-{uuid.uuid4().hex[:8]}"
    apiserver.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
    return name


@pytest.fixture(scope="module")
def queued(apiserver: StubApiServer, start_webhook: Any) -> Iterator[Any]:
    """A webhook of this module's own, started with the Queues stored: its first list has them."""
    apiserver.put(*QUEUES)
    try:
        yield start_webhook(admissionDeadlineSeconds=2.9)
    finally:
        with apiserver._lock:  # the other modules' webhooks must not see Queues that select their namespaces
            for obj in QUEUES:
                apiserver.objects.pop(f"/apis/{GROUP}/{VERSION}/{PLURAL}/{obj['metadata']['name']}", None)


def warnings_of(webhook: Any, request: Obj) -> list[str]:
    response = webhook.review("/validate", request)
    assert response["allowed"] is True, response
    return list(response.get("warnings") or [])


@pytest.mark.e2e
def test_a_root_naming_a_queue_that_does_not_exist(queued: Any, apiserver: StubApiServer) -> None:
    ns = namespace(apiserver, {})
    missing = {OPT_IN: "true", QUEUE_KEY: "research"}
    expected = [f"kubenexus: if gang-scheduled, its gang waits: {reason('research', ns, {})}"]
    assert "'research'" in expected[0] and "does not exist" in expected[0]
    assert warnings_of(queued, root_request(job(missing), ns)) == expected
    # an update that names it (or another missing one) is warned about too (besides what the edit does, as for any
    # edit of our annotations); one that leaves it as it was is not
    for before in (job({OPT_IN: "true"}), job({**missing, QUEUE_KEY: "team-a"})):
        assert expected[0] in warnings_of(queued, root_request(job(missing), ns, "UPDATE", before))
    assert warnings_of(queued, root_request(job(missing), ns, "UPDATE", job(missing))) == []
    # naming one that exists: nothing to say, whatever selects the namespace
    named = {QUEUE_KEY: "team-a-too"}
    shared = namespace(apiserver, {"team": "a"})
    assert warnings_of(queued, root_request(job(named), shared)) == []
    assert not [w for w in warnings_of(queued, root_request(job(named), shared, "UPDATE", job(missing)))
                if w.startswith("kubenexus: if gang-scheduled")]


@pytest.mark.e2e
def test_a_new_root_in_a_namespace_two_queues_select(queued: Any, apiserver: StubApiServer) -> None:
    labels = {"team": "a", "shared": "no"}
    ns = namespace(apiserver, labels)
    [warning] = warnings_of(queued, root_request(job({}), ns))
    assert warning == f"kubenexus: if gang-scheduled, its gang waits: {reason(None, ns, labels)}"
    assert "selected by 2 Queues (team-a, team-a-too)" in warning and QUEUE_KEY in warning
    # the fix the warning names: the annotation; and an update is not warned about (its gang was formed before)
    assert warnings_of(queued, root_request(job({QUEUE_KEY: "team-a"}), ns)) == []
    assert warnings_of(queued, root_request(job({"note": "edited"}), ns, "UPDATE", job({}))) == []
    # one Queue, or none, selecting the namespace
    assert warnings_of(queued, root_request(job({}), namespace(apiserver, {"shared": "yes"}))) == []
    assert warnings_of(queued, root_request(job({}), namespace(apiserver, {"team": "b"}))) == []


@pytest.mark.e2e
def test_the_queues_could_not_be_checked(apiserver: StubApiServer, start_webhook: Any) -> None:
    """A webhook whose Queue list is refused (403) says so, for a root naming a Queue and for any new root."""
    path = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
    with apiserver._lock:
        apiserver.failures[path] = (403, 0.0)
    try:
        refused = start_webhook(admissionDeadlineSeconds=2.8)
        ns = namespace(apiserver, {"team": "a"})
        for obj in (job({QUEUE_KEY: "team-a"}), job({})):
            [warning] = warnings_of(refused, root_request(obj, ns))
            assert warning.startswith("kubenexus: its Queue could not be checked (Queues are not known: "), warning
            assert "HTTP 403" in warning and "its PodGroup says why" in warning, warning
        assert warnings_of(refused, root_request(job({}), ns, "UPDATE", job({}))) == []
    finally:
        with apiserver._lock:
            apiserver.failures.pop(path, None)


class Unread:
    """Queues that must not be consulted: the request is none of their business (no wait at a worker's start)."""

    problem = "not listed yet"

    def specs(self, deadline: Any = None) -> None:
        raise AssertionError("the Queues were consulted")


@pytest.mark.unit
@pytest.mark.parametrize("request_", [
    {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": "ns", "operation": "CREATE",
     "object": {"metadata": {"name": "p"}}},
    root_request(job({}), "ns", "UPDATE", job({})),
    root_request(job({QUEUE_KEY: "q"}), "ns", "UPDATE", job({QUEUE_KEY: "q"})),
    {**root_request(job({}), "ns"), "subResource": "status"},
    {**root_request(job({}), "ns"), "operation": "DELETE"},
], ids=["pod", "update", "unchanged-queue", "status", "delete"])
def test_only_root_writes_that_can_hold_a_gang_consult_the_queues(request_: Obj) -> None:
    assert queue_warnings(request_, Unread(), MemorySource([])) == ()


# --- on the local cluster ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory, tls: Any) -> Iterator[tuple[Kube, Kubectl]]:
    workdir = tmp_path_factory.mktemp("queue-warnings")
    with LocalCluster(workdir=str(workdir / "cluster")) as cluster:
        hook = LocalWebhook(workdir, tls, cluster.add_user(WEBHOOK), {})
        try:
            hook.wait_ready()
            kube = Kube(config.new_client_from_config(cluster.kubeconfig))
            kubectl = Kubectl(cluster.kubeconfig, workdir / "kube-cache")
            kubectl("apply", "-f", str(ROOT / "deploy" / "base" / "queue-crd.yaml"))
            kubectl("wait", "--for", "condition=Established", f"crd/{PLURAL}.{GROUP}")
            register_shipped(kube.api_client, hook.url, hook.certs.ca_bundle_b64())
            yield kube, kubectl
        finally:
            hook.stop()


@pytest.mark.e2e
def test_kubectl_prints_the_warning(local: tuple[Kube, Kubectl], tmp_path: Path) -> None:
    kube, kubectl = local
    ns = kube.namespace({"team": "a"})
    named = job({OPT_IN: "true", QUEUE_KEY: "research"})
    applied = kubectl("-n", ns, "apply", "-f", manifest(tmp_path, named))
    assert (f"Warning: kubenexus: if gang-scheduled, its gang waits: {reason('research', ns, {'team': 'a'})}"
            in applied.stderr), applied.stderr
    assert kubectl("-n", ns, "get", "job", "etl", "-o", "name").stdout.strip() == "job.batch/etl"  # not denied

    # two Queues that select the namespace: a new Job without the annotation is warned about, once the webhook's
    # watch has them
    kubectl("apply", "-f", manifest(tmp_path, *(q for q in QUEUES if q["metadata"]["name"] != "shared")))
    plain = job({})
    plain["metadata"]["name"] = "plain"
    expected = f"Warning: kubenexus: if gang-scheduled, its gang waits: {reason(None, ns, {'team': 'a'})}"

    def warned(obj: Obj) -> str:
        """What kubectl prints on stderr for a server-side dry run of creating ``obj`` (the webhooks are called)."""
        return kubectl("-n", ns, "create", "--dry-run=server", "-f", manifest(tmp_path, obj)).stderr

    wait_for(lambda: expected in warned(plain), what=lambda: f"{expected!r} in {warned(plain)!r}")
    # and the Queue named before, once created, is no longer missing
    kubectl("apply", "-f", manifest(tmp_path, queue("research")))
    renamed = copy.deepcopy(named)
    renamed["metadata"]["name"] = "etl-2"
    wait_for(lambda: "Warning" not in warned(renamed), what=lambda: f"no warning in {warned(renamed)!r}")

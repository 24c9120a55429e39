"""``kubenexus doctor`` on the local cluster: a healthy installation, then broken ones, one fault at a time.

The installation is the product as shipped: ``kubectl apply -k deploy/base`` (namespace, service accounts, RBAC,
Service, Deployments, webhook configurations), the real ``kubenexus webhook`` with self-managed certificates (it
creates the Secret and writes the CA bundle into both configurations) and a gate controller with leader election
(the Lease). The emulator runs no pods for Deployments and does not route Services, so the webhook runs as a local
process and both configurations call it by URL (``clientConfig.service`` replaced, as in test_least_privilege).
A gang waiting for a missing member is present throughout: waiting is reported, and is not a problem.

Each broken case damages one thing through the API, the way an accident or a half-done upgrade would, runs the
``kubenexus doctor`` command with the admin's kubeconfig, checks its plain-words finding and exit status 1, and
repairs the damage. Expectations come from the scenario, never from the doctor's code.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import datetime
import json
import ssl
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kubernetes import client, config
from kubernetes.client import ApiException

from certs.issue import key_pem, new_serving_cert, serving_dns_names
from cluster.local import LocalCluster, NodeSpec
from controller.run import Controller
from gang.config import Config
from kube.client import api_request, new_api_client
from kubenexus.doctor import RELEASE_WITHIN, Cluster, diagnose
from kubenexus.local_webhook import KUBENEXUS, LocalWebhook, free_port
from tests.support.contract import CONTROLLER, GATE, GROUP, MIN, OPT_IN
from tests.support.deploy import SECRET, WEBHOOK, Kubectl, bundles_installed, secret_bundle
from tests.support.events import list_events
from tests.support.kube import Kube
from tests.support.podgroups import podgroup
from tests.support.polling import wait_for

pytestmark = pytest.mark.e2e

NAMESPACE = "kubenexus-system"
CONFIGURATION = "kubenexus-gang-admission"
KINDS = {"MutatingWebhookConfiguration": "mutatingwebhookconfiguration",
         "ValidatingWebhookConfiguration": "validatingwebhookconfiguration"}
TIMEOUT = 30.0
Obj = dict[str, Any]


class Install:
    """The running installation and what the tests need to damage and repair it."""

    def __init__(self, cluster: LocalCluster, kube: Kube, kubectl: Kubectl, tls: Any) -> None:
        self.cluster, self.kube, self.kubectl, self.tls = cluster, kube, kubectl, tls
        self.rbac = client.RbacAuthorizationV1Api(kube.api_client)
        self.controller_kubeconfig = cluster.add_user(CONTROLLER)
        self.controller: Controller | None = None
        self.identity = ""
        self.namespace = ""

    def start_controller(self) -> None:
        self.identity = f"kubenexus-controller-{uuid.uuid4().hex[:6]}"
        self.controller = Controller(new_api_client(self.controller_kubeconfig, 32, 3), Config(), leader_elect=True,
                                     identity=self.identity, lease=(2.0, 1.5, 0.2), port=0)
        self.controller.start()
        wait_for(lambda: self.controller.leading, TIMEOUT, "the controller to take the Lease")

    def stop_controller(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None

    def doctor(self, *args: str) -> tuple[int, str]:
        done = subprocess.run([KUBENEXUS, "doctor", "--kubeconfig", self.cluster.kubeconfig, *args],
                              capture_output=True, text=True, timeout=120)
        assert not done.stderr, done.stderr
        return done.returncode, done.stdout

    def configuration(self, kind: str) -> Obj:
        status, body = api_request(self.kube.api_client, "GET",
                                   f"/apis/admissionregistration.k8s.io/v1/{kind.lower()}s/{CONFIGURATION}", 10)
        assert status == 200, body
        return json.loads(body)

    def patch_configuration(self, kind: str, operations: list[Obj]) -> None:
        self.kubectl("patch", KINDS[kind], CONFIGURATION, "--type=json", "-p", json.dumps(operations))

    def secret(self) -> Obj:
        return self.kube.api_client.sanitize_for_serialization(self.kube.core.read_namespaced_secret(SECRET,
                                                                                                       NAMESPACE))

    def set_secret_data(self, data: dict[str, str]) -> None:
        self.kube.core.patch_namespaced_secret(SECRET, NAMESPACE, {"data": data})


def lines(output: str, check: str) -> list[str]:
    """The doctor's findings of one check: 'ok     ', 'waiting' or 'PROBLEM', then '[check] text'."""
    return [line for line in output.splitlines() if f"[{check}] " in line]


def problems(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("PROBLEM")]


@pytest.fixture(scope="module")
def install(tmp_path_factory: pytest.TempPathFactory, tls: Any) -> Iterator[Install]:
    workdir = tmp_path_factory.mktemp("doctor")
    nodes = [NodeSpec(f"node-{i}", cpu="4", memory="16Gi") for i in range(2)]
    with LocalCluster(nodes=nodes, workdir=str(workdir / "cluster")) as cluster:
        cluster.run_components()
        kube = Kube(config.new_client_from_config(cluster.kubeconfig))
        kubectl = Kubectl(cluster.kubeconfig, workdir / "kube-cache")
        kubectl("apply", "-k", "deploy/base")
        install = Install(cluster, kube, kubectl, tls)
        hook = LocalWebhook(workdir, tls, cluster.add_user(WEBHOOK), {
            "server": {"certDir": str(workdir / "webhook-certs")},
            "certs": {"extraSANs": ["127.0.0.1"], "checkIntervalSeconds": 1000}})  # no repairs during the tests
        try:
            for kind, path in (("MutatingWebhookConfiguration", "/mutate"),
                               ("ValidatingWebhookConfiguration", "/validate")):
                entries = range(len(install.configuration(kind)["webhooks"]))  # one per scope
                install.patch_configuration(kind, [op for i in entries for op in (
                    {"op": "remove", "path": f"/webhooks/{i}/clientConfig/service"},
                    {"op": "add", "path": f"/webhooks/{i}/clientConfig/url", "value": f"{hook.url}{path}"})])
            wait_for(lambda: bundles_installed(kube), TIMEOUT, "the Secret and its CA bundle in both configurations")
            bundle = secret_bundle(kube)
            assert bundle is not None
            hook.context = ssl.create_default_context(cadata=bundle.decode())
            hook.wait_ready()
            install.start_controller()
            # a gang of two explicitly labelled pods, one of them created: it waits for the other
            install.namespace = kube.namespace({OPT_IN: "enabled"})
            kube.core.create_namespaced_pod(install.namespace, gang_pod("waiting-0", "waiting", 2))
            wait_for(lambda: pod_events(kube, install.namespace, "waiting-0", "GangWaiting"), TIMEOUT,
                     "the controller's GangWaiting event")
            yield install
        finally:
            install.stop_controller()
            hook.stop()


def gang_pod(name: str, group: str, size: int) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {GROUP: group, MIN: str(size)}},
            "spec": {"containers": [{"name": "main", "image": "registry.example.com/train:1",
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}


def podgroup_status(kube: Kube, namespace: str, name: str) -> Obj:
    return (podgroup(kube.api_client, namespace, name) or {}).get("status") or {}


def pod_events(kube: Kube, namespace: str, name: str, reason: str) -> list[str]:
    """The notes of the events.k8s.io/v1 Events with ``reason`` regarding an object named ``name``."""
    return [e.get("note", "") for e in list_events(kube.api_client, namespace)
            if e.get("reason") == reason and (e.get("regarding") or {}).get("name") == name]


# --- healthy ------------------------------------------------------------------------------------------------------


def test_a_healthy_installation(install: Install) -> None:
    code, out = install.doctor()
    assert code == 0, out
    assert not problems(out), out
    code, listed = install.doctor("-o", "json")  # the same findings, for programs
    assert code == 0 and [(f["status"], f["check"]) for f in json.loads(listed)] == [
        (line[:7].strip().lower(), line.split("]")[0].split("[")[1]) for line in out.splitlines()], listed
    webhook_configurations = lines(out, "webhook configurations")
    assert len(webhook_configurations) == 2 and all(line.startswith("ok") for line in webhook_configurations), out
    # every entry, with the failure policy of its scope (Fail only for namespaces labelled enabled)
    entries = {"mutate.kubenexus.io": "Ignore", "mutate-enabled.kubenexus.io": "Fail",
               "validate.kubenexus.io": "Ignore", "validate-enabled.kubenexus.io": "Fail",
               "validate-roots.kubenexus.io": "Ignore", "validate-podgroups.kubenexus.io": "Ignore",
               "validate-namespaces.kubenexus.io": "Ignore"}
    for entry, policy in entries.items():
        assert any(f"{entry} (failurePolicy {policy})" in line for line in webhook_configurations), out
    [certificate] = lines(out, "certificate")
    assert certificate.startswith("ok") and "valid until" in certificate, out
    for check, finding in (("caBundle", "caBundle trusts the serving certificate"),
                           ("endpoints", "/readyz answers ready")):
        found = lines(out, check)
        assert len(found) == len(entries) and all(line.startswith("ok") and finding in line for line in found), out
        assert all(any(f"webhook {entry}:" in line for line in found) for entry in entries), out
    [leader] = lines(out, "controller")
    assert leader.startswith("ok") and f"leader {install.identity}" in leader, out
    assert [line for line in lines(out, "rbac") if "has the permissions it needs" in line] == lines(out, "rbac")
    assert len(lines(out, "rbac")) == 2, out
    # the waiting gang: reported with the controller's reason, as waiting, not as a problem
    [gang] = lines(out, "gated pods")
    assert gang.startswith("waiting") and f"{install.namespace}/waiting: 1 pod(s) SchedulingGated" in gang, out
    assert "GangWaiting: 1/2 members present" in gang, out
    # PodGroups: the CRD is installed; the waiting gang of bare pods has no root, hence no PodGroup
    assert lines(out, "podgroups") and all(line.startswith("ok") for line in lines(out, "podgroups")), out
    # the namespaces' opt-in labels: the waiting gang's namespace is labelled enabled, none invalid
    namespaces = lines(out, "namespaces")
    assert len(namespaces) == 1 and namespaces[0].startswith("ok") and "1 enabled" in namespaces[0], out
    # Queues: the CRD is installed (deploy/base), none exists
    assert lines(out, "queues") == ["ok       [queues] 0 Queue(s)"], out
    # what it checked against: the installed configuration (deploy/base/config.yaml), read from the cluster
    [configuration] = lines(out, "configuration")
    assert configuration.startswith("ok") and "ConfigMap kubenexus-system/kubenexus-config" in configuration, out
    assert "certs.mode self-managed" in configuration, out


# --- broken -------------------------------------------------------------------------------------------------------


def test_the_installed_configuration_is_what_the_doctor_checks_against(install: Install) -> None:
    saved = install.kube.core.read_namespaced_config_map("kubenexus-config", NAMESPACE).data["config.yaml"]
    replace = lambda text: install.kube.core.patch_namespaced_config_map(  # noqa: E731
        "kubenexus-config", NAMESPACE, {"data": {"config.yaml": text}})
    try:
        # The cert-manager overlay's setting, read from the cluster rather than from a local file.
        replace(saved + "certs:\n  mode: external\n")
        code, out = install.doctor()
        [configuration] = lines(out, "configuration")
        assert configuration.startswith("ok") and "certs.mode external" in configuration, out
        # A setting the components reject: they would exit at start.
        replace(saved + "controller:\n  starvationSeconds: soon\n")
        code, out = install.doctor()
        assert code == 1, out
        [broken] = problems(out)
        assert "ConfigMap kubenexus-system/kubenexus-config: controller.starvationSeconds: " in broken, out
        assert "the components exit at start with it" in broken, out
        # Not YAML at all, then a ConfigMap without the file the components mount.
        replace("certs: [unclosed\n")
        code, out = install.doctor()
        assert code == 1 and "config.yaml is not valid YAML" in problems(out)[0], out
        install.kube.core.patch_namespaced_config_map("kubenexus-config", NAMESPACE, {"data": {"config.yaml": None}})
        code, out = install.doctor()
        assert code == 1 and "has no config.yaml: the components cannot start with it" in problems(out)[0], out
        install.kubectl("delete", "configmap", "kubenexus-config", "-n", NAMESPACE)
        code, out = install.doctor()
        assert code == 1, out
        [missing] = problems(out)
        assert "no ConfigMap kubenexus-system/kubenexus-config" in missing and "--namespace" in missing, out
    finally:
        install.kubectl("apply", "-k", "deploy/base")
    assert install.kube.core.read_namespaced_config_map("kubenexus-config", NAMESPACE).data["config.yaml"] == saved
    assert install.doctor()[0] == 0


def test_gate_removers_without_the_controller(install: Install) -> None:
    saved = install.kube.core.read_namespaced_config_map("kubenexus-config", NAMESPACE).data["config.yaml"]
    install.kube.core.patch_namespaced_config_map("kubenexus-config", NAMESPACE, {"data": {
        "config.yaml": saved + "gateRemovers: [ops-admin@example.com]\n"}})
    try:
        code, out = install.doctor()
        assert code == 1, out
        [refused] = problems(out)
        assert refused.startswith("PROBLEM  [gate removers] gateRemovers (ops-admin@example.com) does not name the "
                                  f"gate controller's service account {CONTROLLER}: the validating webhook refuses "
                                  "(403) every release"), out
    finally:
        install.kubectl("apply", "-k", "deploy/base")
    assert install.doctor()[0] == 0


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_missing_webhook_configuration(install: Install, kind: str) -> None:
    saved = install.configuration(kind)
    install.kubectl("delete", KINDS[kind], CONFIGURATION)
    try:
        code, out = install.doctor()
        assert code == 1, out
        [missing] = problems(out)
        assert f"{kind} {CONFIGURATION} is missing: " in missing, out
        assert ("new pods are not gated" if kind.startswith("Mutating") else "anyone may remove the gate") in missing
    finally:
        restored = copy.deepcopy(saved)
        restored["metadata"] = {k: v for k, v in saved["metadata"].items()
                                if k in ("name", "labels", "annotations")}
        install.kubectl("create", "-f", "-", stdin=restored)
    assert install.doctor()[0] == 0


def test_a_ca_bundle_that_does_not_match_the_serving_certificate(install: Install) -> None:
    """After a reinstall or a botched rotation: the configuration trusts another CA. The apiserver's calls (and
    the doctor's probe, made with that bundle) fail TLS."""
    kind = "MutatingWebhookConfiguration"
    saved = install.configuration(kind)["webhooks"][0]["clientConfig"]["caBundle"]
    install.patch_configuration(kind, [{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle",
                                        "value": install.tls.ca_bundle_b64()}])  # a CA that signed something else
    try:
        code, out = install.doctor()
        assert code == 1, out
        [mismatch] = [line for line in problems(out) if "[caBundle]" in line]
        assert f"{kind} webhook mutate.kubenexus.io" in mismatch, out
        assert "does not contain the CA that signed the serving certificate" in mismatch, out
        [untrusted] = [line for line in problems(out) if "[endpoints]" in line]
        assert "mutate.kubenexus.io" in untrusted and "not trusted by the caBundle" in untrusted, out
        assert [line for line in lines(out, "caBundle") if "validate.kubenexus.io" in line][0].startswith("ok")
    finally:
        install.patch_configuration(kind, [{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle",
                                            "value": saved}])
    assert install.doctor()[0] == 0


@pytest.mark.parametrize(("valid_from", "valid_until", "finding"), [
    (-1, 10, "the serving certificate expires in 9 day(s)"),
    (-30, -1, "the serving certificate expired on"),
], ids=["expiring-soon", "expired"])
def test_a_serving_certificate_near_or_past_its_expiry(install: Install, valid_from: int, valid_until: int,
                                                       finding: str) -> None:
    """The Secret holds a serving certificate, signed by the trusted CA, that was never renewed."""
    saved = install.secret()["data"]
    ca = x509.load_pem_x509_certificate(base64.b64decode(saved["ca.crt"]))
    ca_key = serialization.load_pem_private_key(base64.b64decode(saved["ca.key"]), password=None)
    now = datetime.datetime.now(datetime.UTC)
    cert, key = new_serving_cert(ca, ca_key, "kubenexus-webhook.kubenexus-system.svc",
                                 serving_dns_names("kubenexus-webhook", NAMESPACE), [],
                                 now + datetime.timedelta(days=valid_from), now + datetime.timedelta(days=valid_until))
    install.set_secret_data({"tls.crt": base64.b64encode(cert.public_bytes(serialization.Encoding.PEM)).decode(),
                             "tls.key": base64.b64encode(key_pem(key)).decode()})
    try:
        code, out = install.doctor()
        assert code == 1, out
        [problem] = problems(out)
        assert problem.startswith("PROBLEM  [certificate]") and finding in problem, out
        assert all(line.startswith("ok") for line in lines(out, "caBundle")), "the same CA signed it"
    finally:
        install.set_secret_data({"tls.crt": saved["tls.crt"], "tls.key": saved["tls.key"]})
    assert install.doctor()[0] == 0


def test_an_unreachable_webhook(install: Install) -> None:
    kind = "ValidatingWebhookConfiguration"
    saved = install.configuration(kind)["webhooks"][0]["clientConfig"]["url"]
    install.patch_configuration(kind, [{"op": "replace", "path": "/webhooks/0/clientConfig/url",
                                        "value": f"https://127.0.0.1:{free_port()}/validate"}])  # nothing listens
    try:
        code, out = install.doctor()
        assert code == 1, out
        [down] = problems(out)
        assert "[endpoints] ValidatingWebhookConfiguration webhook validate.kubenexus.io" in down, out
        assert "is not ready: [Errno 111] Connection refused" in down, out
        assert "with failurePolicy Ignore the apiserver goes on without it: gang labels and the gate are not " \
               "protected" in down, out
    finally:
        install.patch_configuration(kind, [{"op": "replace", "path": "/webhooks/0/clientConfig/url",
                                            "value": saved}])
    assert install.doctor()[0] == 0


def test_a_webhook_behind_its_service_without_ready_pods(install: Install) -> None:
    """As installed in a real cluster (clientConfig.service): the endpoints are the Service's ready pods."""
    kind = "ValidatingWebhookConfiguration"
    saved = install.configuration(kind)["webhooks"][0]["clientConfig"]["url"]
    service = {"name": "kubenexus-webhook", "namespace": NAMESPACE, "path": "/validate", "port": 443}
    install.patch_configuration(kind, [{"op": "remove", "path": "/webhooks/0/clientConfig/url"},
                                       {"op": "add", "path": "/webhooks/0/clientConfig/service", "value": service}])
    try:
        code, out = install.doctor()
        assert code == 1, out
        [down] = problems(out)
        assert f"service {NAMESPACE}/kubenexus-webhook has 0 ready pod(s) of 0; with failurePolicy Ignore" in down, out
        # a replica starts (labelled as the Deployment's pods are, which the Service selects) and becomes ready
        selector = install.kube.core.read_namespaced_service("kubenexus-webhook", NAMESPACE).spec.selector
        replica = gang_pod("kubenexus-webhook-6d4b9-x2k4q", "unused", 1)
        replica["metadata"]["labels"] = dict(selector)
        install.kube.core.create_namespaced_pod(NAMESPACE, replica)
        code, out = wait_for(lambda: (lambda result: result if result[0] == 0 else None)(install.doctor()),
                             TIMEOUT, "the doctor to see the ready replica")
        assert any(f"service {NAMESPACE}/kubenexus-webhook has 1 ready pod(s) of 1" in line
                   for line in lines(out, "endpoints")), out
    finally:
        install.patch_configuration(kind, [{"op": "remove", "path": "/webhooks/0/clientConfig/service"},
                                           {"op": "add", "path": "/webhooks/0/clientConfig/url", "value": saved}])
        install.kube.core.delete_namespaced_pod("kubenexus-webhook-6d4b9-x2k4q", NAMESPACE, grace_period_seconds=0)


def test_no_controller_leader(install: Install) -> None:
    """The controller stops (it hands the Lease back), then a crashed leader's Lease that nobody renews."""
    install.stop_controller()
    kube, ns = install.kube, install.namespace
    try:
        # a new gang nobody decides about: reported, not (yet) a problem of its own
        kube.core.create_namespaced_pod(ns, gang_pod("orphan-0", "orphan", 1))
        code, out = install.doctor()
        assert code == 1, out
        [problem] = problems(out)
        assert "[controller] the gate controller has no live leader (holder none" in problem, out
        assert "gated pods are not being released" in problem, out
        [orphan] = [line for line in lines(out, "gated pods") if f"{ns}/orphan:" in line]
        assert orphan.startswith("waiting") and "no event from the gate controller about it yet" in orphan, out

        leases = client.CoordinationV1Api(install.kube.api_client)
        lease = leases.read_namespaced_lease("kubenexus-controller", NAMESPACE)
        renewed = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=10)
        lease.spec.holder_identity, lease.spec.renew_time = "kubenexus-controller-7d9f8-abcde", renewed
        lease.spec.lease_duration_seconds = 15
        leases.replace_namespaced_lease("kubenexus-controller", NAMESPACE, lease)
        code, out = install.doctor()
        assert code == 1, out
        [problem] = problems(out)
        assert "no live leader (holder kubenexus-controller-7d9f8-abcde, last renewed" in problem, out
    finally:
        with contextlib.suppress(ApiException):
            kube.core.delete_namespaced_pod("orphan-0", ns, grace_period_seconds=0)
        install.start_controller()
    assert install.doctor()[0] == 0


def test_a_controller_whose_releases_are_refused(install: Install) -> None:
    """The gate controller runs under another service account than the one the validating webhook lets remove the
    gate: every release is refused (403). Within a release's time the gang is reported as being released; past it,
    as refused, though the configuration itself is right."""
    install.stop_controller()
    kube, ns = install.kube, install.namespace
    impostor = Controller(new_api_client(install.cluster.add_user(f"system:serviceaccount:{NAMESPACE}:impostor"), 8, 3),
                          Config(), leader_elect=True, identity="impostor", lease=(2.0, 1.5, 0.2))
    try:
        impostor.start()
        kube.create(ns, job("refused", "100m", {}))
        members = "batch.kubernetes.io/job-name=refused"
        [name] = wait_for(lambda: {p["metadata"]["labels"][GROUP] for p in kube.pods(ns, members)}, TIMEOUT,
                          "the Job's pods")
        wait_for(lambda: podgroup_status(kube, ns, name).get("phase") == "Releasing", TIMEOUT,
                 "the impostor to release the gang")
        doctor, now = Cluster(kube.api_client), datetime.datetime.now(datetime.UTC)
        [soon] = [f for f in diagnose(doctor, Config(), now) if f.check == "gated pods" and f"{ns}/{name}:" in f.text]
        assert soon.ok and "GangReleased" in soon.text, soon
        later = diagnose(doctor, Config(), now + RELEASE_WITHIN)
        [refused] = [f for f in later if f.check == "gated pods" and f"{ns}/{name}:" in f.text]
        assert not refused.ok and f"{ns}/{name}: 2 pod(s) SchedulingGated" in refused.text, refused
        assert "released 2 of them" in refused.text and "its gate removals are refused or failing" in refused.text
        assert f"is {CONTROLLER} in gateRemovers, and does the controller run as it?" in refused.text, refused
        assert [f.ok for f in later if f.check == "gate removers"] == [True]  # the configuration is right
        assert all(GATE in [g["name"] for g in p["spec"].get("schedulingGates") or []]
                   for p in kube.pods(ns, members))  # refused indeed
    finally:
        impostor.stop()
        kube.batch.delete_namespaced_job("refused", ns)
        for pod in kube.pods(ns, "batch.kubernetes.io/job-name=refused"):
            kube.core.delete_namespaced_pod(pod["metadata"]["name"], ns, grace_period_seconds=0)
        wait_for(lambda: [p["metadata"]["name"] for p in kube.pods(ns)] == ["waiting-0"], TIMEOUT,
                 "only the waiting gang left")
        install.start_controller()
    assert install.doctor()[0] == 0


def test_rbac_missing_a_permission(install: Install) -> None:
    """Someone trimmed the controller's ClusterRole: it can no longer write the events that explain its decisions."""
    saved = install.rbac.read_cluster_role("kubenexus-controller")
    trimmed = copy.deepcopy(saved)
    trimmed.rules = [r for r in trimmed.rules if "events" not in r.resources]
    install.rbac.replace_cluster_role("kubenexus-controller", trimmed)
    try:
        code, out = install.doctor()
        assert code == 1, out
        [problem] = problems(out)
        assert ("[rbac] kubenexus-controller: is missing create events.events.k8s.io, patch events.events.k8s.io"
                in problem), out
        assert [line for line in lines(out, "rbac") if "kubenexus-webhook" in line][0].startswith("ok")
    finally:
        current = install.rbac.read_cluster_role("kubenexus-controller")
        current.rules = saved.rules
        install.rbac.replace_cluster_role("kubenexus-controller", current)
    assert install.doctor()[0] == 0


def test_an_invalid_namespace_label(install: Install) -> None:
    """A namespace labelled gang-scheduling=true (meant as enabled): the webhook ignores it, the doctor says so."""
    namespace = install.kube.namespace({OPT_IN: "true"})
    try:
        code, out = install.doctor()
        assert code == 1, out
        [problem] = problems(out)
        assert f"[namespaces] namespace {namespace}: label {OPT_IN}='true' is ignored" in problem, out
        assert 'use "enabled" or "disabled"' in problem, out
    finally:
        install.kube.core.delete_namespace(namespace)
    assert install.doctor()[0] == 0


def test_queues_whose_selectors_overlap_and_a_root_naming_a_missing_queue(install: Install) -> None:
    """Two Queues select the same namespace (by different rules), and an opted-in Job names a Queue nobody created:
    the gangs would wait, and the doctor says so in the gate controller's words. A Job that is not opted in names
    one too: none of our business."""
    custom, queues = install.kube.custom, ("scheduling.kubenexus.io", "v1alpha1", "queues")
    made = [custom.create_cluster_custom_object(*queues, {
        "apiVersion": "scheduling.kubenexus.io/v1alpha1", "kind": "Queue", "metadata": {"name": name},
        "spec": {"namespaceSelector": selector}}) for name, selector in (
        ("team-a", {"matchLabels": {"team": "a"}}),
        ("gpu", {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}]}),
        ("unused", {"matchLabels": {"team": "nobody"}}))]
    both = install.kube.namespace({"team": "a", "tier": "gpu"})
    one = install.kube.namespace({"team": "a"})
    named, plain = (job(name, "100m", {"kubenexus.io/queue": "research"}) for name in ("named", "plain"))
    del plain["metadata"]["annotations"][OPT_IN]
    for root in (named, plain):
        root["spec"]["suspend"] = True  # no pods: only the root matters here
        install.kube.create(one, root)
    try:
        code, out = install.doctor()
        assert code == 1, out
        assert sorted(problems(out)) == sorted([
            f"PROBLEM  [queues] namespace {both} is selected by 2 Queues (gpu, team-a): set kubenexus.io/queue on "
            "the root, or make the Queues' namespaceSelectors disjoint",
            f"PROBLEM  [queues] Job {one}/named: its gang waits: its root names Queue 'research' "
            "(kubenexus.io/queue), which does not exist: create it, or correct the annotation"]), out
        assert ("ok       [queues] 3 Queue(s): 1 namespace(s) selected by more than one, 1 root(s) naming a Queue "
                "that does not exist") in lines(out, "queues"), out
    finally:
        for queue in made:
            custom.delete_cluster_custom_object(*queues, queue["metadata"]["name"])
        for root in (named, plain):
            install.kube.batch.delete_namespaced_job(root["metadata"]["name"], one)
        for namespace in (both, one):
            install.kube.core.delete_namespace(namespace)
    assert install.doctor()[0] == 0


def job(name: str, cpu: str, annotations: dict[str, str]) -> Obj:
    """An opted-in Job of 2 pods at once (a gang of 2), each requesting ``cpu``."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "annotations": {OPT_IN: "true", **annotations}},
            "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "registry.example.com/etl:1",
                                "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}}}}


def filler(name: str) -> Obj:
    """A plain pod (no owner, no gang) taking 3 of a node's 4 cpu."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": "registry.example.com/web:1",
                                     "resources": {"requests": {"cpu": "3", "memory": "64Mi"}}}]}}


@pytest.mark.parametrize("case", ["never-fits", "timed-out"])
def test_a_stuck_gang(install: Install, case: str) -> None:
    """A Job whose 2 pods of 16 cpu never fit on 4-cpu nodes; and one of 2 x 2 cpu, with a 1 s schedule timeout,
    on nodes that have 1 cpu left each. Both are reported with their gang and the controller's reason."""
    kube, ns = install.kube, install.namespace
    fillers = [f"filler-{i}" for i in range(2)] if case == "timed-out" else []
    root, reason = ("huge", "GangNeverFits") if case == "never-fits" else ("late", "GangTimeout")
    try:
        for name in fillers:
            kube.core.create_namespaced_pod(ns, filler(name))
        wait_for(lambda: all((p.get("status") or {}).get("phase") == "Running"
                             for p in kube.pods(ns) if p["metadata"]["name"] in fillers), TIMEOUT, "the fillers")
        if case == "never-fits":
            kube.create(ns, job(root, "16", {}))
        else:
            kube.create(ns, job(root, "2", {"kubenexus.io/schedule-timeout-seconds": "1"}))
        wait_for(lambda: pod_events(kube, ns, root, reason), TIMEOUT, f"a {reason} event on Job {root}")
        group = {p["metadata"]["labels"][GROUP] for p in kube.pods(ns, f"batch.kubernetes.io/job-name={root}")}
        assert len(group) == 1
        name = next(iter(group))
        phase = "NeverFits" if case == "never-fits" else "Waiting"
        wait_for(lambda: podgroup_status(kube, ns, name).get("phase") == phase and (
            case == "never-fits" or '"TimedOut", "status": "True"' in json.dumps(podgroup_status(kube, ns, name))),
            TIMEOUT, f"the PodGroup {name} {phase}")
        code, out = install.doctor()
        assert code == 1, out
        [stuck] = [line for line in problems(out) if "[gated pods]" in line]
        [pod_group] = [line for line in problems(out) if "[podgroups]" in line]
        assert pod_group.startswith(f"PROBLEM  [podgroups] {ns}/{name}: {phase} for "), out
        assert "2/2 present" in pod_group, out
        assert "needs 16 cpu" in pod_group if case == "never-fits" else "TimedOut" in pod_group, out
        assert stuck.startswith("PROBLEM  [gated pods]") and ": 2 pod(s) SchedulingGated for " in stuck, out
        assert f"{ns}/{name}: 2 pod(s)" in stuck, out
        assert reason in stuck, out
        if case == "never-fits":
            assert "can never fit" in stuck, out
        else:
            assert "longer than its schedule timeout" in stuck, out
        assert [line for line in lines(out, "gated pods") if f"{ns}/waiting" in line][0].startswith("waiting")
    finally:
        if kube.jobs(ns):
            kube.batch.delete_namespaced_job(root, ns)
        for pod in kube.pods(ns):
            if pod["metadata"]["name"] in fillers or pod["metadata"].get("labels", {}).get(
                    "batch.kubernetes.io/job-name"):
                kube.core.delete_namespaced_pod(pod["metadata"]["name"], ns, grace_period_seconds=0)
        wait_for(lambda: [p["metadata"]["name"] for p in kube.pods(ns)] == ["waiting-0"], TIMEOUT,
                 "only the waiting gang left")
    assert install.doctor()[0] == 0


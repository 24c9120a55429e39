"""``kubenexus certs ensure`` and certificate reload, on the local cluster.

Unit-style passes with an injected ``now`` check each decision (creation, no-op, drift repair,
serving renewal, the three steps of a CA rotation, concurrency); running webhooks check that the
webhook ensures its own certificate at start-up and periodically, reloads it from disk, and that a
whole CA rotation under continuous admission traffic fails no request.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import http.client
import ipaddress
import os
import socket
import ssl
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from certs import ensure as ens
from certs import issue, store
from certs.generate import generate
from certs.issue import key_pem, new_ca, new_serving_cert
from certs.publish import Phase
from certs.reload import ReloadingContext
from certs.store import write_atomic
from cluster.local import LocalCluster
from gang.config import ConfigError, load_config
from kube.client import new_api_client
from kubenexus.local_webhook import KUBENEXUS, LocalWebhook, deployment_env, free_port, webhook_configuration
from tests.support.polling import wait_for

pytestmark = pytest.mark.e2e

NS = "kubenexus-system"
WEBHOOK_IDENTITY = f"system:serviceaccount:{NS}:kubenexus-webhook"
DAY, HOUR = datetime.timedelta(days=1), datetime.timedelta(hours=1)
POLICY = issue.Policy()  # 365 d serving, 3650 d CA, renew 30 d before, 1 h overlap


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster() as running:
        kube = config.new_client_from_config(running.kubeconfig)
        client.CoreV1Api(kube).create_namespace({"metadata": {"name": NS}})
        kube.close()
        yield running


@pytest.fixture(scope="module")
def kube(api: client.ApiClient) -> client.ApiClient:
    """The admin client (conftest's ``api``)."""
    return api


@pytest.fixture(scope="module")
def raw(cluster: LocalCluster) -> Iterator[Any]:
    """The plain-dict client ``ensure`` takes."""
    api = new_api_client(cluster.kubeconfig, pool_size=8, retries=0)
    yield api
    api.close()


# --- helpers ------------------------------------------------------------------------------------


def install(kube: client.ApiClient, name: str, url: str = "https://127.0.0.1:9/x", ca_bundle: str = "") -> None:
    """Both webhook configurations called ``name``, as the manifests create them (no caBundle yet).

    As shipped, one entry per scope: two in the mutating one, three in the validating one, so "every entry is
    patched" is checked. Only pods labelled ``certs-test: <name>`` reach them, so the tests' configurations never
    meet each other's pods.
    """
    adm = client.AdmissionregistrationV1Api(kube)
    selector = {"matchLabels": {"certs-test": name}}
    mutating = webhook_configuration("Mutating", name, f"{url}/mutate", ca_bundle, object_selector=selector)
    validating = webhook_configuration("Validating", name, f"{url}/validate", ca_bundle, object_selector=selector,
                                       operations=("CREATE", "UPDATE"))
    for configuration, scopes in ((mutating, ("enabled",)), (validating, ("enabled", "roots"))):
        configuration["webhooks"] += [{**configuration["webhooks"][0], "name": f"{scope}.{name}.kubenexus.io"}
                                      for scope in scopes]
    adm.create_mutating_webhook_configuration(mutating)
    adm.create_validating_webhook_configuration(validating)


def new_target(kube: client.ApiClient, **extra: Any) -> issue.Target:
    """A fresh Secret/configuration name pair per test, configurations installed."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    install(kube, name)
    return issue.Target(NS, "kubenexus-webhook", f"{name}-tls", name, **extra)


def read_secret(kube: client.ApiClient, target: issue.Target) -> tuple[dict[str, bytes], dict[str, str], str]:
    secret = client.CoreV1Api(kube).read_namespaced_secret(target.secret, NS)
    data = {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
    return data, dict(secret.metadata.annotations or {}), secret.metadata.resource_version


def config_bundles(kube: client.ApiClient, target: issue.Target) -> dict[str, list[str]]:
    """Every entry's caBundle, per configuration kind; and each configuration's resourceVersion."""
    adm = client.AdmissionregistrationV1Api(kube)
    out = {}
    for kind, read in (("mutating", adm.read_mutating_webhook_configuration),
                       ("validating", adm.read_validating_webhook_configuration)):
        obj = read(target.webhook_configuration)
        out[kind] = [h.client_config.ca_bundle for h in obj.webhooks]
        out[f"{kind}-rv"] = [obj.metadata.resource_version]
    return out


def cert(data: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(data)


def ca_renewal_time(raw: Any, target: issue.Target) -> datetime.datetime:
    """Just past the CA's renewal time, after the passes that would have run until then: the last one,
    two days before, re-issued the (by then long expired) serving certificate up to the CA's expiry."""
    data = {k: base64.b64decode(v) for k, v in ens.ensure(raw, target, POLICY).secret["data"].items()}
    renew_at = cert(data[store.CA_CRT]).not_valid_after_utc - POLICY.renew_before
    result = ens.ensure(raw, target, POLICY, now=renew_at - 2 * DAY)
    assert result.actions == ["serving certificate re-issued (expired)"] and result.phase == Phase.STEADY
    return renew_at + HOUR


def assert_consistent(kube: client.ApiClient, target: issue.Target, now: datetime.datetime | None = None) -> None:
    """The invariants every finished pass leaves: ca.crt signs tls.crt, the key matches, the bundle
    trusts the serving certificate, and every entry of both configurations carries the bundle."""
    now = now or datetime.datetime.now(datetime.UTC)
    data, annotations, _ = read_secret(kube, target)
    assert {store.TLS_CRT, store.TLS_KEY, store.CA_CRT, store.CA_KEY, store.CA_BUNDLE} <= set(data)
    serving, ca = cert(data[store.TLS_CRT]), cert(data[store.CA_CRT])
    assert issue.signed_by(serving, ca)
    assert issue.serving_problem(serving, issue.load_key(data[store.TLS_KEY]), ca, target, now) is None
    bundle = issue.load_bundle(data[store.CA_BUNDLE])
    assert ca in bundle and any(issue.signed_by(serving, c) for c in bundle)
    wanted = base64.b64encode(data[store.CA_BUNDLE]).decode()
    bundles = config_bundles(kube, target)
    assert bundles["mutating"] == [wanted] * 2 and bundles["validating"] == [wanted] * 3
    assert store.ANNOTATION_PUBLISHED in annotations


# --- configuration ------------------------------------------------------------------------------


def test_config_defaults_and_validation(tmp_path: Path) -> None:
    default = load_config(None, {})
    assert (default.certs_mode, default.certs_secret, default.certs_webhook_configuration) == (
        "self-managed", "kubenexus-webhook-tls", "kubenexus-gang-admission")
    target, policy = ens.from_config(default)
    assert target == issue.Target() and policy == issue.Policy()
    path = tmp_path / "c.yaml"
    path.write_text("certs: {mode: external, overlapHours: 0.5, extraSANs: [127.0.0.1, localhost]}\n")
    loaded = load_config(str(path), {"KUBENEXUS_CERTS_RENEW_BEFORE_DAYS": "10"})
    assert (loaded.certs_mode, loaded.certs_overlap_hours, loaded.certs_renew_before_days) == ("external", 0.5, 10)
    assert ens.from_config(loaded)[0].ips() == [ipaddress.ip_address("127.0.0.1")]
    with pytest.raises(ValueError, match="service"):  # what --service etc. go through
        issue.Target(service="Not_A_Name")
    with pytest.raises(ValueError, match="overlap"):
        issue.Policy(overlap=20 * DAY)
    for env, words in ((("KUBENEXUS_CERTS_MODE", "cert-manager"), "CERTS_MODE"),
                       (("KUBENEXUS_CERTS_RENEW_BEFORE_DAYS", "400"), "renewBeforeDays"),
                       (("KUBENEXUS_CERTS_OVERLAP_HOURS", "400"), "overlapHours"),
                       (("KUBENEXUS_CERTS_EXTRA_SANS", "not a name"), "extraSANs"),
                       (("KUBENEXUS_CERTS_CHECK_INTERVAL_SECONDS", "3600"), "checkIntervalSeconds"),
                       (("KUBENEXUS_CERTS_SECRET_NAME", "Bad_Name"), "SECRET_NAME")):
        with pytest.raises(ConfigError, match=words):
            load_config(None, dict([env]))


# --- one pass at a time -------------------------------------------------------------------------


def test_first_ensure_creates_the_secret_and_patches_both_configurations(kube, raw) -> None:
    target = new_target(kube)
    result = ens.ensure(raw, target, POLICY)
    assert result.actions[:2] == ["Secret created", "CA created"] and result.phase == Phase.STEADY
    assert result.patched == ["mutating", "validating"] and not result.missing
    secret = client.CoreV1Api(kube).read_namespaced_secret(target.secret, NS)
    assert secret.type == "kubernetes.io/tls"
    assert secret.metadata.labels == {"app.kubernetes.io/managed-by": "kubenexus"}
    data, _, _ = read_secret(kube, target)
    assert issue.load_bundle(data[store.CA_BUNDLE]) == [cert(data[store.CA_CRT])]  # one CA, nothing to overlap
    sans = cert(data[store.TLS_CRT]).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [
        "kubenexus-webhook", f"kubenexus-webhook.{NS}", f"kubenexus-webhook.{NS}.svc",
        f"kubenexus-webhook.{NS}.svc.cluster.local"]
    assert_consistent(kube, target)


def test_second_ensure_is_a_no_op(kube, raw, tmp_path) -> None:
    target = new_target(kube)
    ens.ensure(raw, target, POLICY, cert_dir=str(tmp_path))
    before = (read_secret(kube, target), config_bundles(kube, target), sorted(os.listdir(tmp_path)))
    result = ens.ensure(raw, target, POLICY, cert_dir=str(tmp_path), now=datetime.datetime.now(datetime.UTC) + DAY)
    assert not result.changed and result.passes == 1
    assert (read_secret(kube, target), config_bundles(kube, target), sorted(os.listdir(tmp_path))) == before
    assert sorted(os.listdir(tmp_path)) == ["tls.crt", "tls.key"]  # the CA key never lands on the pod's disk
    assert (tmp_path / "tls.crt").read_bytes() == before[0][0][store.TLS_CRT]


def test_drift_is_repaired(kube, raw) -> None:
    target = new_target(kube)
    ens.ensure(raw, target, POLICY)
    adm = client.AdmissionregistrationV1Api(kube)
    stranger = base64.b64encode(new_ca("someone-else", *_window())[0].public_bytes(
        Encoding.PEM)).decode()
    validating = adm.read_validating_webhook_configuration(target.webhook_configuration)
    validating.webhooks[2].client_config.ca_bundle = stranger
    adm.replace_validating_webhook_configuration(target.webhook_configuration, validating)
    adm.patch_mutating_webhook_configuration(target.webhook_configuration, [
        {"op": "remove", "path": "/webhooks/1/clientConfig/caBundle"}])
    later = datetime.datetime.now(datetime.UTC) + DAY
    result = ens.ensure(raw, target, POLICY, now=later)
    assert sorted(result.patched) == ["mutating", "validating"] and not result.actions
    _, annotations, _ = read_secret(kube, target)
    # The configurations trusted something else until now: the overlap clock restarts.
    assert annotations[store.ANNOTATION_PUBLISHED] == _stamp(later)
    assert_consistent(kube, target)

    # A tampered bundle in the Secret itself is rebuilt, and the configurations follow.
    core = client.CoreV1Api(kube)
    core.patch_namespaced_secret(target.secret, NS, {"data": {store.CA_BUNDLE: stranger}})
    result = ens.ensure(raw, target, POLICY)
    assert sorted(result.patched) == ["mutating", "validating"]
    assert_consistent(kube, target)


def test_missing_configurations_are_reported_never_created(kube, raw) -> None:
    target = issue.Target(NS, "kubenexus-webhook", f"m-{uuid.uuid4().hex[:6]}", "not-installed")
    result = ens.ensure(raw, target, POLICY)
    assert result.missing == ["mutating", "validating"] and not result.patched
    adm = client.AdmissionregistrationV1Api(kube)
    with pytest.raises(ApiException) as gone:
        adm.read_mutating_webhook_configuration("not-installed")
    assert gone.value.status == 404


def test_serving_certificate_near_expiry_is_reissued_by_the_same_ca(kube, raw) -> None:
    target = new_target(kube)
    ens.ensure(raw, target, POLICY)
    data, _, _ = read_secret(kube, target)
    bundles = config_bundles(kube, target)
    old = cert(data[store.TLS_CRT])
    not_yet = old.not_valid_after_utc - POLICY.renew_before - HOUR
    assert not ens.ensure(raw, target, POLICY, now=not_yet).changed
    soon = old.not_valid_after_utc - POLICY.renew_before + HOUR
    result = ens.ensure(raw, target, POLICY, now=soon)
    assert result.actions == ["serving certificate re-issued (near expiry)"] and not result.patched
    after, _, _ = read_secret(kube, target)
    assert after[store.CA_CRT] == data[store.CA_CRT] and after[store.CA_BUNDLE] == data[store.CA_BUNDLE]
    assert after[store.TLS_CRT] != data[store.TLS_CRT] and after[store.TLS_KEY] != data[store.TLS_KEY]
    assert cert(after[store.TLS_CRT]).not_valid_after_utc > soon + POLICY.renew_before
    assert config_bundles(kube, target) == bundles  # the bundle did not change: nothing to publish
    assert_consistent(kube, target, soon)


def test_ca_rotation_publishes_then_swaps_then_drops(kube, raw, tmp_path) -> None:
    target = new_target(kube)
    ens.ensure(raw, target, POLICY, cert_dir=str(tmp_path))
    t1 = ca_renewal_time(raw, target)
    first, _, _ = read_secret(kube, target)
    old_ca = cert(first[store.CA_CRT])

    # 1. The CA nears expiry: a new CA joins the bundle; the serving certificate stays as it is.
    result = ens.ensure(raw, target, POLICY, now=t1, cert_dir=str(tmp_path))
    assert result.phase == Phase.NEW_CA and result.patched == ["mutating", "validating"]
    data, annotations, _ = read_secret(kube, target)
    new_ca_cert = cert(data[store.NEXT_CA_CRT])
    assert data[store.CA_CRT] == first[store.CA_CRT] and data[store.TLS_CRT] == first[store.TLS_CRT]
    assert issue.load_bundle(data[store.CA_BUNDLE]) == [old_ca, new_ca_cert]
    assert annotations[store.ANNOTATION_PUBLISHED] == _stamp(t1)
    assert (tmp_path / "tls.crt").read_bytes() == first[store.TLS_CRT]
    assert_consistent(kube, target, t1)

    # Not before the overlap window has passed.
    assert not ens.ensure(raw, target, POLICY, now=t1 + POLICY.overlap - datetime.timedelta(seconds=1)).changed

    # 2. After it: the serving certificate is re-issued by the new CA; both CAs stay trusted.
    t2 = t1 + POLICY.overlap
    result = ens.ensure(raw, target, POLICY, now=t2, cert_dir=str(tmp_path))
    assert result.phase == Phase.OLD_CA and not result.patched  # same two CAs: no new bundle
    data, annotations, _ = read_secret(kube, target)
    assert store.NEXT_CA_CRT not in data and store.NEXT_CA_KEY not in data
    assert cert(data[store.CA_CRT]) == new_ca_cert and issue.signed_by(cert(data[store.TLS_CRT]), new_ca_cert)
    assert set(issue.load_bundle(data[store.CA_BUNDLE])) == {old_ca, new_ca_cert}
    assert annotations[store.ANNOTATION_SWAPPED] == _stamp(t2)
    assert (tmp_path / "tls.crt").read_bytes() == data[store.TLS_CRT]
    assert_consistent(kube, target, t2)
    assert not ens.ensure(raw, target, POLICY, now=t2 + POLICY.overlap - datetime.timedelta(seconds=1)).changed

    # 3. Once the new certificate has been served for the overlap window, the old CA goes.
    t3 = t2 + POLICY.overlap
    result = ens.ensure(raw, target, POLICY, now=t3)
    assert result.phase == Phase.STEADY and result.patched == ["mutating", "validating"]
    data, annotations, _ = read_secret(kube, target)
    assert issue.load_bundle(data[store.CA_BUNDLE]) == [new_ca_cert] and store.ANNOTATION_SWAPPED not in annotations
    assert_consistent(kube, target, t3)
    assert not ens.ensure(raw, target, POLICY, now=t3 + DAY).changed


def test_drift_during_rotation_restarts_the_overlap_window(kube, raw) -> None:
    target = new_target(kube)
    t1 = ca_renewal_time(raw, target)
    data, _, _ = read_secret(kube, target)
    ens.ensure(raw, target, POLICY, now=t1)  # new CA published
    client.AdmissionregistrationV1Api(kube).patch_validating_webhook_configuration(
        target.webhook_configuration, [{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle",
                                        "value": base64.b64encode(data[store.CA_CRT]).decode()}])
    repaired_at = t1 + POLICY.overlap / 2
    assert ens.ensure(raw, target, POLICY, now=repaired_at).patched == ["validating"]
    # Overlap after the first publication, but not after the repair: the swap waits.
    assert ens.ensure(raw, target, POLICY, now=t1 + POLICY.overlap).phase == Phase.NEW_CA
    assert ens.ensure(raw, target, POLICY, now=repaired_at + POLICY.overlap).phase == Phase.OLD_CA


def test_an_expired_ca_is_replaced_and_an_unusable_one_promotes_the_next(kube, raw) -> None:
    target = new_target(kube)
    ens.ensure(raw, target, POLICY)
    data, _, _ = read_secret(kube, target)
    dead = cert(data[store.CA_CRT]).not_valid_after_utc + DAY
    result = ens.ensure(raw, target, POLICY, now=dead)
    assert result.actions[0] == "CA replaced (the current one was unusable)"
    assert_consistent(kube, target, dead)

    # Mid-rotation, a current CA that stops working hands over to the already-published next CA.
    t1 = ca_renewal_time(raw, target)
    ens.ensure(raw, target, POLICY, now=t1)
    data, _, _ = read_secret(kube, target)
    client.CoreV1Api(kube).patch_namespaced_secret(target.secret, NS, {"data": {
        store.CA_KEY: base64.b64encode(key_pem(ec.generate_private_key(ec.SECP256R1()))).decode()}})
    result = ens.ensure(raw, target, POLICY, now=t1)
    assert result.phase == Phase.OLD_CA and result.actions[0].startswith("serving certificate re-issued by the new")
    after, _, _ = read_secret(kube, target)
    assert after[store.CA_CRT] == data[store.NEXT_CA_CRT]
    assert_consistent(kube, target, t1)


def test_a_cert_manager_secret_is_left_alone(kube, raw) -> None:
    target = new_target(kube)
    client.CoreV1Api(kube).create_namespaced_secret(NS, {
        "metadata": {"name": target.secret, "annotations": {"cert-manager.io/certificate-name": "x"}},
        "type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}})
    with pytest.raises(store.EnsureError, match="cert-manager"):
        ens.ensure(raw, target, POLICY)


# --- concurrency --------------------------------------------------------------------------------


def _race(cluster: LocalCluster, target: issue.Target, runners: int, now: datetime.datetime | None = None
          ) -> list[ens.Result]:
    """``runners`` passes released at once, each with its own client (its own connections)."""
    clients = [new_api_client(cluster.kubeconfig, pool_size=2, retries=0) for _ in range(runners)]
    barrier = threading.Barrier(runners)
    results: list[Any] = [None] * runners

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = ens.ensure(clients[i], target, POLICY, now=now)
        except Exception as exc:  # noqa: BLE001 (reported by the assertion below)
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(runners)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for api in clients:
        api.close()
    assert all(isinstance(r, ens.Result) for r in results), results
    return results


def test_a_restarted_pass_still_reports_the_secret_it_created(cluster, kube, raw) -> None:
    """Replica A creates the Secret; B completes a pass (patches the configurations, restamps the
    Secret) between A's read of a configuration and A's re-read of the Secret. A's pass restarts on
    the moved Secret, and its result must still say that A created it: the creation happened."""
    target = new_target(kube)
    first = new_api_client(cluster.kubeconfig, pool_size=2, retries=0)
    call_api, seen, other = first.call_api, [], []

    def interleaved(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        response = call_api(method, url, *args, **kwargs)
        seen.append(method)
        if method == "GET" and "/mutatingwebhookconfigurations/" in url and "POST" in seen and not other:
            other.append(ens.ensure(raw, target, POLICY))
        return response

    first.call_api = interleaved
    try:
        result = ens.ensure(first, target, POLICY)
    finally:
        first.close()
    assert other and other[0].actions == [] and other[0].patched == ["mutating", "validating"]
    assert result.passes == 2 and result.actions[0] == "Secret created" and result.secret_written
    assert_consistent(kube, target)


@pytest.mark.parametrize("runners", [2, 4])
def test_concurrent_ensure_ends_with_one_consistent_secret_and_bundle(cluster, kube, raw, runners) -> None:
    for _ in range(3):
        target = new_target(kube)
        results = _race(cluster, target, runners)
        data, _, _ = read_secret(kube, target)
        assert sum("Secret created" in r.actions for r in results) == 1  # one winner, the others adopted it
        assert {r.secret["data"][store.CA_CRT] for r in results} == {base64.b64encode(data[store.CA_CRT]).decode()}
        assert_consistent(kube, target)
        # Racing through a rotation step too: one new CA, not one per replica.
        t1 = ca_renewal_time(raw, target)
        results = _race(cluster, target, runners, now=t1)
        assert sum(any(a.startswith("new CA added") for a in r.actions) for r in results) == 1
        rotated, _, _ = read_secret(kube, target)
        assert len(issue.load_bundle(rotated[store.CA_BUNDLE])) == 2 and store.NEXT_CA_CRT in rotated
        assert_consistent(kube, target, t1)
        results = _race(cluster, target, runners, now=t1 + POLICY.overlap)
        assert sum(any("by the new CA" in a for a in r.actions) for r in results) == 1
        swapped, _, _ = read_secret(kube, target)
        assert swapped[store.CA_CRT] == rotated[store.NEXT_CA_CRT]
        assert_consistent(kube, target, t1 + POLICY.overlap)


def test_cli_concurrent_processes(cluster, kube, tmp_path) -> None:
    target = new_target(kube)
    args = [KUBENEXUS, "certs", "ensure", "--kubeconfig", cluster.kubeconfig, "--secret", target.secret,
            "--webhook-configuration", target.webhook_configuration]
    env = {**os.environ, "KUBENEXUS_CERTS_EXTRA_SANS": "127.0.0.1"}
    procs = [subprocess.Popen([*args, "--cert-dir", str(tmp_path / str(i))], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(3)]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    assert sum(f"{NS}/{target.secret}: Secret created" in out for out, _ in outputs) == 1, outputs
    assert all("phase: steady" in out for out, _ in outputs)
    data, _, _ = read_secret(kube, target)
    assert {(tmp_path / str(i) / "tls.crt").read_bytes() for i in range(3)} == {data[store.TLS_CRT]}
    assert_consistent(kube, target)
    again, external = (subprocess.Popen(args, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                       for e in (env, {**env, "KUBENEXUS_CERTS_MODE": "external"}))
    (out, _), (_, err) = again.communicate(timeout=60), external.communicate(timeout=60)
    assert again.returncode == 0 and f"{NS}/{target.secret}: Secret up to date" in out
    assert f"mutating webhook configuration {target.webhook_configuration}: caBundle up to date" in out
    assert external.returncode == 2 and "certs.mode is external" in err


# --- reload from disk ---------------------------------------------------------------------------


def _window() -> tuple[datetime.datetime, datetime.datetime]:
    now = datetime.datetime.now(datetime.UTC)
    return now - HOUR, now + DAY


def _stamp(when: datetime.datetime) -> str:
    return store.format_time(when)


def _handshake(server: ssl.SSLContext) -> bytes:
    """The certificate ``server`` presents, by an in-memory TLS handshake."""
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname, client_ctx.verify_mode = False, ssl.CERT_NONE
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    tls_client = client_ctx.wrap_bio(c_in, c_out)
    tls_server = server.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side in (tls_client, tls_server):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    der = tls_client.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_reloading_context_follows_the_files_and_never_loads_a_mismatched_pair(tmp_path) -> None:
    ca, ca_key = new_ca("reload-test", *_window())
    pairs = [new_serving_cert(ca, ca_key, "x", ["x"], [], *_window()) for _ in range(2)]
    crt, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    reloader = ReloadingContext(str(crt), str(key))
    with pytest.raises(ssl.SSLError, match="unavailable"):
        reloader.context()

    def write(path: Path, data: bytes) -> None:
        write_atomic(str(path), data, 0o600)

    write(key, key_pem(pairs[0][1]))
    write(crt, pairs[0][0].public_bytes(Encoding.PEM))
    first = reloader.context()
    assert _handshake(first) == pairs[0][0].public_bytes(Encoding.DER)
    assert reloader.context() is first  # unchanged files: the same context, no reload
    write(key, key_pem(pairs[1][1]))  # half-written renewal: the old pair keeps serving
    assert reloader.context() is first and "do not match" in reloader.error
    write(crt, pairs[1][0].public_bytes(Encoding.PEM))
    assert _handshake(reloader.context()) == pairs[1][0].public_bytes(Encoding.DER)
    assert reloader.reloads == 2


# --- a running webhook --------------------------------------------------------------------------


class SelfManagedWebhook(LocalWebhook):
    """``kubenexus webhook`` with self-managed certificates: an empty certificate directory at start.

    Unlike LocalWebhook (whose ``stop`` and ``wait_ready`` it shares) it starts on ``start()``: its URL
    goes into the configurations first, and there is no CA to verify it with until the webhook made one.
    """

    def __init__(self, workdir: Path, kubeconfig: str, settings: dict[str, Any]) -> None:
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.cert_dir = workdir / f"certs-{self.port}"
        self.cert_dir.mkdir()
        self.config_path = workdir / f"config-{self.port}.yaml"
        self.config_path.write_text(yaml.safe_dump({"server": {"certDir": str(self.cert_dir)},
                                                    "kubeconfig": kubeconfig, **settings}))
        self.log_path = workdir / f"webhook-{self.port}.log"
        self.context = ssl._create_unverified_context()  # readiness only; served() verifies
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self._log = open(self.log_path, "w")  # noqa: SIM115 (closed in stop())
        self.process = subprocess.Popen(
            [KUBENEXUS, "webhook", "--config", str(self.config_path), "--bind", f"127.0.0.1:{self.port}"],
            stdout=self._log, stderr=subprocess.STDOUT, env=deployment_env())
        self.wait_ready()

    def stop(self) -> None:
        if self.process is not None:
            super().stop()

    def served(self, ca_pem: bytes) -> bytes:
        """The certificate (DER) a new connection gets, verified against ``ca_pem``."""
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=5,
                                           context=ssl.create_default_context(cadata=ca_pem.decode()))
        try:
            conn.request("GET", "/readyz")
            response = conn.getresponse()
            response.read()
            assert response.status == 200
            der = conn.sock.getpeercert(binary_form=True)
            assert der is not None
            return der
        finally:
            conn.close()


@pytest.fixture
def new_webhook(cluster: LocalCluster, tmp_path: Path) -> Iterator[Any]:
    """A webhook (not started yet: its URL goes into the configurations first), stopped at the end."""
    running: list[SelfManagedWebhook] = []
    kubeconfig = cluster.add_user(WEBHOOK_IDENTITY)

    def make(settings: dict[str, Any]) -> SelfManagedWebhook:
        hook = SelfManagedWebhook(tmp_path, kubeconfig, settings)
        running.append(hook)
        return hook

    yield make
    for hook in running:
        hook.stop()


def _pod(name: str, label: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"certs-test": label}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def test_webhook_ensures_its_certificate_at_start_up_and_repairs_drift_periodically(
        cluster, kube, new_webhook) -> None:
    name = f"w-{uuid.uuid4().hex[:6]}"
    hook = new_webhook({"certs": {"secretName": f"{name}-tls", "webhookConfigurationName": name,
                                  "extraSANs": ["127.0.0.1"], "checkIntervalSeconds": 0.5}})
    install(kube, name, url=hook.url)
    hook.start()  # nothing in the certificate directory, no Secret: start-up ensure makes both
    target = issue.Target(NS, "kubenexus-webhook", f"{name}-tls", name, ("127.0.0.1",))
    assert_consistent(kube, target)
    data, _, _ = read_secret(kube, target)
    assert (hook.cert_dir / "tls.crt").read_bytes() == data[store.TLS_CRT]
    assert hook.served(data[store.CA_BUNDLE]) == cert(data[store.TLS_CRT]).public_bytes(Encoding.DER)
    core = client.CoreV1Api(kube)
    core.create_namespaced_pod("default", _pod(f"{name}-a", name))  # failurePolicy Fail: the call succeeded

    client.AdmissionregistrationV1Api(kube).patch_mutating_webhook_configuration(name, [
        {"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": base64.b64encode(b"junk").decode()}])
    wait_for(lambda: config_bundles(kube, target)["mutating"][0] == base64.b64encode(data[store.CA_BUNDLE]).decode(),
             10, "the periodic ensure repairing the mutating caBundle")
    core.create_namespaced_pod("default", _pod(f"{name}-b", name))


def test_ca_rotation_under_continuous_admission_traffic_fails_no_request(cluster, kube, raw, new_webhook) -> None:
    """The webhook's own periodic ensure walks a whole CA rotation (2 s overlap windows) while pods are
    created continuously through webhooks with failurePolicy Fail; every request must succeed."""
    name = f"r-{uuid.uuid4().hex[:6]}"
    overlap = 2.0
    settings = {"certs": {"secretName": f"{name}-tls", "webhookConfigurationName": name, "extraSANs": ["127.0.0.1"],
                          "checkIntervalSeconds": 0.25, "overlapHours": overlap / 3600, "validityDays": 1.5,
                          "caValidityDays": 2, "renewBeforeDays": 1},
                "server": {"workers": 2}}
    hook = new_webhook(settings)
    install(kube, name, url=hook.url)
    target = issue.Target(NS, "kubenexus-webhook", f"{name}-tls", name, ("127.0.0.1",))
    policy = issue.Policy(1.5 * DAY, 2 * DAY, DAY, datetime.timedelta(seconds=overlap))
    # A CA issued long enough ago that it reaches its renewal time a few seconds into the traffic.
    seeded_at = datetime.datetime.now(datetime.UTC) - (policy.ca_validity - policy.renew_before) + \
        datetime.timedelta(seconds=5)
    ens.ensure(raw, target, policy, now=seeded_at)
    seeded, _, _ = read_secret(kube, target)
    hook.start()

    failures: list[str] = []
    created = [0]
    stop = threading.Event()
    phases: list[tuple[float, str, bytes]] = []

    def traffic(worker: int) -> None:
        api = config.new_client_from_config(cluster.kubeconfig)
        core = client.CoreV1Api(api)
        i = 0
        while not stop.is_set():
            i += 1
            try:
                core.create_namespaced_pod("default", _pod(f"{name}-{worker}-{i}", name))
                created[0] += 1
            except Exception as exc:  # noqa: BLE001 (every failure is the finding)
                failures.append(f"{time.monotonic():.2f} {exc}")
        api.close()

    def observe() -> None:
        core = client.CoreV1Api(kube)
        while not stop.is_set():
            secret = core.read_namespaced_secret(target.secret, NS)
            data = {k: base64.b64decode(v) for k, v in secret.data.items()}
            bundle = len(issue.load_bundle(data[store.CA_BUNDLE]))
            phase = Phase.NEW_CA if store.NEXT_CA_CRT in data else (
                Phase.OLD_CA if bundle > 1 else Phase.STEADY)
            if not phases or phases[-1][1:] != (phase, data[store.CA_CRT]):
                phases.append((time.monotonic(), phase, data[store.CA_CRT]))
            time.sleep(0.05)

    threads = [threading.Thread(target=traffic, args=(i,)) for i in range(3)] + [threading.Thread(target=observe)]
    for thread in threads:
        thread.start()
    try:
        done = wait_for(lambda: len(phases) >= 4 and phases[-1][1] == Phase.STEADY, 25,
                        lambda: f"a full rotation; phases so far {[p[1] for p in phases]}")
        assert done
        mark = created[0]
        wait_for(lambda: created[0] > mark + 30, 10, "traffic after the rotation")
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert [p[1] for p in phases] == [Phase.STEADY, Phase.NEW_CA, Phase.OLD_CA, Phase.STEADY]
    assert phases[0][2] == seeded[store.CA_CRT] and phases[-1][2] != seeded[store.CA_CRT]
    # Each step waited for its overlap window (observed by polling every 50 ms).
    assert phases[2][0] - phases[1][0] >= overlap - 0.25 and phases[3][0] - phases[2][0] >= overlap - 0.25, phases
    assert failures == [], failures[:5]
    assert created[0] > 100
    final, _, _ = read_secret(kube, target)
    assert_consistent(kube, target)
    # A new connection gets the new certificate, verified by the new CA alone: reloaded without a restart.
    assert hook.served(final[store.CA_CRT]) == cert(final[store.TLS_CRT]).public_bytes(Encoding.DER)
    assert hook.process is not None and hook.process.poll() is None


def test_external_mode_only_reloads_the_files(cluster, kube, tmp_path) -> None:
    """cert-manager's way: someone else replaces tls.crt/tls.key; the webhook serves the new pair on the next
    connection, without a restart, and never touches Secrets or webhook configurations."""
    name = f"x-{uuid.uuid4().hex[:6]}"
    install(kube, name)
    target = issue.Target(NS, secret=f"{name}-tls", webhook_configuration=name)
    before = config_bundles(kube, target)
    first = generate("kubenexus-webhook", NS, str(tmp_path / "first"), extra_ips=["127.0.0.1"])
    hook = LocalWebhook(tmp_path, first, cluster.add_user(WEBHOOK_IDENTITY), {"certs": {
        "mode": "external", "secretName": f"{name}-tls", "webhookConfigurationName": name}})
    try:
        hook.wait_ready()
        second = generate("kubenexus-webhook", NS, str(tmp_path / "second"), extra_ips=["127.0.0.1"])
        for part in ("key", "cert"):  # as the kubelet would, one file after the other
            write_atomic(getattr(first, part), Path(getattr(second, part)).read_bytes(), 0o600)
        new_ca_pem = Path(second.ca_cert).read_bytes()
        served = wait_for(lambda: _served_or_none(hook.port, new_ca_pem), 10, "the new certificate served")
        assert served == cert(Path(second.cert).read_bytes()).public_bytes(Encoding.DER)
        assert hook.process.poll() is None
    finally:
        hook.stop()
    with pytest.raises(ApiException) as absent:
        client.CoreV1Api(kube).read_namespaced_secret(f"{name}-tls", NS)
    assert absent.value.status == 404 and config_bundles(kube, target) == before


def _served_or_none(port: int, ca_pem: bytes) -> bytes | None:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw_sock, \
                context.wrap_socket(raw_sock, server_hostname="127.0.0.1") as tls:
            return tls.getpeercert(binary_form=True)
    except (OSError, ssl.SSLError):
        return None

"""``kubenexus doctor``: check a live installation and say what is wrong in plain words.

Each check is a small function returning findings; the command prints them all (problems
first) and exits 1 when any check found a problem. The checks read only what an operator
with cluster-admin can read: webhook configurations, the certificate Secret, the controller's
Lease, RBAC through SubjectAccessReviews, and the pods held by the gang gate with the
controller's latest event about their gang.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import ssl
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from certs.ensure import load_bundle, signed_by
from controller.run import LEASE_NAME
from gang import keys
from gang.config import Config, config_or_exit
from gang.objects import api_request, new_api_client

Obj = dict[str, Any]
EXPIRY_WARNING_DAYS = 30
CONTROLLER_EVENTS = ("GangWaiting", "GangInsufficientCapacity", "GangNeverFits", "GangNotCertifiable",
                     "GangTimeout", "GangReleased")

# What each component must be allowed to do (verb, group, resource, namespace or "" for all namespaces).
REQUIRED_ACCESS = {
    "kubenexus-webhook": [("get", "", "pods", ""), ("get", "", "namespaces", ""), ("get", "batch", "jobs", "")],
    "kubenexus-controller": [("list", "", "pods", ""), ("watch", "", "pods", ""), ("patch", "", "pods", ""),
                             ("list", "", "nodes", ""), ("watch", "", "nodes", ""), ("create", "", "events", ""),
                             ("update", "coordination.k8s.io", "leases", "{namespace}")],
}


@dataclass(frozen=True)
class Finding:
    ok: bool
    check: str
    text: str
    info: bool = False  # neither good nor bad news: a gang waiting for a stated reason


class Cluster:
    """Plain-JSON reads through the official client (the same path as the product's components)."""

    def __init__(self, api_client: Any, timeout: float = 10.0) -> None:
        self._client = api_client
        self._timeout = timeout

    def get(self, path: str) -> Obj | None:
        status, body = api_request(self._client, "GET", path, self._timeout)
        if status == 404:
            return None
        if status != 200:
            raise RuntimeError(f"GET {path}: HTTP {status}: {body[:200]!r}")
        return json.loads(body)

    def create(self, path: str, obj: Obj) -> Obj:
        status, body = api_request(self._client, "POST", path, self._timeout, obj, "application/json")
        if status not in (200, 201):
            raise RuntimeError(f"POST {path}: HTTP {status}: {body[:200]!r}")
        return json.loads(body)


# --- certificates --------------------------------------------------------------------------------------------


def _webhook_entries(cluster: Cluster, config: Config) -> tuple[list[Finding], list[tuple[str, Obj]]]:
    findings, entries = [], []
    name = config.certs_webhook_configuration
    for kind, plural in (("MutatingWebhookConfiguration", "mutatingwebhookconfigurations"),
                         ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations")):
        obj = cluster.get(f"/apis/admissionregistration.k8s.io/v1/{plural}/{name}")
        if obj is None:
            findings.append(Finding(False, "webhook configurations",
                                    f"{kind} {name} is missing: pods are not admitted by KubeNexus"))
            continue
        webhooks = obj.get("webhooks") or []
        findings.append(Finding(True, "webhook configurations", f"{kind} {name}: "
                                f"{len(webhooks)} webhook(s), failurePolicy "
                                f"{', '.join(sorted({w.get('failurePolicy', 'Fail') for w in webhooks}))}"))
        entries += [(kind, w) for w in webhooks]
    return findings, entries


def check_certificates(cluster: Cluster, config: Config, now: datetime.datetime) -> list[Finding]:
    findings, entries = _webhook_entries(cluster, config)
    secret_name = config.certs_secret
    secret = cluster.get(f"/api/v1/namespaces/{config.namespace}/secrets/{secret_name}")
    if secret is None:
        return findings + [Finding(False, "certificate", f"Secret {config.namespace}/{secret_name} with the serving "
                                   "certificate is missing: run `kubenexus certs ensure` or check cert-manager")]
    data = secret.get("data") or {}
    serving = load_bundle(base64.b64decode(data.get("tls.crt", "")))
    if not serving:
        return findings + [Finding(False, "certificate", f"Secret {secret_name} has no readable tls.crt")]
    cert = serving[0]
    left = cert.not_valid_after_utc - now
    if left.total_seconds() <= 0:
        expired = f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
        findings.append(Finding(False, "certificate",
                                f"the serving certificate expired on {expired}: the apiserver cannot call the webhook"))
    elif left.days < EXPIRY_WARNING_DAYS:
        findings.append(Finding(False, "certificate", f"the serving certificate expires in {left.days} day(s) "
                                f"({cert.not_valid_after_utc:%Y-%m-%d}) and has not been renewed"))
    else:
        findings.append(Finding(True, "certificate", f"serving certificate valid until "
                                f"{cert.not_valid_after_utc:%Y-%m-%d} ({left.days} days)"))
    for kind, webhook in entries:
        bundle = load_bundle(base64.b64decode((webhook.get("clientConfig") or {}).get("caBundle") or ""))
        name = f"{kind} webhook {webhook.get('name')}"
        if not bundle:
            findings.append(Finding(False, "caBundle",
                                    f"{name} has no caBundle: the apiserver cannot trust the webhook"))
        elif not any(signed_by(cert, ca) for ca in bundle):
            findings.append(Finding(False, "caBundle", f"{name}: its caBundle does not contain the CA that signed the "
                                    "serving certificate (drift after a rotation or reinstall): calls to it fail TLS"))
        else:
            findings.append(Finding(True, "caBundle", f"{name}: caBundle trusts the serving certificate"))
    return findings


# --- endpoints ------------------------------------------------------------------------------------------------


def _probe(url: str, bundle_b64: str) -> str | None:
    """None when ``url`` answers 200 over TLS trusted by the bundle, else the reason."""
    with tempfile.NamedTemporaryFile("wb", suffix=".pem") as handle:
        handle.write(base64.b64decode(bundle_b64 or ""))
        handle.flush()
        try:
            context = ssl.create_default_context(cafile=handle.name)
        except ssl.SSLError as exc:
            return f"caBundle unusable: {exc}"
        try:
            with urllib.request.urlopen(url, context=context, timeout=5) as response:
                return None if response.status == 200 else f"HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            return f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            return str(getattr(exc, "reason", exc))


def check_endpoints(cluster: Cluster, config: Config, now: datetime.datetime) -> list[Finding]:
    _, entries = _webhook_entries(cluster, config)
    findings = []
    for kind, webhook in entries:
        client_config = webhook.get("clientConfig") or {}
        name = f"{kind} webhook {webhook.get('name')}"
        if client_config.get("url"):
            base = client_config["url"].rsplit("/", 1)[0]
            problem = _probe(f"{base}/readyz", client_config.get("caBundle", ""))
            findings.append(Finding(problem is None, "endpoints", f"{name}: {base}/readyz " +
                                    ("answers ready" if problem is None else f"is not ready: {problem}")))
            continue
        service = client_config.get("service") or {}
        ns, svc = service.get("namespace", ""), service.get("name", "")
        pods = (cluster.get(f"/api/v1/namespaces/{ns}/pods?labelSelector=app.kubernetes.io%2Fname%3D{svc}")
                or {}).get("items", [])
        ready = [p for p in pods if any(c.get("type") == "Ready" and c.get("status") == "True"
                                        for c in (p.get("status") or {}).get("conditions") or [])]
        findings.append(Finding(bool(ready), "endpoints", f"{name}: service {ns}/{svc} has {len(ready)} ready "
                                f"pod(s) of {len(pods)}" + ("" if ready else ": the webhook is down; with "
                                "failurePolicy Ignore new pods are admitted without gang scheduling")))
    return findings


# --- controller -----------------------------------------------------------------------------------------------


def _time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def check_leader(cluster: Cluster, config: Config, now: datetime.datetime) -> list[Finding]:
    lease = cluster.get(f"/apis/coordination.k8s.io/v1/namespaces/{config.namespace}/leases/{LEASE_NAME}")
    if lease is None:
        return [Finding(False, "controller", f"no Lease {config.namespace}/{LEASE_NAME}: the gate controller has never "
                        "run with --leader-elect here; gated pods are never released")]
    spec = lease.get("spec") or {}
    holder, renewed = spec.get("holderIdentity"), _time(spec.get("renewTime"))
    duration = float(spec.get("leaseDurationSeconds") or 0)
    if not holder or renewed is None or (now - renewed).total_seconds() > duration:
        return [Finding(False, "controller", f"the gate controller has no live leader (holder {holder or 'none'}, "
                        f"last renewed {spec.get('renewTime') or 'never'}): gated pods are not being released")]
    return [Finding(True, "controller", f"gate controller leader {holder}, renewed "
                    f"{(now - renewed).total_seconds():.0f}s ago")]


def check_rbac(cluster: Cluster, config: Config, now: datetime.datetime) -> list[Finding]:
    findings = []
    for account, needs in REQUIRED_ACCESS.items():
        user = f"system:serviceaccount:{config.namespace}:{account}"
        missing = []
        for verb, group, resource, namespace in needs:
            attributes = {"verb": verb, "group": group, "resource": resource}
            if namespace:
                attributes["namespace"] = namespace.format(namespace=config.namespace)
            review = cluster.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", {
                "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": user, "resourceAttributes": attributes,
                         "groups": ["system:serviceaccounts", f"system:serviceaccounts:{config.namespace}"]}})
            if not (review.get("status") or {}).get("allowed"):
                missing.append(f"{verb} {resource}{'.' + group if group else ''}")
        findings.append(Finding(not missing, "rbac", f"{account}: " + (
            "has the permissions it needs" if not missing else f"is missing {', '.join(missing)}")))
    return findings


# --- gated pods -----------------------------------------------------------------------------------------------


def check_gated(cluster: Cluster, config: Config, now: datetime.datetime) -> list[Finding]:
    pods = (cluster.get("/api/v1/pods") or {}).get("items", [])
    gangs: dict[tuple[str, str], list[Obj]] = {}
    for pod in pods:
        gates = [g.get("name") for g in (pod.get("spec") or {}).get("schedulingGates") or []]
        if keys.GANG_GATE in gates:
            meta = pod["metadata"]
            group = (meta.get("labels") or {}).get(keys.POD_GROUP_LABEL) or "(unresolved owner)"
            gangs.setdefault((meta.get("namespace", ""), group), []).append(pod)
    if not gangs:
        return [Finding(True, "gated pods", "no pod is held by the gang gate")]
    findings = []
    for (namespace, group), members in sorted(gangs.items()):
        owner = ((members[0]["metadata"].get("annotations") or {}).get(keys.OWNER_ANNOTATION) or "")
        reason = _latest_reason(cluster, namespace, owner, members)
        oldest = min((_time(p["metadata"].get("creationTimestamp")) or now) for p in members)
        explained = reason is not None
        findings.append(Finding(explained, "gated pods", f"{namespace}/{group}: {len(members)} pod(s) SchedulingGated "
                                f"for {(now - oldest).total_seconds():.0f}s — " + (reason or "no event from the gate "
                                "controller about it: is the controller running?"), info=explained))
    return findings


def _latest_reason(cluster: Cluster, namespace: str, owner: str, members: list[Obj]) -> str | None:
    names = {p["metadata"]["name"] for p in members} | ({owner.rsplit("/", 1)[-1]} if owner else set())
    events = (cluster.get(f"/api/v1/namespaces/{namespace}/events") or {}).get("items", [])
    ours = [e for e in events if e.get("reason") in CONTROLLER_EVENTS
            and (e.get("involvedObject") or {}).get("name") in names]
    if not ours:
        return None
    latest = max(ours, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return f"{latest['reason']}: {latest.get('message')}"


CHECKS: tuple[Callable[[Cluster, Config, datetime.datetime], list[Finding]], ...] = (
    check_certificates, check_endpoints, check_leader, check_rbac, check_gated)


def diagnose(cluster: Cluster, config: Config, now: datetime.datetime | None = None) -> list[Finding]:
    """Every check's findings; a check that cannot run is itself a finding."""
    now = now or datetime.datetime.now(datetime.UTC)
    findings: list[Finding] = []
    for check in CHECKS:
        name = check.__name__.removeprefix("check_")
        try:
            findings += check(cluster, config, now)
        except Exception as exc:  # noqa: BLE001 — a broken check is reported, not fatal
            findings.append(Finding(False, name, f"could not check: {exc}"))
    return findings


def render(findings: Iterable[Finding]) -> str:
    ordered = sorted(findings, key=lambda f: (f.ok, f.info))
    return "\n".join(f"{'PROBLEM' if not f.ok else 'waiting' if f.info else 'ok     '}  [{f.check}] {f.text}"
                     for f in ordered)


def run(args: argparse.Namespace) -> int:
    config = config_or_exit(args.config, "kubenexus doctor")
    cluster = Cluster(new_api_client(args.kubeconfig or config.kubeconfig, pool_size=4, retries=1))
    findings = diagnose(cluster, config)
    print(render(findings))
    return 0 if all(f.ok for f in findings) else 1


def add_parser(subcommands: Any) -> None:
    parser = subcommands.add_parser("doctor", help="check a live installation and say what is wrong")
    parser.add_argument("--kubeconfig", help="kubeconfig of a cluster-admin (default: the configured one, ~/.kube)")
    parser.add_argument("--config", help="the product's configuration file (for its namespace)")
    parser.set_defaults(func=run)

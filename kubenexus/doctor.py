"""``kubenexus doctor``: check a live installation and say what is wrong in plain words.

Each check is a small function returning findings; the command prints them all (problems
first) and exits 1 when any check found a problem. The checks read only what an operator
with cluster-admin can read: webhook configurations, the certificate Secret, the controller's
Lease, RBAC through SubjectAccessReviews, the namespaces' gang-scheduling labels, the Queues (a namespace two
select, an opted-in root naming one that does not exist: their gangs wait), the pods held
by the gang gate with the controller's latest event about their gang (a gang waiting for
capacity or members is reported as waiting, not as a problem), and the gangs' PodGroups that
are not running, with their phase and reason.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from certs.issue import load_bundle, signed_by
from controller.run import LEASE_NAME
from controller.status import podgroup_name
from gang import keys, queues
from gang.adapters.table import ROOT_RESOURCES
from gang.config import Config, ConfigError, config_from_text, config_or_exit
from gang.decide import root_opt_in
from gang.objects import Obj
from gang.validate import check_namespace_label
from kube.client import api_request
from kube.root_watch import path_of
from kubenexus.errors import FOUND
from kubenexus.live import connect, get
from kubenexus.output import add_output, dump

Access = tuple[str, str, str, str, str]  # verb, API group, resource, namespace ("" everywhere), name ("" any)
RENEWAL_GRACE = datetime.timedelta(hours=1)  # a renewal due for longer than this has failed
CONTROLLER_EVENTS = ("GangWaiting", "GangInsufficientCapacity", "GangNeverFits", "GangNotCertifiable",
                     "GangConstraintsUnknown", "GangNotScheduled", "GangTimeout", "GangReleased", "GangRunning",
                     "GangSucceeded", "GangFailed")
# Waiting alone will not help: the gang itself must change, the controller must be able to read its root, or a
# scheduler must serve its schedulerName.
STUCK_EVENTS = ("GangNeverFits", "GangNotCertifiable", "GangConstraintsUnknown", "GangNotScheduled")
FIRST_EVENT_WITHIN = datetime.timedelta(minutes=1)  # a new gang the controller has not reported on yet
RELEASE_WITHIN = datetime.timedelta(seconds=15)  # a release's PATCHes take milliseconds; retries back off to 5 s
CONFIG_MAP, CONFIG_KEY = "kubenexus-config", "config.yaml"  # deploy/base: mounted by both components
ADMIN = "a cluster-admin's kubeconfig"  # what the checks read


def required_access(config: Config) -> dict[str, list[Access]]:
    """What each component's service account must be allowed to do (deploy/base/rbac.yaml), the essentials."""
    ns = config.namespace
    webhook = [(verb, "", "namespaces", "", "") for verb in ("list", "watch")]  # kube/namespaces.py
    webhook += [("get", "", "pods", "", ""), ("get", "batch", "jobs", "", "")]
    webhook += [(verb, root.group, root.plural, "", "") for root in ROOT_RESOURCES for verb in ("list", "watch")]
    webhook += [("create", "events.k8s.io", "events", "", "")]  # webhook/skips.py
    webhook += [(verb, queues.GROUP, queues.PLURAL, "", "") for verb in ("list", "watch")]  # kube/queues.py
    if config.certs_mode == "self-managed":  # certs ensure: the Secret and the caBundles of both configurations
        webhook += [("get", "", "secrets", ns, config.certs_secret), ("update", "", "secrets", ns, config.certs_secret),
                    ("create", "", "secrets", ns, "")]
        webhook += [(verb, "admissionregistration.k8s.io", plural, "", config.certs_webhook_configuration)
                    for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
                    for verb in ("get", "update")]
    controller = [(verb, "", "pods", "", "") for verb in ("get", "list", "watch", "patch")]
    controller += [("list", "", "nodes", "", ""), ("watch", "", "nodes", "", ""), ("patch", "", "pods/status", "", ""),
                   *((verb, "policy", "poddisruptionbudgets", "", "") for verb in ("list", "watch")),
                   ("create", "events.k8s.io", "events", "", ""), ("patch", "events.k8s.io", "events", "", ""),
                   ("get", "", "namespaces", "", ""),
                   ("get", "coordination.k8s.io", "leases", ns, LEASE_NAME),
                   ("update", "coordination.k8s.io", "leases", ns, LEASE_NAME),
                   ("create", "coordination.k8s.io", "leases", ns, "")]
    controller += [(verb, keys.PODGROUP_GROUP, keys.PODGROUP_PLURAL, "", "") for verb in ("list", "watch", "create",
                                                                                         "patch")]
    controller += [("patch", keys.PODGROUP_GROUP, f"{keys.PODGROUP_PLURAL}/status", "", "")]
    controller += [(verb, queues.GROUP, queues.PLURAL, "", "") for verb in ("list", "watch")]  # controller/queues.py
    controller += [("patch", queues.GROUP, f"{queues.PLURAL}/status", "", ""),
                   *((verb, "", "namespaces", "", "") for verb in ("list", "watch"))]
    controller += [(verb, root.group, root.plural, "", "") for root in ROOT_RESOURCES for verb in ("list", "watch")]
    return {"kubenexus-webhook": webhook, "kubenexus-controller": controller}


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
        return get(self._client, path, self._timeout)

    def create(self, path: str, obj: Obj) -> Obj:
        status, body = api_request(self._client, "POST", path, self._timeout, obj, "application/json")
        if status not in (200, 201):
            raise RuntimeError(f"POST {path}: HTTP {status}: {body[:200]!r}")
        return json.loads(body)


# --- certificates --------------------------------------------------------------------------------------------


WITHOUT = {"MutatingWebhookConfiguration": "new pods are not gated: no gang scheduling",
           "ValidatingWebhookConfiguration": "gang labels and the gate are not protected: anyone may remove the gate"}


def _down(kind: str, webhook: Obj) -> str:
    """What a webhook that cannot be called means, given its failure policy."""
    if webhook.get("failurePolicy", "Fail") == "Fail":
        return "; with failurePolicy Fail the apiserver rejects the requests it should send there"
    return f"; with failurePolicy Ignore the apiserver goes on without it: {WITHOUT[kind]}"


def _webhook_entries(cluster: Cluster, config: Config) -> tuple[list[Finding], list[tuple[str, Obj]]]:
    findings, entries = [], []
    name = config.certs_webhook_configuration
    for kind, plural in (("MutatingWebhookConfiguration", "mutatingwebhookconfigurations"),
                         ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations")):
        obj = cluster.get(f"/apis/admissionregistration.k8s.io/v1/{plural}/{name}")
        if obj is None:
            findings.append(Finding(False, "webhook configurations", f"{kind} {name} is missing: {WITHOUT[kind]}; "
                                    "apply the manifests again (kubectl apply -k deploy/...)"))
            continue
        webhooks = obj.get("webhooks") or []
        # one entry per scope, each with its failure policy (deploy/base/webhookconfigurations.yaml)
        findings.append(Finding(True, "webhook configurations", f"{kind} {name}: {len(webhooks)} webhook(s): "
                                + ", ".join(f"{w.get('name')} (failurePolicy {w.get('failurePolicy', 'Fail')})"
                                            for w in webhooks)))
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
    elif left < datetime.timedelta(days=config.certs_renew_before_days) - RENEWAL_GRACE:
        findings.append(Finding(False, "certificate", f"the serving certificate expires in {left.days} day(s) "
                                f"({cert.not_valid_after_utc:%Y-%m-%d}) and has not been renewed: check the "
                                "webhook's logs (self-managed) or the Certificate (cert-manager)"))
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
                                    "serving certificate (drift after a rotation or reinstall): calls to it fail TLS; "
                                    "run `kubenexus certs ensure` (self-managed) or check cert-manager's cainjector"))
        else:
            findings.append(Finding(True, "caBundle", f"{name}: caBundle trusts the serving certificate"))
    return findings


# --- endpoints ------------------------------------------------------------------------------------------------


def _probe(url: str, bundle_b64: str) -> str | None:
    """None when ``url`` answers 200 over TLS trusted by the caBundle (as the apiserver calls it), else why not."""
    try:
        context = ssl.create_default_context(cadata=base64.b64decode(bundle_b64 or "").decode("ascii"))
    except (ssl.SSLError, ValueError) as exc:
        return f"its caBundle is not a usable CA certificate ({exc})"
    try:
        with urllib.request.urlopen(url, context=context, timeout=5) as response:
            return None if response.status == 200 else f"HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, ssl.SSLCertVerificationError):
            return f"its certificate is not trusted by the caBundle ({reason.verify_message})"
        return str(reason)


def check_endpoints(cluster: Cluster, config: Config, now: datetime.datetime) -> list[Finding]:
    _, entries = _webhook_entries(cluster, config)
    findings = []
    for kind, webhook in entries:
        client_config = webhook.get("clientConfig") or {}
        name = f"{kind} webhook {webhook.get('name')}"
        if client_config.get("url"):
            parts = urllib.parse.urlsplit(client_config["url"])
            readyz = f"{parts.scheme}://{parts.netloc}/readyz"
            problem = _probe(readyz, client_config.get("caBundle", ""))
            findings.append(Finding(problem is None, "endpoints", f"{name}: {readyz} " + (
                "answers ready" if problem is None else f"is not ready: {problem}{_down(kind, webhook)}")))
            continue
        # Behind a Service: its ready pods are the endpoints the apiserver calls.
        service = client_config.get("service") or {}
        ns, svc = service.get("namespace", ""), service.get("name", "")
        found = cluster.get(f"/api/v1/namespaces/{ns}/services/{svc}")
        if found is None:
            findings.append(Finding(False, "endpoints", f"{name}: service {ns}/{svc} does not exist"
                                    f"{_down(kind, webhook)}"))
            continue
        selector = ",".join(f"{k}={v}" for k, v in sorted(((found.get("spec") or {}).get("selector") or {}).items()))
        query = urllib.parse.urlencode({"labelSelector": selector})
        pods = (cluster.get(f"/api/v1/namespaces/{ns}/pods?{query}") or {}).get("items", []) if selector else []
        ready = [p for p in pods if any(c.get("type") == "Ready" and c.get("status") == "True"
                                        for c in (p.get("status") or {}).get("conditions") or [])]
        findings.append(Finding(bool(ready), "endpoints", f"{name}: service {ns}/{svc} has {len(ready)} ready "
                                f"pod(s) of {len(pods)}" + ("" if ready else _down(kind, webhook))))
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
    """Asks the apiserver (SubjectAccessReview) what each service account may do, groups as its token has them."""
    findings = []
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{config.namespace}", "system:authenticated"]
    for account, needs in required_access(config).items():
        user = f"system:serviceaccount:{config.namespace}:{account}"
        missing = []
        for verb, group, resource, namespace, name in needs:
            plural, _, subresource = resource.partition("/")  # "podgroups/status": a subresource
            attributes = {"verb": verb, "group": group, "resource": plural, "subresource": subresource,
                          "namespace": namespace, "name": name}
            review = cluster.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", {
                "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": user, "groups": groups, "resourceAttributes": attributes}})
            if not (review.get("status") or {}).get("allowed"):
                missing.append(f"{verb} {resource}{'.' + group if group else ''}{' ' + name if name else ''}"
                               f"{' in ' + namespace if namespace else ''}")
        findings.append(Finding(not missing, "rbac", f"{account}: " + (
            "has the permissions it needs" if not missing else f"is missing {', '.join(missing)}: check its "
            "ClusterRole, Role and bindings (deploy/base/rbac.yaml, bindings.yaml)")))
    return findings


def check_gate_removers(cluster: Cluster, config: Config, now: datetime.datetime) -> list[Finding]:
    """Whether the validating webhook lets the gate controller remove the gate (``gateRemovers``, default: the
    controller's service account alone)."""
    controller = config.controller_identity
    if config.may_remove_gate(controller):
        return [Finding(True, "gate removers", f"the gate controller ({controller}) may remove the gang gate")]
    return [Finding(False, "gate removers", f"gateRemovers ({', '.join(config.gate_removers)}) does not name the gate "
                    f"controller's service account {controller}: the validating webhook refuses (403) every release "
                    "it makes, and gated pods are never released; add it to gateRemovers")]


# --- gated pods -----------------------------------------------------------------------------------------------


def check_gated(cluster: Cluster, config: Config, now: datetime.datetime) -> list[Finding]:
    """Every gang held by the gate, with the controller's latest event about it. Waiting for capacity or members
    is normal; a gang past its schedule timeout, one that can never fit or cannot be certified, one the controller
    says nothing about, or one whose release the API keeps refusing, is a problem."""
    pods = (cluster.get("/api/v1/pods") or {}).get("items", [])
    gangs: dict[tuple[str, str], list[Obj]] = {}
    for pod in pods:
        if keys.GANG_GATE in _gates(pod):
            meta = pod["metadata"]
            group = (meta.get("labels") or {}).get(keys.POD_GROUP_LABEL) or "(unresolved owner)"
            gangs.setdefault((meta.get("namespace", ""), group), []).append(pod)
    if not gangs:
        return [Finding(True, "gated pods", "no pod is held by the gang gate")]
    findings, events = [], {}
    podgroups = _podgroups(cluster)
    for (namespace, group), members in sorted(gangs.items()):
        if namespace not in events:
            events[namespace] = (cluster.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events") or {}).get(
                "items", [])
        about = _gang_events(events[namespace], members)
        oldest = min((_time(p["metadata"].get("creationTimestamp")) or now) for p in members)
        text = (f"{namespace}/{group}: {len(members)} pod(s) SchedulingGated for "
                f"{(now - oldest).total_seconds():.0f}s — ")
        refused = _refused_release(podgroups.get((namespace, podgroup_name(group))), pods, namespace, group,
                                   len(members), now)
        if refused:
            findings.append(Finding(False, "gated pods", text + refused + f": is {config.controller_identity} in "
                                    "gateRemovers, and does the controller run as it? (its log: releasing ... HTTP "
                                    "403)"))
            continue
        if not about:
            new = now - oldest < FIRST_EVENT_WITHIN
            findings.append(Finding(new, "gated pods", text + "no event from the gate controller about it yet" + (
                "" if new else ": is the controller running and leading?"), info=new))
            continue
        latest = about[-1]
        reason = f"{latest['reason']}: {latest.get('note')}"
        timed_out = [e for e in about if e.get("reason") == "GangTimeout"]
        if timed_out and latest is not timed_out[-1]:
            reason += f" (and GangTimeout: {timed_out[-1].get('note')})"
        stuck = bool(timed_out) or latest["reason"] in STUCK_EVENTS
        findings.append(Finding(not stuck, "gated pods", text + reason, info=not stuck))
    return findings


def _gates(pod: Obj) -> list[str]:
    return [g.get("name") for g in (pod.get("spec") or {}).get("schedulingGates") or []]


def _podgroups(cluster: Cluster) -> dict[tuple[str, str], Obj]:
    found = cluster.get(f"/apis/{keys.PODGROUP_GROUP}/{keys.PODGROUP_VERSION}/{keys.PODGROUP_PLURAL}") or {}
    return {(g["metadata"].get("namespace", ""), g["metadata"].get("name", "")): g for g in found.get("items") or []}


def _refused_release(podgroup: Obj | None, pods: list[Obj], namespace: str, group: str, gated: int,
                     now: datetime.datetime) -> str | None:
    """Why the gang's release is not taking, when the controller counts members as released (its PodGroup's
    ``status.released``) that the API still shows gated, for longer than a release takes: its gate removals are
    being refused (403: the validating webhook does not let its identity remove the gate) or keep failing."""
    status = (podgroup or {}).get("status") or {}
    since = next((_time(c.get("lastTransitionTime")) for c in status.get("conditions") or []
                  if isinstance(c, dict) and c.get("type") == "Released" and c.get("status") == "True"), None)
    if since is None or now - since < RELEASE_WITHIN:
        return None
    done = sum(1 for p in pods if p["metadata"].get("namespace", "") == namespace
               and (p["metadata"].get("labels") or {}).get(keys.POD_GROUP_LABEL) == group
               and keys.GANG_GATE not in _gates(p)
               and keys.PLANNED_NODE_ANNOTATION in (p["metadata"].get("annotations") or {}))
    refused = min(int(status.get("released") or 0) - done, gated)
    if refused <= 0:
        return None
    return (f"the gate controller released {refused} of them {(now - since).total_seconds():.0f}s ago and their gate "
            "is still there: its gate removals are refused or failing")


def _gang_events(events: list[Obj], members: list[Obj]) -> list[Obj]:
    """The controller's events (events.k8s.io/v1) about the gang's root or its members, oldest first (by when each
    was last observed)."""
    subjects = {("Pod", p["metadata"]["name"]) for p in members}
    owner = (members[0]["metadata"].get("annotations") or {}).get(keys.OWNER_ANNOTATION) or ""
    if owner.count("/") >= 3:  # <group>/<version>/<kind>/<name>
        subjects.add(tuple(owner.split("/")[-2:]))
    ours = [e for e in events if e.get("reason") in CONTROLLER_EVENTS and ((e.get("regarding") or {}).get("kind"),
                                                                           (e.get("regarding") or {}).get("name"))
            in subjects]
    return sorted(ours, key=_observed)


def _observed(event: Obj) -> datetime.datetime:
    """When an Event was last observed: its series' last observation, else its time (or the core/v1 timestamps of
    an Event recorded through core/v1)."""
    text = ((event.get("series") or {}).get("lastObservedTime") or event.get("eventTime")
            or event.get("deprecatedLastTimestamp") or "")
    return _time(text) or datetime.datetime.min.replace(tzinfo=datetime.UTC)


# --- PodGroups -----------------------------------------------------------------------------------------------


DONE_PHASES = ("Running", "Succeeded")  # nothing to say about these
STUCK_PHASES = ("NeverFits", "NotCertifiable", "Failed")  # waiting will not help


def check_podgroups(cluster: Cluster, config: Config, now: datetime.datetime) -> list[Finding]:
    """Every gang's PodGroup that is not running (or done), with its phase and the controller's reason: a gang that
    can never fit, cannot be certified, failed, waited past its schedule timeout or whose released pods no scheduler
    picks up (condition Scheduled False) is a problem; one waiting for its
    members or capacity, or being released, is reported as waiting. A PodGroup none of whose pods exist any more
    (its root was deleted leaving it behind, or its pods were) only counts: it says nothing about a live gang."""
    found = cluster.get(f"/apis/{keys.PODGROUP_GROUP}/{keys.PODGROUP_VERSION}/{keys.PODGROUP_PLURAL}")
    if found is None:
        return [Finding(False, "podgroups", f"the PodGroup CRD ({keys.PODGROUP_PLURAL}.{keys.PODGROUP_GROUP}) is not "
                        "installed: gangs have no PodGroup to show their phase; apply the manifests again "
                        "(kubectl apply -k deploy/...)")]
    groups = found.get("items") or []
    query = urllib.parse.urlencode({"labelSelector": keys.POD_GROUP_LABEL})
    members = {(p["metadata"].get("namespace", ""), (p["metadata"].get("labels") or {}).get(keys.POD_GROUP_LABEL))
               for p in (cluster.get(f"/api/v1/pods?{query}") or {}).get("items", [])}
    findings, stale = [], 0
    for group in sorted(groups, key=lambda g: (g["metadata"].get("namespace", ""), g["metadata"].get("name", ""))):
        status, meta = group.get("status") or {}, group["metadata"]
        phase = status.get("phase") or "(no status yet)"
        if phase in DONE_PHASES:
            continue
        if (meta.get("namespace", ""), meta.get("name")) not in members:
            stale += 1
            continue
        conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
        timed_out = (conditions.get("TimedOut") or {}).get("status") == "True"
        no_scheduler = (conditions.get("Scheduled") or {}).get("status") == "False"
        since = _time(status.get("scheduleStartTime"))
        waited = f" for {(now - since).total_seconds():.0f}s" if since is not None else ""
        counts = f"{status.get('present', 0)}/{(group.get('spec') or {}).get('minMember', '?')} present"
        text = (f"{meta.get('namespace')}/{meta.get('name')}: {phase}{waited} ({counts}"
                + (f", waiting for {status['waitingFor']}" if status.get("waitingFor") and phase not in STUCK_PHASES
                   else "") + ")"
                + (f" — {status['reason']}" if status.get("reason") else "")
                + (" — TimedOut: waiting longer than its schedule timeout" if timed_out else ""))
        if no_scheduler and conditions["Scheduled"].get("message") != status.get("reason"):
            text += f" — NoScheduler: {conditions['Scheduled'].get('message')}"
        stuck = phase in STUCK_PHASES or timed_out or no_scheduler
        findings.append(Finding(not stuck, "podgroups", text, info=not stuck))
    running = sum(1 for g in groups if ((g.get("status") or {}).get("phase")) in DONE_PHASES)
    findings.append(Finding(True, "podgroups", f"{len(groups)} PodGroup(s): {running} running or succeeded, "
                            f"{len(groups) - running - stale} not"
                            + (f", {stale} without member pods" if stale else "")))
    return findings


# --- namespaces ---------------------------------------------------------------------------------------------


def check_namespace_labels(cluster: Cluster, config: Config, now: datetime.datetime) -> list[Finding]:
    """The namespaces labelled kubenexus.io/gang-scheduling: a value other than enabled or disabled is ignored by the
    webhook (it only warns whoever writes it, and nobody reads warnings of a GitOps apply)."""
    query = urllib.parse.urlencode({"labelSelector": keys.GANG_SCHEDULING})
    labelled = (cluster.get(f"/api/v1/namespaces?{query}") or {}).get("items", [])
    findings = [Finding(False, "namespaces", problem) for ns in labelled
                if (problem := check_namespace_label(ns)) is not None]
    values = [(ns["metadata"].get("labels") or {}).get(keys.GANG_SCHEDULING) for ns in labelled]
    counts = ", ".join(f"{values.count(v)} {v}" for v in (keys.NAMESPACE_ENABLED, keys.NAMESPACE_DISABLED))
    return findings + [Finding(True, "namespaces", f"{len(labelled)} namespace(s) labelled {keys.GANG_SCHEDULING}: "
                               f"{counts}" + (f", {len(findings)} invalid" if findings else ""))]


# --- queues -------------------------------------------------------------------------------------------------


def check_queues(cluster: Cluster, config: Config, now: datetime.datetime) -> list[Finding]:
    """What makes gangs wait for their Queue, in the gate controller's words (gang/queues.py ``queue_of``): a
    namespace that two or more Queues select (its gangs that do not name their Queue wait), an opted-in root that
    names a Queue that does not exist. Applying either prints a warning, which nobody reads in a GitOps apply."""
    listed = cluster.get(f"/apis/{queues.GROUP}/{queues.VERSION}/{queues.PLURAL}")
    if listed is None:
        return [Finding(True, "queues", "the Queue CRD is not installed: gangs are decided without Queues")]
    specs = {spec.name: spec for spec in map(queues.parse_queue, listed.get("items") or [])}
    labels = {str(ns["metadata"]["name"]): ns["metadata"].get("labels") or {}
              for ns in (cluster.get("/api/v1/namespaces") or {}).get("items", [])}
    findings = []
    for namespace, values in sorted(labels.items()):
        found = queues.queue_of(None, namespace, values, specs)
        if isinstance(found, queues.QueueProblem):
            findings.append(Finding(False, "queues", found.reason))
    overlaps = len(findings)
    seen: set[tuple[str, str, str]] = set()
    for resource in ROOT_RESOURCES:
        for root in (cluster.get(path_of(resource)) or {}).get("items", []):
            meta = root.get("metadata") or {}
            namespace, named = str(meta.get("namespace") or ""), (meta.get("annotations") or {}).get(keys.QUEUE)
            key = (resource.kind, namespace, str(meta.get("name")))
            if not named or named in specs or key in seen or config.is_excluded(namespace):
                continue
            seen.add(key)
            if not root_opt_in(root, namespace, labels.get(namespace, {}).get(keys.GANG_SCHEDULING), config)[0]:
                continue
            found = queues.queue_of(str(named), namespace, labels.get(namespace), specs)
            if isinstance(found, queues.QueueProblem):
                findings.append(Finding(False, "queues", f"{resource.kind} {namespace}/{key[2]}: its gang waits: "
                                                         f"{found.reason}"))
    summary = f"{len(specs)} Queue(s)"
    if findings:
        summary += (f": {overlaps} namespace(s) selected by more than one, {len(findings) - overlaps} root(s) naming "
                    "a Queue that does not exist")
    return findings + [Finding(True, "queues", summary)]


CHECKS: tuple[Callable[[Cluster, Config, datetime.datetime], list[Finding]], ...] = (
    check_certificates, check_endpoints, check_leader, check_rbac, check_gate_removers, check_namespace_labels,
    check_queues, check_gated, check_podgroups)


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


def _ordered(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (f.ok, f.info))  # problems first, then what waits, then what is fine


def _status(finding: Finding) -> str:
    return "PROBLEM" if not finding.ok else "waiting" if finding.info else "ok     "


def render(findings: Iterable[Finding]) -> str:
    return "\n".join(f"{_status(f)}  [{f.check}] {f.text}" for f in _ordered(findings))


def installed_config(cluster: Cluster, namespace: str) -> tuple[Config, Finding]:
    """The configuration the installation runs with (its ConfigMap), or the defaults and why they are used."""
    name = f"ConfigMap {namespace}/{CONFIG_MAP}"
    found = cluster.get(f"/api/v1/namespaces/{namespace}/configmaps/{CONFIG_MAP}")
    defaults = Config(namespace=namespace)
    if found is None:
        return defaults, Finding(False, "configuration", f"no {name}: KubeNexus is not installed in namespace "
                                 f"{namespace} (pass --namespace), or its configuration was deleted and the "
                                 "components cannot restart; checking against the default configuration")
    text = (found.get("data") or {}).get(CONFIG_KEY)
    if text is None:
        return defaults, Finding(False, "configuration", f"{name} has no {CONFIG_KEY}: the components cannot "
                                 "start with it; checking against the default configuration")
    try:
        config = config_from_text(text, CONFIG_KEY)
    except ConfigError as exc:
        return defaults, Finding(False, "configuration", f"{name}: {exc}: the components exit at start with it; "
                                 "checking against the default configuration")
    return config, Finding(True, "configuration", f"{name}: certs.mode {config.certs_mode}, namespace "
                           f"{config.namespace}")


def as_data(findings: Iterable[Finding]) -> list[Obj]:
    """The findings as ``-o json|yaml`` prints them, in ``render``'s order."""
    return [{"status": _status(f).strip().lower(), "check": f.check, "text": f.text} for f in _ordered(findings)]


def run(args: argparse.Namespace) -> int:
    if args.config:
        config = config_or_exit(args.config, "kubenexus doctor")
        cluster = Cluster(connect(args.kubeconfig or config.kubeconfig, ADMIN))
        findings = [Finding(True, "configuration", f"{args.config} (given with --config)")]
    else:
        cluster = Cluster(connect(args.kubeconfig, ADMIN))
        config, finding = installed_config(cluster, args.namespace)
        findings = [finding]
    findings += diagnose(cluster, config)
    print(render(findings) if args.output == "text" else dump(as_data(findings), args.output))
    return 0 if all(f.ok for f in findings) else FOUND


def add_parser(subcommands: Any) -> None:
    parser = subcommands.add_parser(
        "doctor", help="check a live installation and say what is wrong",
        description="Check a live installation and say what is wrong. Exit status: 0 when nothing is wrong (gangs "
        "waiting for members or capacity are not problems), 1 when a check found a problem, 2 on a usage error "
        "(arguments, configuration, kubeconfig), 3 when the apiserver cannot be reached.")
    parser.add_argument("--kubeconfig", help="kubeconfig of a cluster-admin (default: the configured one, ~/.kube)")
    parser.add_argument("--namespace", default=Config().namespace,
                        help="where KubeNexus is installed; its ConfigMap kubenexus-config says the rest")
    parser.add_argument("--config", help="check against this configuration file instead of the installed ConfigMap")
    add_output(parser)
    parser.set_defaults(func=run)

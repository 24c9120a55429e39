"""Schemas the shipped manifests are validated against: the Kubernetes JSON schemas of the supported versions
(kubernetes-validate, strict: unknown fields fail), and for the kinds outside them, cert-manager's (the fields its
CRDs require, CERT_MANAGER_SCHEMAS) and the Prometheus Operator's (its CRDs' openAPIV3Schema, vendored in
schemas/ with their source and version). Any other kind outside the Kubernetes schemas fails."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

Obj = dict[str, Any]
#: The oldest Kubernetes release the product supports ("Kubernetes 1.30+" in README.md and docs/getting-started.md:
#: tests/test_claims.py compares them) and the newest kubernetes-validate ships.
SCHEMA_VERSIONS = ("1.30", kubernetes_validate.latest_version())
SCHEMAS = Path(__file__).resolve().parent / "schemas"
#: Prometheus Operator kinds: their vendored CRD schema.
PROMETHEUS_OPERATOR = {"ServiceMonitor": "monitoring.coreos.com_servicemonitors.yaml",
                       "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml"}
ERRORS = (kubernetes_validate.ValidationError, jsonschema.ValidationError)

# cert-manager.io/v1 is not in the Kubernetes schemas: the fields cert-manager's CRDs require, and the types of
# the ones we set (no unknown fields), for the two kinds the cert-manager overlay uses. Any other kind outside
# the Kubernetes schemas fails the test.
_META = {"type": "object", "required": ["name", "namespace"]}
_ISSUER_REF = {"type": "object", "required": ["name"], "additionalProperties": False,
               "properties": {"name": {"type": "string"}, "kind": {"enum": ["Issuer", "ClusterIssuer"]},
                              "group": {"const": "cert-manager.io"}}}
CERT_MANAGER_SCHEMAS: dict[str, Obj] = {
    "Issuer": {
        "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {"apiVersion": {"const": "cert-manager.io/v1"}, "metadata": _META, "spec": {
            "type": "object", "minProperties": 1, "maxProperties": 1, "additionalProperties": False,
            "properties": {"selfSigned": {"type": "object"},
                           "ca": {"type": "object", "required": ["secretName"],
                                  "properties": {"secretName": {"type": "string"}}}}}},
    },
    "Certificate": {
        "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {"apiVersion": {"const": "cert-manager.io/v1"}, "metadata": _META, "spec": {
            "type": "object", "required": ["secretName", "issuerRef"], "additionalProperties": False,
            "anyOf": [{"required": ["commonName"]}, {"required": ["dnsNames"]}],
            "properties": {
                "secretName": {"type": "string"}, "issuerRef": _ISSUER_REF, "isCA": {"type": "boolean"},
                "commonName": {"type": "string", "maxLength": 64},
                "dnsNames": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "duration": {"type": "string", "pattern": r"^\d+h$"},
                "renewBefore": {"type": "string", "pattern": r"^\d+h$"},
                "usages": {"type": "array", "items": {"enum": ["server auth", "client auth", "digital signature",
                                                               "key encipherment", "cert sign"]}},
                "privateKey": {"type": "object", "additionalProperties": False, "properties": {
                    "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]}, "size": {"type": "integer"},
                    "encoding": {"enum": ["PKCS1", "PKCS8"]}, "rotationPolicy": {"enum": ["Never", "Always"]}}},
            }}},
    },
}


def strict(schema: Obj) -> Obj:
    """A CRD's structural schema as the apiserver applies it under strict field validation (kubectl's default):
    fields it does not declare are errors, not pruned."""
    out = {k: v for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if str(out.get("pattern", "")).startswith("^(?i)"):  # RE2 takes a flag group anywhere, Python's re only first
        out["pattern"] = "(?i)^" + out["pattern"][len("^(?i)"):]
    if "properties" in schema and "additionalProperties" not in schema \
            and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    for key in ("properties",):
        if key in out:
            out[key] = {name: strict(sub) for name, sub in out[key].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = strict(out[key])
    return out


@functools.cache
def prometheus_operator_schema(kind: str) -> Obj:
    return strict(yaml.safe_load((SCHEMAS / PROMETHEUS_OPERATOR[kind]).read_text()))


def validate(obj: Obj, version: str) -> None:
    """Raise one of ERRORS unless ``obj`` is valid for Kubernetes ``version`` (or its CRD's schema)."""
    group = obj["apiVersion"].split("/")[0]
    if group == "cert-manager.io":
        assert obj["kind"] in CERT_MANAGER_SCHEMAS, f"no schema for {obj['apiVersion']} {obj['kind']}"
        jsonschema.validate(obj, CERT_MANAGER_SCHEMAS[obj["kind"]])
    elif group == "monitoring.coreos.com":
        assert obj["apiVersion"] == "monitoring.coreos.com/v1" and obj["kind"] in PROMETHEUS_OPERATOR, \
            f"no schema for {obj['apiVersion']} {obj['kind']}"
        jsonschema.validate(obj, prometheus_operator_schema(obj["kind"]))
    else:
        kubernetes_validate.validate(obj, version, strict=True)

"""The apiserver's built-in validation for the emulator: object metadata, pod create/update, pod binding.

Pure functions over JSON-shaped dicts. Each returns what a real kube-apiserver answers, so the emulator
refuses exactly what a cluster refuses — never more, never less. Field errors are rendered like
``field.Error.Error()`` (``<path>: <Type>[: <value>][: <detail>]``); wording follows the v1.30 release
(where KEP-3521 pod scheduling readiness and KEP-3838 mutable scheduling directives went GA).

Ported from kubernetes/kubernetes (read the source, not memory):
  staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go, generic.go   ObjectMeta rules
  staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go              names, labels, RFC 1123
  staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go                   ParseQuantity, String
  pkg/apis/core/validation/validation.go        ValidatePodCreate, ValidatePodUpdate, validateSchedulingGates,
      validateOnlyDeletedSchedulingGates, validateNodeSelectorMutation, validateNodeAffinityMutation, ...
  pkg/registry/core/pod/storage/storage.go      BindingREST.setPodHostAndAnnotations, assignPod

The caller does what the apiserver does around validation: answer ``decode_errors`` with 400 BadRequest
before validating; set metadata.namespace from the URL; apply defaults (restartPolicy, dnsPolicy,
terminationMessagePolicy, ...) to both old and new objects; answer any error list with 422 Invalid
(``invalid_message``). Not ported (accepted here, possibly refused by a cluster): volumes, ports, env,
probes, security contexts, pod (anti-)affinity terms, topology spread, pod-specific annotations, and the
"required" checks on fields that defaulting always fills.
"""

from __future__ import annotations

import copy
import decimal
import json
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

__all__ = [
    "MAX_ANNOTATIONS_BYTES",
    "Quantity",
    "QuantityError",
    "decode_errors",
    "invalid_message",
    "parse_quantity",
    "validate_binding",
    "validate_object_meta",
    "validate_pod_create",
    "validate_pod_update",
]

Obj = dict[str, Any]

MAX_ANNOTATIONS_BYTES = 256 * 1024  # TotalAnnotationSizeLimitB
_MAX_INT32 = 2**31 - 1
_GENERATED_BASE_MAX = 63 - 5  # names.SimpleNameGenerator: base truncated so base + 5 random chars fit 63


# --- field errors, rendered like k8s.io/apimachinery/pkg/util/validation/field ---------------------------


def _value(value: Any) -> str:
    """The bad value as ErrorBody prints it: %q for strings, %v for scalars, JSON for structures."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | Quantity):
        return str(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _invalid(path: str, value: Any, detail: str) -> str:
    return f"{path}: Invalid value: {_value(value)}: {detail}"


def _required(path: str, detail: str = "") -> str:
    return f"{path}: Required value: {detail}" if detail else f"{path}: Required value"


def _forbidden(path: str, detail: str) -> str:
    return f"{path}: Forbidden: {detail}"


def _duplicate(path: str, value: Any) -> str:
    return f"{path}: Duplicate value: {_value(value)}"


def _not_supported(path: str, value: Any, supported: list[str]) -> str:
    return f"{path}: Unsupported value: {_value(value)}: supported values: " + ", ".join(f'"{s}"' for s in supported)


def _unique(errors: list[str]) -> list[str]:
    """ErrorList.ToAggregate drops repeated messages (ValidatePodUpdate validates metadata twice)."""
    return list(dict.fromkeys(errors))


def invalid_message(kind: str, name: str, errors: list[str]) -> str:
    """The 422 Status message: ``errors.NewInvalid`` (one error bare, several in brackets)."""
    detail = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    return f'{kind} "{name}" is invalid: {detail}'


# --- names, label keys and values (util/validation) ----------------------------------------------------


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """validation.RegexError, including its double space before each "or"."""
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_FMT = _LABEL_FMT + r"(\." + _LABEL_FMT + ")*"
_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT = "(" + _QNAME_FMT + ")?"
_LABEL_MSG = _regex_error("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                          "and must start and end with an alphanumeric character", _LABEL_FMT, "my-name", "123-abc")
_SUBDOMAIN_MSG = _regex_error("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                              "'-' or '.', and must start and end with an alphanumeric character", _SUBDOMAIN_FMT,
                              "example.com")
_QNAME_MSG = _regex_error("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                          "alphanumeric character", _QNAME_FMT, "MyName", "my.name", "123-abc")
_LABEL_VALUE_MSG = _regex_error("a valid label must be an empty string or consist of alphanumeric characters, '-', "
                                "'_' or '.', and must start and end with an alphanumeric character", _LABEL_VALUE_FMT,
                                "MyValue", "my_value", "12345")


def _matches(fmt: str, value: str) -> bool:
    """Go's ``^fmt$`` (fullmatch: Python's ``$`` would also accept a trailing newline)."""
    return re.fullmatch(fmt, value) is not None


def _size(value: str) -> int:
    """Go's len(): bytes, not characters."""
    return len(value.encode())


def _dns1123_label(value: str) -> list[str]:
    errs = [_max_len(63)] if _size(value) > 63 else []
    if not _matches(_LABEL_FMT, value):
        errs.append("must not contain dots" if _matches(_SUBDOMAIN_FMT, value) else _LABEL_MSG)
    return errs


def _dns1123_subdomain(value: str) -> list[str]:
    errs = [_max_len(253)] if _size(value) > 253 else []
    return errs + ([] if _matches(_SUBDOMAIN_FMT, value) else [_SUBDOMAIN_MSG])


def _qualified_name(value: str) -> list[str]:
    """IsQualifiedName: ``[prefix/]name`` — prefix a DNS subdomain, name at most 63 characters."""
    parts = value.split("/")
    if len(parts) > 2:
        return [f"a qualified name {_QNAME_MSG} with an optional DNS subdomain prefix and '/' "
                "(e.g. 'example.com/MyName')"]
    errs: list[str] = []
    if len(parts) == 2:
        prefix = parts[0]
        errs += ["prefix part must be non-empty"] if not prefix else [f"prefix part {m}"
                                                                       for m in _dns1123_subdomain(prefix)]
    name = parts[-1]
    if not name:
        errs.append("name part must be non-empty")
    elif _size(name) > 63:
        errs.append(f"name part {_max_len(63)}")
    if not _matches(_QNAME_FMT, name):
        errs.append(f"name part {_QNAME_MSG}")
    return errs


def _label_value(value: str) -> list[str]:
    errs = [_max_len(63)] if _size(value) > 63 else []
    return errs + ([] if _matches(_LABEL_VALUE_FMT, value) else [_LABEL_VALUE_MSG])


def _labels_errors(labels: Any, path: str) -> list[str]:
    """ValidateLabels: every error is reported at the map's path, with the bad key or value."""
    errs: list[str] = []
    for key, value in (labels or {}).items():
        errs += [_invalid(path, key, m) for m in _qualified_name(key)]
        if isinstance(value, str):  # other types never decode (see decode_errors)
            errs += [_invalid(path, value, m) for m in _label_value(value)]
    return errs


def _mask_trailing_dash(name: str) -> str:
    """generic.go maskTrailingDash: a generateName prefix may end in '-'."""
    return name[:-2] + "a" if len(name) > 1 and name.endswith("-") else name


# --- resource quantities (api/resource/quantity.go) ---------------------------------------------------

_SPLIT_RE = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_ERR_FORMAT = f"quantities must match the regular expression '{_SPLIT_RE}'"
_ERR_SUFFIX = "unable to parse quantity's suffix"
_DIGITS = "0123456789"
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_SI_BY_EXPONENT = {exp: suffix for suffix, exp in _DECIMAL_SI.items()}
_BINARY_BY_POWER = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
_EXACT = decimal.Context(prec=4000, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
_NANO = Decimal("1e-9")


class QuantityError(ValueError):
    """Not a quantity; the apiserver fails the request body's decoding (HTTP 400), not validation."""


@dataclass(frozen=True)
class Quantity:
    """An exact quantity and its format; ``str()`` is Quantity.String() (canonical: "1536Mi", "500m")."""

    value: Decimal
    format: str  # "DecimalSI" | "BinarySI" | "DecimalExponent"

    def __str__(self) -> str:
        if not self.value:
            return "0"
        fmt = self.format
        if fmt == "BinarySI" and (abs(self.value) < 1024 or self.value != self.value.to_integral_value()):
            fmt = "DecimalSI"  # CanonicalizeBytes: small or fractional binary values print as decimal
        if fmt == "BinarySI":
            number, power = int(self.value), 0
            while number % 1024 == 0 and power < len(_BINARY_BY_POWER) - 1:
                number, power = number // 1024, power + 1
            return f"{number}{_BINARY_BY_POWER[power]}"
        mantissa, exponent = _canonical_decimal(self.value)
        if fmt == "DecimalExponent":
            return f"{mantissa}e{exponent}" if exponent else str(mantissa)
        while exponent > 18:
            mantissa, exponent = mantissa * 1000, exponent - 3
        return f"{mantissa}{_SI_BY_EXPONENT[exponent]}"


def _canonical_decimal(value: Decimal) -> tuple[int, int]:
    """AsCanonicalBytes: all factors of ten into the exponent, then the exponent down to a multiple of 3."""
    sign, digits, exponent = value.normalize(_EXACT).as_tuple()
    assert isinstance(exponent, int)
    mantissa = int("".join(map(str, digits))) * (-1 if sign else 1)
    while exponent % 3:
        mantissa, exponent = mantissa * 10, exponent - 1
    return mantissa, exponent


def _quantity_text(raw: Any) -> str:
    """The text Quantity.UnmarshalJSON parses: a JSON string's content or a JSON number's literal."""
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, int | float | str):
        return str(raw).strip()
    raise QuantityError(_ERR_FORMAT)


def _scan(text: str) -> tuple[bool, str, str, str]:
    """parseQuantityString: (negative, integer digits, fraction digits, suffix)."""
    pos, end = 0, len(text)
    negative = text[0] == "-"
    pos += text[0] in "+-"
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return negative, "0", "", ""
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num, denom = text[start:pos] or "0", ""
    if pos < end and text[pos] == ".":
        start = pos = pos + 1
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
    suffix_start = pos
    while pos < end and text[pos] in "eEinumkKMGTP":
        pos += 1
    pos += pos < end and text[pos] in "+-"
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise QuantityError(_ERR_FORMAT)
    return negative, num, denom, text[suffix_start:]


def _interpret(suffix: str) -> tuple[int, int, str]:
    """suffixHandler.interpret: (base, exponent, format)."""
    if suffix in _DECIMAL_SI:
        return 10, _DECIMAL_SI[suffix], "DecimalSI"
    if suffix in _BINARY_SI:
        return 2, _BINARY_SI[suffix], "BinarySI"
    if len(suffix) > 1 and suffix[0] in "eE" and re.fullmatch(r"[+-]?[0-9]+", suffix[1:]):
        exponent = int(suffix[1:])
        if abs(exponent) < 2**63:
            return 10, (exponent + 2**31) % 2**32 - 2**31, "DecimalExponent"  # Go: int32(ParseInt(...))
    raise QuantityError(_ERR_SUFFIX)


def parse_quantity(raw: Any) -> Quantity:
    """ParseQuantity: exact value, rounded up to 1n like the apiserver (binary values capped at 2^63-1)."""
    text = _quantity_text(raw)
    if not text:
        raise QuantityError(_ERR_FORMAT)
    negative, num, denom, suffix = _scan(text)
    base, exponent, fmt = _interpret(suffix)
    amount = Decimal(f"{num}.{denom}" if denom else num)
    amount = amount.scaleb(exponent, _EXACT) if base == 10 else _EXACT.multiply(amount, _EXACT.power(2, exponent))
    if amount.as_tuple().exponent < -9:  # finer than 1n
        amount = amount.quantize(_NANO, rounding=decimal.ROUND_UP, context=_EXACT)
    if fmt == "BinarySI":
        amount = min(amount, Decimal(2**63 - 1))
        if 0 < amount < 1:
            fmt = "DecimalSI"
    return Quantity(-amount if negative else amount, fmt)


def _try_quantity(raw: Any) -> Quantity | None:
    try:
        return parse_quantity(raw)
    except QuantityError:
        return None


def _resource_lists(pod: Obj) -> list[tuple[str, dict[str, Any]]]:
    """(path, ResourceList) for every quantity map in a pod: container requests/limits and overhead."""
    spec = pod.get("spec") or {}
    lists = [("spec.overhead", spec.get("overhead") or {})]
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for i, ctr in enumerate(spec.get(kind) or []):
            res = (ctr or {}).get("resources") or {}
            lists += [(f"spec.{kind}[{i}].resources.{part}", res.get(part) or {}) for part in ("limits", "requests")]
    return lists


def decode_errors(pod: Obj) -> list[str]:
    """What the apiserver refuses while decoding the body, before validation: answer these with 400 BadRequest.

    A quantity that does not parse, or a label/annotation value that is not a string, cannot become a Go
    object, so the real request fails as BadRequest ("... cannot be handled as a Pod: ..."), never 422.
    """
    errs: list[str] = []
    meta = pod.get("metadata") or {}
    for part in ("labels", "annotations"):
        for key, value in (meta.get(part) or {}).items():
            if not isinstance(value, str):
                errs.append(f"metadata.{part}[{key}]: cannot unmarshal {type(value).__name__} into a string")
    for path, resources in _resource_lists(pod):
        for name, raw in resources.items():
            if raw is None:
                continue
            try:
                parse_quantity(raw)
            except QuantityError as exc:
                errs.append(f"{path}[{name}]: {exc}")
    return errs


# --- object metadata (api/validation/objectmeta.go) ----------------------------------------------------


def _name_errors(meta: Obj, dns_label_name: bool) -> list[str]:
    """Name rules; with only generateName, the name the apiserver generates before validating it."""
    check = _dns1123_label if dns_label_name else _dns1123_subdomain
    generate = meta.get("generateName") or ""
    errs = [_invalid("metadata.generateName", generate, m) for m in check(_mask_trailing_dash(generate)) if generate]
    name = meta.get("name") or ""
    if not name and generate:
        name = generate[:_GENERATED_BASE_MAX] + "bcdfg"  # suffix drawn from the generator's alphabet
    if not name:
        return errs + [_required("metadata.name", "name or generateName is required")]
    return errs + [_invalid("metadata.name", name, m) for m in check(name)]


def _namespace_errors(meta: Obj, namespaced: bool) -> list[str]:
    namespace = meta.get("namespace") or ""
    if not namespaced:
        return [_forbidden("metadata.namespace", "not allowed on this type")] if namespace else []
    if not namespace:
        return [_required("metadata.namespace")]
    return [_invalid("metadata.namespace", namespace, m) for m in _dns1123_label(namespace)]


def _annotations_errors(annotations: Any) -> list[str]:
    """Keys are qualified names compared lowercased; keys plus values at most 256 KiB in total."""
    annotations = annotations or {}
    errs = [_invalid("metadata.annotations", k, m) for k in annotations for m in _qualified_name(k.lower())]
    total = sum(_size(k) + _size(v) for k, v in annotations.items() if isinstance(v, str))
    if total > MAX_ANNOTATIONS_BYTES:
        errs.append(f"metadata.annotations: Too long: must have at most {MAX_ANNOTATIONS_BYTES} bytes")
    return errs


def _owner_reference_errors(refs: Any) -> list[str]:
    """Each reference names apiVersion (with a version), kind, name, uid; at most one is the controller."""
    path, errs, controller = "metadata.ownerReferences", [], ""
    for ref in refs or []:
        api_version = ref.get("apiVersion") or ""
        group_version = api_version.split("/")
        version = "" if len(group_version) > 2 else group_version[-1]
        if not version:
            errs.append(_invalid(f"{path}.apiVersion", api_version, "version must not be empty"))
        for key in ("kind", "name", "uid"):
            if not ref.get(key):
                errs.append(_invalid(f"{path}.{key}", ref.get(key) or "", "must not be empty"))
        if api_version == "v1" and ref.get("kind") == "Event":
            errs.append(_invalid(path, ref, "/v1, Kind=Event is disallowed from being an owner"))
        if ref.get("controller") is True:
            current = f"{ref.get('kind', '')}/{ref.get('name', '')}"
            if controller:
                errs.append(_invalid(path, refs, 'Only one reference can have Controller set to true. Found "true" '
                                                 f"in references for {controller} and {current}"))
            else:
                controller = current
    return errs


def _finalizer_errors(finalizers: Any) -> list[str]:
    finalizers = finalizers or []
    errs = [_invalid("metadata.finalizers", f, m) for f in finalizers for m in _qualified_name(f)]
    if "orphan" in finalizers and "foregroundDeletion" in finalizers:
        errs.append(_invalid("metadata.finalizers", finalizers,
                             "finalizer orphan and foregroundDeletion cannot be both set"))
    return errs


def validate_object_meta(obj: Obj, namespaced: bool, *, dns_label_name: bool = False) -> list[str]:
    """ValidateObjectMeta on create: name (a DNS-1123 subdomain, or a label with ``dns_label_name`` as for
    Namespace), namespace, labels, annotations, owner references, finalizers. Empty list: valid."""
    meta = obj.get("metadata") or {}
    errs = _name_errors(meta, dns_label_name) + _namespace_errors(meta, namespaced)
    generation = meta.get("generation")
    if isinstance(generation, int) and generation < 0:
        errs.append(_invalid("metadata.generation", generation, "must be greater than or equal to 0"))
    errs += _labels_errors(meta.get("labels"), "metadata.labels")
    errs += _annotations_errors(meta.get("annotations"))
    errs += _owner_reference_errors(meta.get("ownerReferences"))
    return _unique(errs + _finalizer_errors(meta.get("finalizers")))


def _object_meta_update_errors(new: Obj, old: Obj) -> list[str]:
    """ValidateObjectMetaUpdate after rest.BeforeUpdate's fill-ins.

    The store copies the stored uid (when none is sent), creationTimestamp, deletionTimestamp, grace period,
    generation and — for unconditional updates — resourceVersion before validating, so only real changes of
    identity fail here.
    """
    errs: list[str] = []
    if old.get("deletionTimestamp"):
        added = sorted(set(new.get("finalizers") or []) - set(old.get("finalizers") or []))
        if added:
            shown = ", ".join(json.dumps(f) for f in added)
            errs.append(_forbidden("metadata.finalizers", "no new finalizers can be added if the object is being "
                                                          f"deleted, found new finalizers []string{{{shown}}}"))
    for key in ("name", "namespace", "uid"):
        new_value, old_value = new.get(key) or "", old.get(key) or ""
        if key == "uid" and not new_value:
            continue
        if new_value != old_value:
            errs.append(_invalid(f"metadata.{key}", new_value, "field is immutable"))
    return errs


# --- pod spec (core/validation/validation.go) ------------------------------------------------------------

_STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
_STANDARD_RESOURCES = _STANDARD_CONTAINER_RESOURCES | {
    "requests.cpu", "requests.memory", "requests.ephemeral-storage", "limits.cpu", "limits.memory",
    "limits.ephemeral-storage", "pods", "resourcequotas", "services", "replicationcontrollers", "secrets",
    "configmaps", "persistentvolumeclaims", "storage", "requests.storage", "services.nodeports",
    "services.loadbalancers",
}
_INTEGER_RESOURCES = frozenset({"pods", "resourcequotas", "services", "replicationcontrollers", "secrets",
                                "configmaps", "persistentvolumeclaims", "services.nodeports",
                                "services.loadbalancers"})


def _is_native(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def _is_hugepages(name: str) -> bool:
    return name.startswith("hugepages-")


def _is_extended(name: str) -> bool:
    return not _is_native(name) and not name.startswith("requests.") and not _qualified_name(f"requests.{name}")


def _overcommit_allowed(name: str) -> bool:
    """Native resources other than hugepages may request less than their limit; others must be equal."""
    return _is_native(name) and not _is_hugepages(name)


def _resource_name_errors(name: str, path: str) -> list[str]:
    """validateContainerResourceName: cpu, memory, ephemeral-storage, hugepages-*, or an extended resource."""
    errs = [_invalid(path, name, m) for m in _qualified_name(name)]
    if "/" not in name:
        if not errs and name not in _STANDARD_RESOURCES and not name.startswith(("hugepages-", "requests.hugepages-")):
            errs.append(_invalid(path, name, "must be a standard resource type or fully qualified"))
        if name not in _STANDARD_CONTAINER_RESOURCES and not _is_hugepages(name):
            errs.append(_invalid(path, name, "must be a standard resource for containers"))
    elif not _is_native(name) and not _is_extended(name):
        errs.append(_invalid(path, name, "doesn't follow extended resource name standard"))
    return errs


def _quantity_value_errors(name: str, quantity: Quantity, path: str) -> list[str]:
    """Non-negative; whole numbers for extended (device) resources such as nvidia.com/gpu."""
    errs = [_invalid(path, str(quantity), "must be greater than or equal to 0")] if quantity.value < 0 else []
    if name in _INTEGER_RESOURCES or _is_extended(name):
        milli = (quantity.value * 1000).to_integral_value(rounding=decimal.ROUND_CEILING)
        if milli % 1000:
            errs.append(_invalid(path, quantity, "must be an integer"))
    return errs


def _parsed_resources(resources: Any, path: str) -> tuple[dict[str, Quantity], list[str]]:
    """Quantities that decode (the rest are decode_errors), with their name and value errors."""
    parsed, errs = {}, []
    for name, raw in (resources or {}).items():
        errs += _resource_name_errors(name, f"{path}[{name}]")
        quantity = _try_quantity(raw)
        if quantity is not None:
            parsed[name] = quantity
            errs += _quantity_value_errors(name, quantity, f"{path}[{name}]")
    return parsed, errs


def _resources_errors(resources: Any, path: str) -> list[str]:
    """ValidateContainerResourceRequirements: request <= limit, and == limit where overcommit is not allowed."""
    resources = resources or {}
    limits, errs = _parsed_resources(resources.get("limits"), f"{path}.limits")
    requests, request_errs = _parsed_resources(resources.get("requests"), f"{path}.requests")
    errs += request_errs
    for name, request in requests.items():
        limit = limits.get(name)
        if limit is None:
            if name not in (resources.get("limits") or {}) and not _overcommit_allowed(name):
                errs.append(_required(f"{path}.limits", "Limit must be set for non overcommitable resources"))
        elif request.value != limit.value and not _overcommit_allowed(name):
            errs.append(_invalid(f"{path}.requests", str(request), f"must be equal to {name} limit of {limit}"))
        elif request.value > limit.value:
            errs.append(_invalid(f"{path}.requests", str(request),
                                 f"must be less than or equal to {name} limit of {limit}"))
    names = set(limits) | set(requests)
    if any(map(_is_hugepages, names)) and not names & {"cpu", "memory"}:
        errs.append(_forbidden(path, "HugePages require cpu or memory"))
    return errs


def _container_errors(ctr: Obj, path: str) -> list[str]:
    """validateContainerCommon (name, image, resources) plus the pod-only image whitespace rule."""
    name, image = ctr.get("name") or "", ctr.get("image") or ""
    errs = [_required(f"{path}.name")] if not name else [_invalid(f"{path}.name", name, m)
                                                          for m in _dns1123_label(name)]
    if not image:
        errs.append(_required(f"{path}.image"))
    elif image != image.strip():
        errs.append(_invalid(f"{path}.image", image, "must not have leading or trailing whitespace"))
    return errs + _resources_errors(ctr.get("resources"), f"{path}.resources")


def _containers_errors(spec: Obj) -> list[str]:
    """At least one container; names unique across containers and init containers."""
    containers, inits = spec.get("containers") or [], spec.get("initContainers") or []
    errs = [] if containers else [_required("spec.containers")]
    seen: set[str] = set()
    for i, ctr in enumerate(containers):
        errs += _container_errors(ctr, f"spec.containers[{i}]")
        if ctr.get("name", "") in seen:
            errs.append(_duplicate(f"spec.containers[{i}].name", ctr.get("name", "")))
        seen.add(ctr.get("name", ""))
    seen = {c.get("name", "") for c in containers}
    for i, ctr in enumerate(inits):
        errs += _container_errors(ctr, f"spec.initContainers[{i}]")
        if ctr.get("name", "") in seen:
            errs.append(_duplicate(f"spec.initContainers[{i}].name", ctr.get("name", "")))
        elif ctr.get("name"):
            seen.add(ctr["name"])
    return errs


def _scheduling_gate_errors(gates: Any) -> list[str]:
    """validateSchedulingGates: qualified names, no duplicates (errors at ``spec.schedulingGates[i]``)."""
    errs, seen = [], set()
    for i, gate in enumerate(gates or []):
        name = (gate or {}).get("name") or ""
        errs += [_invalid(f"spec.schedulingGates[{i}]", name, m) for m in _qualified_name(name)]
        if name in seen:
            errs.append(_duplicate(f"spec.schedulingGates[{i}]", name))
        seen.add(name)
    return errs


def _toleration_errors(tolerations: Any, path: str = "spec.tolerations") -> list[str]:
    """ValidateTolerations."""
    errs: list[str] = []
    for i, tol in enumerate(tolerations or []):
        at, key, op = f"{path}[{i}]", tol.get("key") or "", tol.get("operator") or ""
        value, effect = tol.get("value") or "", tol.get("effect") or ""
        if key:
            errs += [_invalid(f"{at}.key", key, m) for m in _qualified_name(key)]
        if not key and op != "Exists":
            errs.append(_invalid(f"{at}.operator", op, "operator must be Exists when `key` is empty, which means "
                                                       '"match all values and all keys"'))
        if tol.get("tolerationSeconds") is not None and effect != "NoExecute":
            errs.append(_invalid(f"{at}.effect", effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"))
        if op in ("Equal", ""):
            msgs = _label_value(value)
            errs += [_invalid(f"{at}.operator", value, ";".join(msgs))] if msgs else []
        elif op == "Exists" and value:
            errs.append(_invalid(f"{at}.operator", value, "value must be empty when `operator` is 'Exists'"))
        elif op != "Exists":
            errs.append(_not_supported(f"{at}.operator", op, ["Equal", "Exists"]))
        if effect and effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            errs.append(_not_supported(f"{at}.effect", effect, ["NoSchedule", "PreferNoSchedule", "NoExecute"]))
    return errs


def _requirement_errors(req: Obj, path: str) -> list[str]:
    """ValidateNodeSelectorRequirement (matchExpressions)."""
    op, values, errs = req.get("operator") or "", req.get("values") or [], []
    if op in ("In", "NotIn") and not values:
        errs.append(_required(f"{path}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
    elif op in ("Exists", "DoesNotExist") and values:
        errs.append(_forbidden(f"{path}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
    elif op in ("Gt", "Lt") and len(values) != 1:
        errs.append(_required(f"{path}.values", "must be specified single value when `operator` is 'Lt' or 'Gt'"))
    elif op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
        errs.append(_invalid(f"{path}.operator", op, "not a valid selector operator"))
    return errs + [_invalid(f"{path}.key", req.get("key") or "", m) for m in _qualified_name(req.get("key") or "")]


def _field_requirement_errors(req: Obj, path: str) -> list[str]:
    """ValidateNodeFieldSelectorRequirement (matchFields): only metadata.name, In/NotIn with one value."""
    op, values, errs = req.get("operator") or "", req.get("values") or [], []
    if op not in ("In", "NotIn"):
        errs.append(_invalid(f"{path}.operator", op, "not a valid selector operator"))
    elif len(values) != 1:
        errs.append(_required(f"{path}.values",
                              "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"))
    if req.get("key") != "metadata.name":
        return errs + [_invalid(f"{path}.key", req.get("key") or "", "not a valid field selector key")]
    return errs + [_invalid(f"{path}.values[{i}]", v, m) for i, v in enumerate(values) for m in _dns1123_subdomain(v)]


def _term_errors(term: Obj, path: str) -> list[str]:
    errs = [e for j, r in enumerate(term.get("matchExpressions") or [])
            for e in _requirement_errors(r, f"{path}.matchExpressions[{j}]")]
    return errs + [e for j, r in enumerate(term.get("matchFields") or [])
                   for e in _field_requirement_errors(r, f"{path}.matchFields[{j}]")]


def _node_affinity_errors(spec: Obj) -> list[str]:
    """validateNodeAffinity: required terms (at least one) and weighted preferred terms."""
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    path, errs = "spec.affinity.nodeAffinity", []
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is not None:
        terms = required.get("nodeSelectorTerms") or []
        at = f"{path}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        errs += [_required(at, "must have at least one node selector term")] if not terms else [
            e for i, t in enumerate(terms) for e in _term_errors(t or {}, f"{at}[{i}]")]
    for i, pref in enumerate(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
        at, weight = f"{path}.preferredDuringSchedulingIgnoredDuringExecution[{i}]", pref.get("weight") or 0
        if not 0 < weight <= 100:
            errs.append(_invalid(f"{at}.weight", weight, "must be in the range 1-100"))
        errs += _term_errors(pref.get("preference") or {}, f"{at}.preference")
    return errs


_NAME_FIELDS = {  # spec field -> its name rule
    "nodeName": _dns1123_subdomain, "serviceAccountName": _dns1123_subdomain,
    "priorityClassName": _dns1123_subdomain, "hostname": _dns1123_label, "subdomain": _dns1123_label,
}


def _pod_spec_errors(spec: Obj) -> list[str]:
    """The part of ValidatePodSpec this emulator ports. spec.schedulerName is deliberately absent: upstream
    ValidatePodSpec does not validate it, so any string is accepted."""
    errs = _containers_errors(spec)
    errs += _labels_errors(spec.get("nodeSelector"), "spec.nodeSelector")
    errs += _node_affinity_errors(spec)
    errs += _scheduling_gate_errors(spec.get("schedulingGates"))
    errs += _toleration_errors(spec.get("tolerations"))
    for key, check in _NAME_FIELDS.items():
        if spec.get(key):
            errs += [_invalid(f"spec.{key}", spec[key], m) for m in check(spec[key])]
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and not 1 <= deadline <= _MAX_INT32:
        errs.append(_invalid("spec.activeDeadlineSeconds", deadline, f"must be between 1 and {_MAX_INT32}, inclusive"))
    return errs


def validate_pod_create(pod: Obj) -> list[str]:
    """ValidatePodCreate: metadata, spec, and the create-only rules (no ephemeral containers; no nodeName
    while scheduling gates remain — a gated pod must wait for its gates, then be bound). Empty list: valid."""
    spec = pod.get("spec") or {}
    errs = validate_object_meta(pod, True) + _pod_spec_errors(spec)
    if spec.get("ephemeralContainers"):
        errs.append(_forbidden("spec.ephemeralContainers", "cannot be set on create"))
    if spec.get("nodeName") and spec.get("schedulingGates"):
        errs.append(_forbidden("spec.nodeName", "cannot be set until all schedulingGates have been cleared"))
    return _unique(errs)


# --- pod update (ValidatePodUpdate) ------------------------------------------------------------------------

_UPDATABLE = ("pod updates may not change fields other than `spec.containers[*].image`,"
              "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
              "`spec.tolerations` (only additions to existing tolerations),"
              "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)")
_MAP_FIELDS = frozenset({"nodeSelector", "limits", "requests", "overhead", "matchLabels", "volumeAttributes"})
_QUANTITY_MAPS = frozenset({"limits", "requests", "overhead"})


def _semantic(value: Any, key: str = "") -> Any:
    """A form where apiequality.Semantic.DeepEqual is ``==``: nulls, empty lists and empty maps are absent,
    and quantities compare by value ("1" == "1000m")."""
    if isinstance(value, dict):
        if key in _QUANTITY_MAPS:
            return {k: (q.value if (q := _try_quantity(v)) else v) for k, v in value.items() if v is not None}
        pairs = ((k, _semantic(v, k)) for k, v in value.items())
        return {k: v for k, v in pairs if v is not None and v != [] and not (v == {} and k in _MAP_FIELDS)}
    if isinstance(value, list):
        return [_semantic(v) for v in value]
    return value


def _changes(old: Any, new: Any, path: str) -> list[str]:
    """Where two semantic forms differ, for the Forbidden message (upstream prints a cmp.Diff)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [c for k in dict.fromkeys([*old, *new]) for c in _changes(old.get(k), new.get(k), f"{path}.{k}")]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [c for i, (o, n) in enumerate(zip(old, new, strict=True)) for c in _changes(o, n, f"{path}[{i}]")]
    return [] if old == new else [f"  {path}: {_value(old)[:120]} -> {_value(new)[:120]}"]


def _container_update_errors(new: list[Obj], old: list[Obj], path: str) -> tuple[list[str], bool]:
    """ValidateContainerUpdates: same containers (else stop), images non-empty and untrimmed."""
    if len(new) != len(old):
        return [_forbidden(path, "pod updates may not add or remove containers")], True
    errs: list[str] = []
    for i, ctr in enumerate(new):
        image = ctr.get("image") or ""
        if not image:
            errs.append(_required(f"{path}[{i}].image"))
        if image != image.strip():
            errs.append(_invalid(f"{path}[{i}].image", image, "must not have leading or trailing whitespace"))
    return errs, False


def _deadline_update_errors(new: Any, old: Any) -> tuple[list[str], bool]:
    """activeDeadlineSeconds may be set, or lowered; never raised or unset."""
    path = "spec.activeDeadlineSeconds"
    if new is None:
        return ([_invalid(path, None, "must not update from a positive integer to nil value")] if old is not None
                else []), False
    if not 0 <= new <= _MAX_INT32:
        return [_invalid(path, new, f"must be between 0 and {_MAX_INT32}, inclusive")], True
    if old is not None and old < new:
        return [_invalid(path, new, "must be less than or equal to previous value")], True
    return [], False


def _toleration_key(tol: Obj) -> dict[str, Any]:
    return {k: v for k, v in tol.items() if k != "tolerationSeconds" and v not in (None, "")}


def _toleration_update_errors(new: list[Obj], old: list[Obj]) -> list[str]:
    """validateOnlyAddedTolerations: every old toleration kept (its tolerationSeconds may change)."""
    kept = [_toleration_key(t) for t in new]
    if any(_toleration_key(t) not in kept for t in old):
        return [_forbidden("spec.tolerations", "existing toleration can not be modified except its tolerationSeconds")]
    return _toleration_errors(new)


def _gate_update_errors(new: list[Obj], old: list[Obj]) -> list[str]:
    """validateOnlyDeletedSchedulingGates: gates can only be removed, never added."""
    old_names = {g.get("name") for g in old}
    added = {g.get("name"): i for i, g in enumerate(new) if g.get("name") not in old_names}
    return [_forbidden(f"spec.schedulingGates[{i}].name", f"only deletion is allowed, but found new scheduling gate "
                                                          f"'{name}'") for name, i in added.items()]


def _node_selector_update_errors(new: Any, old: Any) -> list[str]:
    """validateNodeSelectorMutation (gated pods): keys may be added; none changed or removed."""
    new, old = new or {}, old or {}
    if any(new.get(k) != v for k, v in old.items()):
        return [_invalid("spec.nodeSelector", new, "only additions to spec.nodeSelector are allowed "
                                                   "(no mutations or deletions)")]
    return []


def _term_only_adds(new: Obj, old: Obj) -> bool:
    """validateNodeSelectorTermHasOnlyAdditions: old requirements kept in order, new ones appended.
    An empty old term must stay empty (upstream rule)."""
    old_exprs, old_fields = _semantic(old.get("matchExpressions") or []), _semantic(old.get("matchFields") or [])
    new_exprs, new_fields = _semantic(new.get("matchExpressions") or []), _semantic(new.get("matchFields") or [])
    if not old_exprs and not old_fields and (new_exprs or new_fields):
        return False
    return new_exprs[:len(old_exprs)] == old_exprs and new_fields[:len(old_fields)] == old_fields


def _node_affinity_update_errors(new: Any, old: Any) -> list[str]:
    """validateNodeAffinityMutation (gated pods): required terms may only be narrowed; preferred terms are free."""
    old_required = (old or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if old_required is None:
        return []  # nothing required before: anything may be set
    old_terms = old_required.get("nodeSelectorTerms") or []
    new_terms = ((new or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    if old_terms and len(old_terms) != len(new_terms):
        return [_invalid(path, new_terms, "no additions/deletions to non-empty NodeSelectorTerms list are allowed")]
    return [_invalid(f"{path}[{i}]", new_terms[i], "only additions are allowed (no mutations or deletions)")
            for i, term in enumerate(old_terms) if not _term_only_adds(new_terms[i] or {}, term or {})]


def _put(obj: Obj, key: str, value: Any) -> None:
    if value is None:
        obj.pop(key, None)
    else:
        obj[key] = copy.deepcopy(value)


def _munge_gated(munged: Obj, old: Obj) -> list[str]:
    """While the old pod is gated: check nodeSelector and node affinity changes, then take the old values."""
    errs: list[str] = []
    if _semantic(munged.get("nodeSelector"), "nodeSelector") != _semantic(old.get("nodeSelector"), "nodeSelector"):
        errs += _node_selector_update_errors(munged.get("nodeSelector"), old.get("nodeSelector"))
        _put(munged, "nodeSelector", old.get("nodeSelector"))
    old_affinity, affinity = old.get("affinity"), munged.get("affinity")
    old_na, new_na = (old_affinity or {}).get("nodeAffinity"), (affinity or {}).get("nodeAffinity")
    if _semantic(new_na) == _semantic(old_na):
        return errs
    errs += _node_affinity_update_errors(new_na, old_na)
    if affinity is None:
        _put(munged, "affinity", None if old_na is None else {"nodeAffinity": old_na})
    elif old_affinity is None and affinity.get("podAffinity") is None and affinity.get("podAntiAffinity") is None:
        munged.pop("affinity")
    else:
        _put(affinity, "nodeAffinity", old_na)
    return errs


def _munge(new: Obj, old: Obj) -> Obj:
    """The new spec with every field an update may change replaced by its old value."""
    munged = copy.deepcopy(new)
    for key in ("containers", "initContainers"):
        for ctr, old_ctr in zip(munged.get(key) or [], old.get(key) or [], strict=True):
            _put(ctr, "image", old_ctr.get("image"))
    for key in ("activeDeadlineSeconds", "schedulingGates", "tolerations"):
        _put(munged, key, old.get(key))
    old_grace = old.get("terminationGracePeriodSeconds")
    if old_grace is not None and old_grace < 0 and munged.get("terminationGracePeriodSeconds") == 1:
        munged["terminationGracePeriodSeconds"] = old_grace
    return munged


def _spec_update_errors(new: Obj, old: Obj) -> list[str]:
    """ValidatePodUpdate's spec rules, in upstream order (including where it stops early)."""
    errs: list[str] = []
    for key in ("containers", "initContainers"):
        found, stop = _container_update_errors(new.get(key) or [], old.get(key) or [], f"spec.{key}")
        errs += found
        if stop:
            return errs
    found, stop = _deadline_update_errors(new.get("activeDeadlineSeconds"), old.get("activeDeadlineSeconds"))
    errs += found
    if stop:
        return errs
    errs += _toleration_update_errors(new.get("tolerations") or [], old.get("tolerations") or [])
    errs += _gate_update_errors(new.get("schedulingGates") or [], old.get("schedulingGates") or [])
    if _semantic(new) == _semantic(old):
        return errs
    munged = _munge(new, old)
    if old.get("schedulingGates"):  # gated is judged on the stored pod: the last gate may go in the same update
        errs += _munge_gated(munged, old)
    if _semantic(munged) != _semantic(old):
        errs.append(_forbidden("spec", "\n".join([_UPDATABLE, *_changes(_semantic(old), _semantic(munged), "spec")])))
    return errs


def validate_pod_update(old: Obj, new: Obj) -> list[str]:
    """ValidatePodUpdate: metadata (create rules and identity), then a spec that is immutable except images,
    activeDeadlineSeconds (set or lowered), added tolerations, removed scheduling gates and — only while the
    stored pod still has gates — added nodeSelector keys and narrowed required node affinity. nodeName never
    changes here: binding is the pods/binding subresource. Empty list: valid."""
    errs = _object_meta_update_errors(new.get("metadata") or {}, old.get("metadata") or {})
    errs += validate_object_meta(new, True)
    errs += _pod_spec_errors(new.get("spec") or {})
    return _unique(errs + _spec_update_errors(new.get("spec") or {}, old.get("spec") or {}))


# --- binding (pods/binding subresource) --------------------------------------------------------------------


def validate_binding(pod: Obj) -> tuple[int, str] | None:
    """Whether POST pods/{name}/binding may bind the stored ``pod``; ``(status, message)`` if not.

    Upstream (pkg/registry/core/pod/storage/storage.go) checks inside the storage update, in this order:
    being deleted, already assigned (spec.nodeName set), then "Reject binding to a scheduling un-ready Pod"
    (non-empty spec.schedulingGates). Those are plain errors, which assignPod wraps with
    errors.NewConflict(pods/binding): HTTP 409 Conflict, as upstream's TestEtcdCreateWithSchedulingGates
    expects: ``Operation cannot be fulfilled on pods/binding "foo": pod foo has non-empty .spec.schedulingGates``.
    """
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    name = meta.get("name") or ""
    if meta.get("deletionTimestamp"):
        reason = f"pod {name} is being deleted, cannot be assigned to a host"
    elif spec.get("nodeName"):
        reason = f"pod {name} is already assigned to node {json.dumps(spec['nodeName'])}"
    elif spec.get("schedulingGates"):
        reason = f"pod {name} has non-empty .spec.schedulingGates"
    else:
        return None
    return 409, f'Operation cannot be fulfilled on pods/binding "{name}": {reason}'

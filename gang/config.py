"""Configuration: one YAML file plus KUBENEXUS_* environment overrides, validated at start.

Every setting has one row in ``_FIELDS`` (YAML path, parser, default); the environment
variable for ``ownerCache.ttlSeconds`` is ``KUBENEXUS_OWNER_CACHE_TTL_SECONDS``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from gang.names import DNS1123_LABEL, is_dns_name, is_ip

KEEP_SCHEDULER = "keep"
AUTO_INJECT_MODES = ("namespaces", "all")
# self-managed: the webhook runs ``kubenexus certs ensure`` itself; external: cert-manager (or anyone else)
# writes the certificate directory and the caBundles, the webhook only reloads the files.
CERTS_MODES = ("self-managed", "external")
# Never touched, whatever the configuration says: a gate on a system pod can take the cluster down.
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")
# The largest timeoutSeconds a webhook configuration may have: an admission deadline must end before it.
MAX_WEBHOOK_TIMEOUT_SECONDS = 30


class ConfigError(ValueError):
    """The configuration is invalid; the message names the setting."""


@dataclass(frozen=True)
class Config:
    namespace: str = "kubenexus-system"
    scheduler_name: str = "kubenexus-scheduler"
    auto_inject: str = "namespaces"
    excluded_namespaces: tuple[str, ...] = ()
    cosched_annotations: bool = True
    gate_removers: tuple[str, ...] = ()
    native_gang_schedulers: tuple[str, ...] = ("volcano", "yunikorn", "scheduler-plugins-scheduler")
    owner_cache_ttl_seconds: float = 30.0
    owner_cache_max_entries: int = 10000
    owner_cache_max_bytes: int = 32 * 2**20
    api_timeout_seconds: float = 2.0
    admission_deadline_seconds: float = 3.0
    kubeconfig: str | None = None
    port: int = 8443
    cert_dir: str = "/etc/kubenexus/certs"
    workers: int = 2
    threads: int = 8
    handshake_timeout_seconds: float = 5.0
    read_timeout_seconds: float = 5.0
    keep_alive_seconds: int = 75
    log_level: str = "INFO"
    # --- gate controller ---
    pin_members: bool = True
    starvation_seconds: float = 300.0
    schedule_timeout_seconds: float = 1800.0
    replacement_grace_seconds: float = 120.0
    bind_timeout_seconds: float = 30.0
    queued_pod_seconds: float = 10.0
    preemption: bool = True  # a waiting gang takes the room of lower-priority work (controller/preemption.py)
    controller_port: int = 8080
    # --- serving certificate (certs/) ---
    certs_mode: str = "self-managed"
    certs_secret: str = "kubenexus-webhook-tls"
    certs_service: str = "kubenexus-webhook"
    certs_webhook_configuration: str = "kubenexus-gang-admission"
    certs_extra_sans: tuple[str, ...] = ()
    certs_validity_days: float = 365.0
    certs_ca_validity_days: float = 3650.0
    certs_renew_before_days: float = 30.0
    certs_overlap_hours: float = 1.0
    certs_check_interval_seconds: float = 300.0

    def is_excluded(self, namespace: str) -> bool:
        """Never touched: the system namespaces, the product's own, and the configured ones."""
        return namespace in SYSTEM_NAMESPACES or namespace == self.namespace or namespace in self.excluded_namespaces

    @property
    def controller_identity(self) -> str:
        """The gate controller's ServiceAccount (deploy/base): after admission, the only writer of the product's
        state on pods (keys.PRODUCT_STATE), whoever else ``gateRemovers`` lets remove the gate."""
        return f"system:serviceaccount:{self.namespace}:kubenexus-controller"

    def may_remove_gate(self, username: str) -> bool:
        return username in (self.gate_removers or (self.controller_identity,))


def _str(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{name}: expected a non-empty string, got {value!r}")
    return value


def _bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(f"{name}: expected true or false, got {value!r}")


def _positive(kind: type) -> Callable[[Any, str], Any]:
    def parse(value: Any, name: str) -> Any:
        try:
            number = kind(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"{name}: expected a positive number, got {value!r}") from None
        # not number > 0 also rejects NaN; an integer setting must not silently truncate 1.5 to 1
        if isinstance(value, bool) or not number > 0 or (isinstance(value, float) and number != value):
            raise ConfigError(f"{name}: expected a positive number, got {value!r}")
        return number

    return parse


def _bytes(value: Any, name: str) -> int:
    """A size in bytes: an integer or a quantity such as ``32Mi``."""
    from gang.quantity import QuantityError, parse_quantity

    try:
        number = parse_quantity(value)
    except (QuantityError, TypeError):
        raise ConfigError(f"{name}: expected a size in bytes (e.g. 33554432 or 32Mi), got {value!r}") from None
    if number < 1 or number != int(number):
        raise ConfigError(f"{name}: expected a whole positive number of bytes, got {value!r}")
    return int(number)


def _names(value: Any, name: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{name}: expected a list of names, got {value!r}")
    return tuple(value)


def _choice(choices: tuple[str, ...]) -> Callable[[Any, str], str]:
    def parse(value: Any, name: str) -> str:
        if value not in choices:
            raise ConfigError(f"{name}: expected one of {', '.join(choices)}, got {value!r}")
        return str(value)

    return parse


def _namespace(value: Any, name: str) -> str:
    if not isinstance(value, str) or not DNS1123_LABEL.fullmatch(value):
        raise ConfigError(f"{name}: expected a namespace name (DNS label), got {value!r}")
    return value


def _object_name(value: Any, name: str) -> str:
    if not isinstance(value, str) or not DNS1123_LABEL.fullmatch(value):
        raise ConfigError(f"{name}: expected an object name (DNS-1123 label), got {value!r}")
    return value


def _cross_check(config: Config) -> Config:
    """Relations between settings that no single field can check."""
    if not config.certs_renew_before_days < config.certs_validity_days <= config.certs_ca_validity_days:
        raise ConfigError("certs: expected renewBeforeDays < validityDays <= caValidityDays, got "
                          f"{config.certs_renew_before_days} / {config.certs_validity_days} / "
                          f"{config.certs_ca_validity_days}")
    if not 2 * config.certs_overlap_hours < 24 * config.certs_renew_before_days:
        raise ConfigError("certs.overlapHours: a CA rotation takes two overlap windows and must finish before the "
                          f"old CA expires: expected 2 x {config.certs_overlap_hours}h < renewBeforeDays "
                          f"({config.certs_renew_before_days}d)")
    if not 2 * config.certs_check_interval_seconds < 3600 * config.certs_overlap_hours:
        raise ConfigError("certs.checkIntervalSeconds: every replica must see each rotation step within the overlap "
                          f"window: expected 2 x {config.certs_check_interval_seconds}s < overlapHours "
                          f"({config.certs_overlap_hours}h)")
    if not config.admission_deadline_seconds < MAX_WEBHOOK_TIMEOUT_SECONDS:
        raise ConfigError("admissionDeadlineSeconds: must be well inside the webhook configurations' timeoutSeconds "
                          f"(at most {MAX_WEBHOOK_TIMEOUT_SECONDS}), got {config.admission_deadline_seconds}")
    for san in config.certs_extra_sans:
        if not is_dns_name(san) and not is_ip(san):
            raise ConfigError(f"certs.extraSANs: {san!r} is neither a DNS name nor an IP address")
    return config


# (YAML path, dataclass field, parser)
_FIELDS: tuple[tuple[str, str, Callable[[Any, str], Any]], ...] = (
    ("namespace", "namespace", _namespace),
    ("schedulerName", "scheduler_name", _str),
    ("autoInject", "auto_inject", _choice(AUTO_INJECT_MODES)),
    ("excludedNamespaces", "excluded_namespaces", _names),
    ("coschedulingAnnotations", "cosched_annotations", _bool),
    ("gateRemovers", "gate_removers", _names),
    ("nativeGangSchedulers", "native_gang_schedulers", _names),
    ("ownerCache.ttlSeconds", "owner_cache_ttl_seconds", _positive(float)),
    ("ownerCache.maxEntries", "owner_cache_max_entries", _positive(int)),
    ("ownerCache.maxBytes", "owner_cache_max_bytes", _bytes),
    ("apiTimeoutSeconds", "api_timeout_seconds", _positive(float)),
    ("admissionDeadlineSeconds", "admission_deadline_seconds", _positive(float)),
    ("kubeconfig", "kubeconfig", _str),
    ("server.port", "port", _positive(int)),
    ("server.certDir", "cert_dir", _str),
    ("server.workers", "workers", _positive(int)),
    ("server.threads", "threads", _positive(int)),
    ("server.handshakeTimeoutSeconds", "handshake_timeout_seconds", _positive(float)),
    ("server.readTimeoutSeconds", "read_timeout_seconds", _positive(float)),
    ("server.keepAliveSeconds", "keep_alive_seconds", _positive(int)),
    ("logLevel", "log_level", _choice(("DEBUG", "INFO", "WARNING", "ERROR"))),
    ("controller.pinMembers", "pin_members", _bool),
    ("controller.starvationSeconds", "starvation_seconds", _positive(float)),
    ("controller.scheduleTimeoutSeconds", "schedule_timeout_seconds", _positive(float)),
    ("controller.replacementGraceSeconds", "replacement_grace_seconds", _positive(float)),
    ("controller.bindTimeoutSeconds", "bind_timeout_seconds", _positive(float)),
    ("controller.queuedPodSeconds", "queued_pod_seconds", _positive(float)),
    ("controller.preemption", "preemption", _bool),
    ("controller.port", "controller_port", _positive(int)),
    ("certs.mode", "certs_mode", _choice(CERTS_MODES)),
    ("certs.secretName", "certs_secret", _object_name),
    ("certs.serviceName", "certs_service", _object_name),
    ("certs.webhookConfigurationName", "certs_webhook_configuration", _object_name),
    ("certs.extraSANs", "certs_extra_sans", _names),
    ("certs.validityDays", "certs_validity_days", _positive(float)),
    ("certs.caValidityDays", "certs_ca_validity_days", _positive(float)),
    ("certs.renewBeforeDays", "certs_renew_before_days", _positive(float)),
    ("certs.overlapHours", "certs_overlap_hours", _positive(float)),
    ("certs.checkIntervalSeconds", "certs_check_interval_seconds", _positive(float)),
)


def _env_name(path: str) -> str:
    return "KUBENEXUS_" + re.sub(r"(?<=[a-z])(?=[A-Z])|\.", "_", path).upper()


def _lookup(data: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _known_paths(data: Mapping[str, Any], prefix: str = "") -> list[str]:
    paths = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and any(p.startswith(path + ".") for p, _, _ in _FIELDS):
            paths.extend(_known_paths(value, path + "."))
        else:
            paths.append(path)
    return paths


def load_config(path: str | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Read the YAML file (if any), apply environment overrides, validate everything."""
    env = os.environ if env is None else env
    if not path:
        return _config({}, env)
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    return config_from_text(text, f"config file {path}", env)


def config_from_text(text: str, source: str, env: Mapping[str, str] | None = None) -> Config:
    """The configuration in ``text`` (YAML, as in the file or the installed ConfigMap), named ``source`` in errors;
    no environment overrides unless ``env`` is given."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source} is not valid YAML: {exc}") from None
    if data is None:  # empty
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    return _config(data, env or {})


def _config(data: Mapping[str, Any], env: Mapping[str, str]) -> Config:
    known = {p for p, _, _ in _FIELDS}
    unknown = [p for p in _known_paths(data) if p not in known]
    if unknown:
        raise ConfigError(f"unknown setting(s): {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    for yaml_path, attr, parse in _FIELDS:
        env_name = _env_name(yaml_path)
        if env_name in env:
            values[attr] = parse(env[env_name], env_name)
            continue
        found, value = _lookup(data, yaml_path)
        if found:
            values[attr] = parse(value, yaml_path)
    return _cross_check(Config(**values))


def config_or_exit(path: str | None, prog: str = "kubenexus") -> Config:
    """``load_config`` for commands: an invalid configuration ends the command with its message and exit code 2."""
    try:
        return load_config(path)
    except ConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None

"""gang.config.load_config: defaults, YAML values, KUBENEXUS_* overrides and validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from gang.config import SYSTEM_NAMESPACES, Config, ConfigError, load_config

pytestmark = pytest.mark.unit

FULL_FILE = """\
namespace: gang-ops
schedulerName: my-scheduler
autoInject: all
excludedNamespaces: [team-a, team-b]
coschedulingAnnotations: false
gateRemovers: [alice]
nativeGangSchedulers: [volcano]
ownerCache:
  ttlSeconds: 12.5
  maxEntries: 50
  maxBytes: 16Mi
apiTimeoutSeconds: 0.5
admissionDeadlineSeconds: 2.5
kubeconfig: /etc/kube/config
server:
  port: 9443
  certDir: /certs
  workers: 3
  threads: 4
  handshakeTimeoutSeconds: 2
  readTimeoutSeconds: 1.5
  keepAliveSeconds: 20
"""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


def test_defaults_without_file_or_environment():
    config = load_config(None, {})
    assert config == Config()
    assert config.namespace == "kubenexus-system"
    assert config.scheduler_name == "kubenexus-scheduler"
    assert config.auto_inject == "namespaces"
    assert config.excluded_namespaces == ()
    assert config.owner_cache_ttl_seconds == 30.0
    assert config.owner_cache_max_entries == 10000
    assert config.owner_cache_max_bytes == 32 * 1024 * 1024
    assert config.admission_deadline_seconds == 3.0
    assert config.handshake_timeout_seconds == 5.0 and config.read_timeout_seconds == 5.0
    assert config.kubeconfig is None
    assert config.port == 8443
    assert config.keep_alive_seconds == 75
    assert config.bind_timeout_seconds == 30.0 and config.queued_pod_seconds == 10.0


def test_empty_file_gives_defaults(tmp_path):
    assert load_config(write(tmp_path, ""), {}) == Config()


def test_every_setting_is_read_from_the_file(tmp_path):
    config = load_config(write(tmp_path, FULL_FILE), {})
    assert config == Config(
        namespace="gang-ops",
        scheduler_name="my-scheduler",
        auto_inject="all",
        excluded_namespaces=("team-a", "team-b"),
        cosched_annotations=False,
        gate_removers=("alice",),
        native_gang_schedulers=("volcano",),
        owner_cache_ttl_seconds=12.5,
        owner_cache_max_entries=50,
        owner_cache_max_bytes=16 * 1024 * 1024,
        api_timeout_seconds=0.5,
        admission_deadline_seconds=2.5,
        kubeconfig="/etc/kube/config",
        port=9443,
        cert_dir="/certs",
        workers=3,
        threads=4,
        handshake_timeout_seconds=2.0,
        read_timeout_seconds=1.5,
        keep_alive_seconds=20,
    )


def test_environment_wins_over_the_file(tmp_path):
    env = {
        "KUBENEXUS_SCHEDULER_NAME": "env-scheduler",
        "KUBENEXUS_AUTO_INJECT": "namespaces",
        "KUBENEXUS_OWNER_CACHE_TTL_SECONDS": "5",
        "KUBENEXUS_OWNER_CACHE_MAX_ENTRIES": "7",
        "KUBENEXUS_OWNER_CACHE_MAX_BYTES": "1048576",
        "KUBENEXUS_ADMISSION_DEADLINE_SECONDS": "4",
        "KUBENEXUS_SERVER_READ_TIMEOUT_SECONDS": "0.5",
        "KUBENEXUS_EXCLUDED_NAMESPACES": " ns-1, ns-2 ,,ns-3",
        "KUBENEXUS_COSCHEDULING_ANNOTATIONS": "TRUE",
        "KUBENEXUS_SERVER_PORT": "10443",
        "KUBENEXUS_NAMESPACE": "env-ns",
    }
    config = load_config(write(tmp_path, FULL_FILE), env)
    assert config.scheduler_name == "env-scheduler"
    assert config.auto_inject == "namespaces"
    assert config.owner_cache_ttl_seconds == 5.0
    assert config.owner_cache_max_entries == 7
    assert config.owner_cache_max_bytes == 1048576
    assert config.admission_deadline_seconds == 4.0
    assert config.read_timeout_seconds == 0.5
    assert config.handshake_timeout_seconds == 2.0
    assert config.excluded_namespaces == ("ns-1", "ns-2", "ns-3")
    assert config.cosched_annotations is True
    assert config.port == 10443
    assert config.namespace == "env-ns"
    # Settings without an environment variable keep the file's value.
    assert config.cert_dir == "/certs"
    assert config.gate_removers == ("alice",)


def test_unrelated_environment_variables_are_ignored():
    assert load_config(None, {"HOME": "/root", "KUBENEXUS": "x"}) == Config()


@pytest.mark.parametrize(
    ("text", "setting"),
    [
        ("bogus: 1", "bogus"),
        ("ownerCache:\n  ttl: 5", "ownerCache.ttl"),
        ("server:\n  host: x", "server.host"),
        ("ownerCache: 5", "ownerCache"),
        ("namespace: Kube_System", "namespace"),
        ("namespace: ''", "namespace"),
        ("namespace: 5", "namespace"),
        (f"namespace: {'a' * 64}", "namespace"),
        ("namespace: -ops", "namespace"),
        ("schedulerName: 5", "schedulerName"),
        ("schedulerName: ''", "schedulerName"),
        ("autoInject: some", "autoInject"),
        ("autoInject: true", "autoInject"),
        ("excludedNamespaces: [a, 1]", "excludedNamespaces"),
        ("excludedNamespaces: [a, '']", "excludedNamespaces"),
        ("excludedNamespaces: {a: 1}", "excludedNamespaces"),
        ("coschedulingAnnotations: maybe", "coschedulingAnnotations"),
        ("coschedulingAnnotations: 1", "coschedulingAnnotations"),
        ("gateRemovers: 5", "gateRemovers"),
        ("nativeGangSchedulers: [null]", "nativeGangSchedulers"),
        ("ownerCache:\n  ttlSeconds: -1", "ownerCache.ttlSeconds"),
        ("ownerCache:\n  ttlSeconds: 0", "ownerCache.ttlSeconds"),
        ("ownerCache:\n  ttlSeconds: soon", "ownerCache.ttlSeconds"),
        ("ownerCache:\n  ttlSeconds: .nan", "ownerCache.ttlSeconds"),
        ("ownerCache:\n  ttlSeconds: true", "ownerCache.ttlSeconds"),
        ("ownerCache:\n  maxEntries: 0", "ownerCache.maxEntries"),
        ("ownerCache:\n  maxEntries: 1.5", "ownerCache.maxEntries"),
        ("ownerCache:\n  maxEntries: [1]", "ownerCache.maxEntries"),
        ("ownerCache:\n  maxEntries: .inf", "ownerCache.maxEntries"),
        ("apiTimeoutSeconds: -0.5", "apiTimeoutSeconds"),
        ("ownerCache:\n  maxBytes: 0", "ownerCache.maxBytes"),
        ("ownerCache:\n  maxBytes: -1Mi", "ownerCache.maxBytes"),
        ("ownerCache:\n  maxBytes: 1.5", "ownerCache.maxBytes"),
        ("ownerCache:\n  maxBytes: 32MB", "ownerCache.maxBytes"),
        ("ownerCache:\n  maxBytes: true", "ownerCache.maxBytes"),
        ("ownerCache:\n  maxBytes: [1]", "ownerCache.maxBytes"),
        ("admissionDeadlineSeconds: 0", "admissionDeadlineSeconds"),
        ("admissionDeadlineSeconds: soon", "admissionDeadlineSeconds"),
        ("admissionDeadlineSeconds: 30", "admissionDeadlineSeconds"),  # never inside a webhook's timeoutSeconds
        ("server:\n  handshakeTimeoutSeconds: 0", "server.handshakeTimeoutSeconds"),
        ("server:\n  readTimeoutSeconds: -1", "server.readTimeoutSeconds"),
        ("server:\n  readTimeoutSeconds: .nan", "server.readTimeoutSeconds"),
        ("kubeconfig: 5", "kubeconfig"),
        ("server:\n  port: 0", "server.port"),
        ("server:\n  port: 8443.9", "server.port"),
        ("server:\n  port: '8443x'", "server.port"),
        ("server:\n  certDir: []", "server.certDir"),
        ("server:\n  workers: -1", "server.workers"),
        ("server:\n  threads: 0", "server.threads"),
        ("server:\n  keepAliveSeconds: 0", "server.keepAliveSeconds"),
        ("server:\n  keepAliveSeconds: 1.5", "server.keepAliveSeconds"),
        ("server:\n  keepAliveSeconds: soon", "server.keepAliveSeconds"),
        ("controller:\n  bindTimeoutSeconds: 0", "controller.bindTimeoutSeconds"),
        ("controller:\n  bindTimeoutSeconds: soon", "controller.bindTimeoutSeconds"),
        ("controller:\n  queuedPodSeconds: -1", "controller.queuedPodSeconds"),
        ("controller:\n  queuedPodSeconds: .nan", "controller.queuedPodSeconds"),
    ],
)
def test_invalid_file_value_names_the_setting(tmp_path, text, setting):
    with pytest.raises(ConfigError, match=rf"\b{setting}\b"):
        load_config(write(tmp_path, text), {})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("KUBENEXUS_AUTO_INJECT", "everything"),
        ("KUBENEXUS_AUTO_INJECT", "All"),
        ("KUBENEXUS_SCHEDULER_NAME", ""),
        ("KUBENEXUS_NAMESPACE", "Bad_Namespace"),
        ("KUBENEXUS_NAMESPACE", "ops\n"),  # a regex's $ matches before a trailing newline; the API's names do not
        ("KUBENEXUS_COSCHEDULING_ANNOTATIONS", "yes"),
        ("KUBENEXUS_OWNER_CACHE_TTL_SECONDS", "0"),
        ("KUBENEXUS_OWNER_CACHE_TTL_SECONDS", "-3"),
        ("KUBENEXUS_OWNER_CACHE_TTL_SECONDS", "abc"),
        ("KUBENEXUS_OWNER_CACHE_TTL_SECONDS", "nan"),
        ("KUBENEXUS_OWNER_CACHE_MAX_ENTRIES", "1.5"),
        ("KUBENEXUS_SERVER_PORT", "0"),
        ("KUBENEXUS_API_TIMEOUT_SECONDS", "-1"),
        ("KUBENEXUS_OWNER_CACHE_MAX_BYTES", "lots"),
        ("KUBENEXUS_ADMISSION_DEADLINE_SECONDS", "0"),
        ("KUBENEXUS_SERVER_HANDSHAKE_TIMEOUT_SECONDS", "x"),
        ("KUBENEXUS_CONTROLLER_BIND_TIMEOUT_SECONDS", "-5"),
        ("KUBENEXUS_CONTROLLER_QUEUED_POD_SECONDS", "never"),
    ],
)
def test_invalid_environment_value_names_the_variable(name, value):
    with pytest.raises(ConfigError, match=name):
        load_config(None, {name: value})


@pytest.mark.parametrize("text", ["- a\n- b\n", "42\n", "just text\n", "[]\n", "0\n", "false\n"])
def test_non_mapping_file_is_rejected(tmp_path, text):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(path, {})


def test_invalid_yaml_is_rejected(tmp_path):
    path = write(tmp_path, "schedulerName: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path, {})


def test_missing_file_is_rejected(tmp_path):
    path = str(tmp_path / "absent.yaml")
    with pytest.raises(ConfigError, match="cannot read config file .*absent.yaml"):
        load_config(path, {})


def test_is_excluded_defaults_and_own_namespace():
    config = Config()
    for namespace in SYSTEM_NAMESPACES:
        assert config.is_excluded(namespace)
    assert config.is_excluded("kubenexus-system")
    assert not config.is_excluded("default")
    assert not config.is_excluded("team-a")


def test_is_excluded_with_configured_list_still_excludes_own_namespace(tmp_path):
    config = load_config(write(tmp_path, "namespace: gang-ops\nexcludedNamespaces: [team-a]\n"), {})
    assert config.is_excluded("team-a")
    assert config.is_excluded("gang-ops")
    # The configured list adds to the system namespaces, which are always excluded.
    assert config.is_excluded("kube-system")
    assert not config.is_excluded("kubenexus-system")


def test_may_remove_gate_default_is_the_controller_service_account():
    config = Config()
    assert config.may_remove_gate("system:serviceaccount:kubenexus-system:kubenexus-controller")
    assert not config.may_remove_gate("system:serviceaccount:kubenexus-system:default")
    assert not config.may_remove_gate("system:serviceaccount:other:kubenexus-controller")
    assert not config.may_remove_gate("admin")


def test_may_remove_gate_follows_the_configured_namespace():
    config = load_config(None, {"KUBENEXUS_NAMESPACE": "gang-ops"})
    assert config.may_remove_gate("system:serviceaccount:gang-ops:kubenexus-controller")
    assert not config.may_remove_gate("system:serviceaccount:kubenexus-system:kubenexus-controller")


def test_may_remove_gate_configured_removers_replace_the_default(tmp_path):
    config = load_config(write(tmp_path, "gateRemovers: [alice, 'system:serviceaccount:x:gater']\n"), {})
    assert config.may_remove_gate("alice")
    assert config.may_remove_gate("system:serviceaccount:x:gater")
    assert not config.may_remove_gate("system:serviceaccount:kubenexus-system:kubenexus-controller")
    assert not config.may_remove_gate("bob")

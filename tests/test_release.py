"""``make release`` (tools/release.py): one manifest per variant, pinned to the one version, installed as
``kubectl apply --server-side -f`` installs it, upgraded over the previous release, and uninstalled as
docs/tasks/uninstall.md says.

The local cluster runs no Deployment pods: the components run here (``tests/support/deploy.py`` ``Installed``: the
webhook as a process, the controller as a thread, each with the installed ConfigMap's settings), and the webhook
configurations call the webhook by URL. The upgrade starts from the previous release (its tag, else its commit in
``tools/release.py`` ``RELEASES``), read from git: its manifests installed and its own webhook and controller run
(processes of its tree, ``FromTree``), then this version's manifests applied over them and this tree's components
started in their place, as a rollout replaces the pods.
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import re
import shlex
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from cluster.local import LocalCluster
from cluster.rbac import load_manifests
from kubenexus import cli
from tests.support.deploy import CONFIGURATION, NAMESPACE, Installed, Kubectl
from tests.support.gang_pods import JOB_NAME, TWO_POOLS, gated, running, torch_job, wait_pods
from tests.support.podgroups import podgroup
from tests.support.polling import wait_for
from tests.support.schemas import ERRORS, SCHEMA_VERSIONS, validate
from tools import release

ROOT = release.ROOT
IMAGE = "registry.example.com/kubenexus/kubenexus-gang-admission"
VERSION = release.version()
PART_OF = ("app.kubernetes.io/part-of", "kubenexus-gang-admission")
QUEUE_GROUP = "scheduling.kubenexus.io"
Obj = dict[str, object]


# --- one version ----------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_one_version_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    """pyproject.toml's version is what `kubenexus --version` says, what the image is labelled and what deploy/
    installs."""
    assert importlib.metadata.version("kubenexus-gang-admission") == VERSION
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out == f"kubenexus {VERSION}\n"
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.findall(r"^ARG VERSION=(\S+)$", dockerfile, re.MULTILINE) == [VERSION]
    assert 'org.opencontainers.image.version="${VERSION}"' in dockerfile
    assert 'test "$(/opt/kubenexus/bin/kubenexus --version)" = "kubenexus ${VERSION}"' in dockerfile
    base = yaml.safe_load((ROOT / "deploy/base/kustomization.yaml").read_text())
    assert base["images"] == [{"name": release.IMAGE, "newTag": VERSION}]


# --- the release files ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    written = release.release(out, IMAGE)
    assert sorted(p.name for p in written) == sorted(v.file for v in release.VARIANTS)
    return out


def objects(dist: Path, variant: release.Variant) -> list[Obj]:
    return load_manifests((dist / variant.file).read_text())


def key(obj: Obj) -> tuple[str, str, str]:
    meta = obj["metadata"]
    assert isinstance(meta, dict)
    return str(obj["kind"]), str(meta.get("namespace", "")), str(meta["name"])


@pytest.mark.e2e
@pytest.mark.parametrize("variant", release.VARIANTS, ids=lambda v: v.name or "base")
def test_each_variant_is_released_whole_and_pinned_to_the_version(dist: Path, variant: release.Variant) -> None:
    released = objects(dist, variant)
    assert sorted(map(key, released)) == sorted(map(key, load_manifests(release.kustomize(ROOT / variant.directory))))
    images = {c["image"] for o in released if o["kind"] == "Deployment"
              for c in o["spec"]["template"]["spec"]["containers"]}  # type: ignore[index]
    assert images == ({f"{IMAGE}:{VERSION}"} if variant.name != "monitoring" else set())
    for obj in released:
        labels = obj["metadata"].get("labels") or {}  # type: ignore[union-attr]
        assert labels.get("app.kubernetes.io/version") == VERSION and labels.get(PART_OF[0]) == PART_OF[1], key(obj)
    assert (dist / variant.file).read_text().startswith(f"# KubeNexus Gang Admission {VERSION}, {variant.directory}")


@pytest.mark.e2e
@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_every_released_object_validates_against_the_schemas(dist: Path, version: str) -> None:
    failures = []
    for variant in release.VARIANTS:
        for obj in objects(dist, variant):
            try:
                validate(obj, version)
            except ERRORS as exc:
                failures.append(f"{variant.file} {key(obj)}: {'.'.join(map(str, exc.path))}: {exc.message}")
    assert not failures, "\n".join(failures)


# --- install, upgrade, uninstall -------------------------------------------------------------------------------


@pytest.mark.e2e
def test_a_fresh_install_comes_up_ready(dist: Path, tmp_path: Path) -> None:
    with LocalCluster(nodes=TWO_POOLS[:2], workdir=str(tmp_path / "cluster")) as cluster:
        cluster.run_components(operators=False)
        installed = Installed(cluster, tmp_path)
        applied = installed.apply(dist / release.VARIANTS[0].file)
        assert applied.count("serverside-applied") == len(objects(dist, release.VARIANTS[0])), applied
        try:
            installed.start()
            code, out = installed.doctor()
            assert code == 0, out
            installed.apply(dist / release.VARIANTS[0].file)  # again: nothing changes, the caBundles stay
            code, out = installed.doctor()
            assert code == 0, out
        finally:
            installed.stop()


def git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, timeout=60)


def previous_version(tmp_path: Path) -> tuple[str, Path]:
    """The previous release and its whole tree (manifests and code), extracted from git: the newest release older
    than this version, by its tag or else its commit in ``RELEASES``."""
    if git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout: the previous release comes from the history")
    tags = git("tag", "--merged", "HEAD").stdout.decode().split()
    found = release.previous_release(VERSION, release.releases(tags))
    assert found is not None, f"no release older than {VERSION}: tools/release.py RELEASES"
    previous, commit = found
    if git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}").returncode != 0:
        pytest.skip(f"{previous}'s commit {commit} is not in this clone's history (shallow?): git fetch --unshallow")
    archive = git("archive", commit)
    assert archive.returncode == 0, archive.stderr.decode()
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tmp_path / "previous", filter="data")
    tree = tmp_path / "previous"
    assert release.version(tree) == previous, f"{commit} is {release.version(tree)}, not {previous}"
    return previous, tree


@pytest.mark.unit
def test_the_previous_release_is_the_newest_older_one_its_tag_first() -> None:
    assert release.previous_release(VERSION, release.releases()) is not None, "RELEASES: the release before this one"
    released = release.releases(["v0.1.0", "0.3.0", "nightly", "v1.2"])
    assert released["0.1.0"] == "v0.1.0" and released["0.3.0"] == "0.3.0" and "nightly" not in released
    assert release.previous_release("0.3.0", released) == ("0.1.0", "v0.1.0")
    assert release.previous_release("0.10.0", released) == ("0.3.0", "0.3.0")  # by number, not by text
    assert release.previous_release("0.1.0", released) is None


def uninstall_steps(file: str) -> list[list[str]]:
    """docs/tasks/uninstall.md: its kubectl commands, in order, for the release ``file`` in place of the base's."""
    page = (ROOT / "docs" / "tasks" / "uninstall.md").read_text()
    block = page.split("```sh\n", 1)[1].split("```", 1)[0]
    base = f"dist/{release.VARIANTS[0].file}"
    assert f"-f {base} " in block, f"docs/tasks/uninstall.md: no step deletes -f {base}"
    return [shlex.split(line.split("#", 1)[0].replace(base, file))[1:]
            for line in block.splitlines() if line.startswith("kubectl ")]


@pytest.mark.unit
@pytest.mark.parametrize("page", ["install.md", "upgrade.md", "uninstall.md"])
def test_the_tasks_name_the_release_files_where_make_release_writes_them(page: str) -> None:
    text = (ROOT / "docs" / "tasks" / page).read_text()
    named = set(re.findall(r"-f (\S*kubenexus-gang-admission\S*\.yaml)", text))
    assert named and named <= {f"dist/{variant.file}" for variant in release.VARIANTS}, named


def ours(installed: Installed) -> list[tuple[str, str, str]]:
    """Every object of the installation left on the cluster: labelled ours, or in our namespace (Events included:
    the namespace's deletion removes them, as the namespace controller does)."""
    cluster = installed.cluster
    return sorted(key(obj) for resource in cluster.registry.all() for obj in cluster.store.items(resource)
                  if obj["metadata"].get("namespace") == NAMESPACE or key(obj) == ("Namespace", "", NAMESPACE)
                  or (obj["metadata"].get("labels") or {}).get(PART_OF[0]) == PART_OF[1])


def configurations(source: Path | Kubectl) -> dict[str, dict[str, object]]:
    """What decides which requests reach the webhook, per configuration and entry: its rules, selectors and
    matchConditions (empty selectors as absent, as the apiserver defaults them), from a manifest or the cluster."""
    if isinstance(source, Path):
        found = [o for o in load_manifests(source.read_text()) if o["kind"].endswith("WebhookConfiguration")]
    else:
        found = [json.loads(source("get", kind, CONFIGURATION, "-o", "json"))
                 for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration")]
    return {f"{obj['kind']}/{hook['name']}": {field: hook.get(field) or None for field in
                                               ("rules", "namespaceSelector", "objectSelector", "matchConditions")}
            for obj in found for hook in obj["webhooks"]}  # type: ignore[union-attr]


@pytest.fixture
def upgraded(dist: Path, tmp_path: Path) -> Iterator[tuple[Installed, str]]:
    """The previous release installed from its manifest, its own components running."""
    previous, tree = previous_version(tmp_path)
    (tmp_path / "old").mkdir()
    old = tmp_path / "old" / release.VARIANTS[0].file
    old.write_text(release.render(release.VARIANTS[0], IMAGE, root=tree))
    with LocalCluster(nodes=list(TWO_POOLS), workdir=str(tmp_path / "cluster")) as cluster:
        cluster.run_components()
        installed = Installed(cluster, tmp_path)
        try:
            installed.apply(old)
            installed.start(tree=tree)
            yield installed, previous
        finally:
            installed.stop()


@pytest.mark.e2e
def test_an_upgrade_loses_no_gang_and_the_uninstall_leaves_nothing(
        dist: Path, upgraded: tuple[Installed, str]) -> None:
    installed, old_version = upgraded
    kube = installed.kube
    ns = kube.namespace({"kubenexus.io/gang-scheduling": "enabled"})
    kube.create(ns, torch_job("running", 1, "2"))  # 2 x 2 cpu on three 4-cpu nodes
    before_running = wait_pods(kube, ns, lambda pods: len(pods) == 2 and all(map(running, pods)), "running runs",
                               f"{JOB_NAME}=running")
    kube.create(ns, torch_job("waiting", 2, "3"))  # 3 x 3 cpu: one per node, not while the first runs
    wait_for(lambda: ((podgroup(kube.api_client, ns, "waiting") or {}).get("status") or {}).get("phase") == "Waiting",
             20.0, "the second gang waits for capacity")
    before_waiting = wait_pods(kube, ns, lambda pods: len(pods) == 3 and all(map(gated, pods)), "waiting gated",
                               f"{JOB_NAME}=waiting")
    groups = {name: podgroup(kube.api_client, ns, name)["metadata"]["uid"] for name in ("running", "waiting")}
    deployment = kube.apps.read_namespaced_deployment("kubenexus-webhook", NAMESPACE)
    assert deployment.metadata.labels["app.kubernetes.io/version"] == old_version != VERSION
    assert installed.tree is not None and installed.tree.version == old_version and not installed.exited(), \
        installed.exited()


    # the upgrade: the new manifests over the old, then this version's components in place of the old ones
    previous = configurations(installed.kubectl)
    local = installed.workdir / f"local-{release.VARIANTS[0].file}"  # what apply() applies: by URL
    applied = installed.apply(dist / release.VARIANTS[0].file)
    assert "deployment.apps/kubenexus-webhook serverside-applied" in applied, applied
    deployment = kube.apps.read_namespaced_deployment("kubenexus-webhook", NAMESPACE)
    assert deployment.spec.template.spec.containers[0].image == f"{IMAGE}:{VERSION}"
    assert deployment.metadata.labels["app.kubernetes.io/version"] == VERSION, f"from {old_version}"
    assert configurations(installed.kubectl) == configurations(local) != previous, \
        "the webhook configurations are this version's, nothing of the previous one's left"
    installed.stop()
    installed.start()

    # no gang lost: the same pods, running and gated as before, the same PodGroups; the waiting gang still starts
    uids = lambda pods: sorted(p["metadata"]["uid"] for p in pods)  # noqa: E731
    after_running = kube.pods(ns, f"{JOB_NAME}=running")
    assert uids(after_running) == uids(before_running) and all(map(running, after_running))
    after_waiting = kube.pods(ns, f"{JOB_NAME}=waiting")
    assert uids(after_waiting) == uids(before_waiting) and all(map(gated, after_waiting))
    assert {name: ((podgroup(kube.api_client, ns, name) or {}).get("metadata") or {}).get("uid")
            for name in groups} == groups, "the same PodGroups"
    code, out = installed.doctor()
    assert code == 0, out
    kube.custom.delete_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs", "running")
    wait_pods(kube, ns, lambda pods: uids(pods) == uids(before_waiting) and all(map(running, pods)),
              "the waiting gang runs once there is room", f"{JOB_NAME}=waiting")

    # the uninstall, as documented: no webhook configuration left once it starts; the CRDs (and every PodGroup and
    # Queue) only when asked, in the last step
    queue = {"apiVersion": f"{QUEUE_GROUP}/v1alpha1", "kind": "Queue", "metadata": {"name": "team"}}
    kube.custom.create_cluster_custom_object(QUEUE_GROUP, "v1alpha1", "queues", queue)
    steps = uninstall_steps(str(local))
    crds = [("CustomResourceDefinition", "", f"{plural}.{QUEUE_GROUP}") for plural in ("podgroups", "queues")]
    installed.kubectl(*steps[0])
    assert not [k for k in ours(installed) if k[0].endswith("WebhookConfiguration")], ours(installed)
    installed.kubectl(*steps[1])
    installed.stop()  # what the Deployments ran
    for step in steps[2:-1]:
        installed.kubectl(*step)
    assert ours(installed) == crds
    assert podgroup(kube.api_client, ns, "waiting") is not None, "PodGroups stay with the CRD"
    assert kube.custom.get_cluster_custom_object(QUEUE_GROUP, "v1alpha1", "queues", "team"), "and Queues with theirs"
    installed.kubectl(*steps[-1])
    assert ours(installed) == []

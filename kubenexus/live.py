"""What the commands reading a live cluster share (``doctor``, ``timeline``, ``explain pod``): the client, one
reachability check first, plain-JSON reads and the namespace kubectl would use, so that each says the same one line
when the cluster is not there, refuses the user, or lacks what was named.
"""

from __future__ import annotations

import json
from typing import Any

from gang.objects import Obj
from kube.client import api_request, new_api_client
from kubenexus.errors import UNREACHABLE, USAGE, CommandError

TIMEOUT = 10.0


def _why(exc: BaseException) -> str:
    """Why a request did not get an answer, in a few words: the innermost OS error ("connection refused", "timed
    out", "name or service not known"), else the transport's message on one line."""
    reason: BaseException | None = getattr(exc, "reason", None) or exc
    while reason is not None:
        if isinstance(reason, OSError) and reason.strerror:
            return reason.strerror[0].lower() + reason.strerror[1:]
        if isinstance(reason, TimeoutError):
            return "timed out"
        reason = reason.__cause__ or reason.__context__
    return " ".join(str(getattr(exc, "reason", None) or exc).split())


def reachable(api_client: Any, needs: str = "a kubeconfig whose user it accepts") -> None:
    """Fail at once, in one line, when the apiserver does not answer or refuses the user: every read would."""
    host = api_client.configuration.host
    try:
        status, _ = api_request(api_client, "GET", "/version", TIMEOUT)
    except Exception as exc:  # noqa: BLE001 — urllib3's and ssl's errors alike: the cluster is not reachable
        raise CommandError(f"cannot reach the cluster at {host}: {_why(exc)}: is it running, and is --kubeconfig "
                           "(or KUBECONFIG) the right one?", UNREACHABLE) from None
    if status in (401, 403):
        raise CommandError(f"the apiserver at {host} refuses the kubeconfig's user (HTTP {status}): this needs "
                           f"{needs} (--kubeconfig)", USAGE)


def connect(kubeconfig: str | None, needs: str = "a kubeconfig whose user it accepts", pool_size: int = 4) -> Any:
    """A client of the cluster ``kubeconfig`` names (else KUBECONFIG, in-cluster, ~/.kube/config), checked
    ``reachable``."""
    api_client = new_api_client(kubeconfig, pool_size=pool_size, retries=1)
    reachable(api_client, needs)
    return api_client


def _request(api_client: Any, path: str, timeout: float = TIMEOUT) -> tuple[int, bytes]:
    try:
        return api_request(api_client, "GET", path, timeout)
    except Exception as exc:  # noqa: BLE001 — the cluster went away after the reachability check
        raise CommandError(f"GET {path}: {_why(exc)}", UNREACHABLE) from None


def get(api_client: Any, path: str, timeout: float = TIMEOUT) -> Obj | None:
    """The object at ``path`` as plain JSON, None when it does not exist; any other refusal is one line."""
    status, body = _request(api_client, path, timeout)
    if status == 404:
        return None
    if status != 200:
        raise CommandError(f"GET {path}: HTTP {status}: {' '.join(body[:200].decode(errors='replace').split())}")
    found: Obj = json.loads(body)
    return found


def context_namespace(kubeconfig: str | None) -> str:
    """The kubeconfig context's namespace, else default (as kubectl)."""
    from kubernetes import config

    try:
        _, context = config.list_kube_config_contexts(config_file=kubeconfig)
    except config.ConfigException:
        return "default"
    return str((context.get("context") or {}).get("namespace") or "default")


def existing_namespace(api_client: Any, namespace: str) -> str:
    """``namespace``, unless the cluster says it does not exist (a user who may not read it is not told): what is
    read in a namespace that does not exist is nothing, which must not pass for an answer."""
    if _request(api_client, f"/api/v1/namespaces/{namespace}")[0] == 404:
        raise CommandError(f"namespace {namespace} does not exist (kubectl get namespaces lists them)")
    return namespace

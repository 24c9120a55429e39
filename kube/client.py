"""The official client's ApiClient, and raw JSON requests through it (objects stay plain dicts)."""

from __future__ import annotations

import os
from typing import Any


class KubeconfigError(ValueError):
    """No usable cluster configuration; the message names the file and the way out."""


def new_api_client(kubeconfig: str | None, pool_size: int, retries: int) -> Any:
    """An ApiClient from ``kubeconfig``, else in-cluster config, else the default kubeconfig."""
    from kubernetes import client
    from kubernetes import config as kube_config

    configuration = client.Configuration()
    try:
        if kubeconfig:
            if not os.path.isfile(kubeconfig):
                raise KubeconfigError(f"kubeconfig {kubeconfig} does not exist: pass the path of an existing one")
            kube_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            kube_config.load_incluster_config(client_configuration=configuration)
        else:
            kube_config.load_kube_config(client_configuration=configuration)
    except kube_config.ConfigException as exc:
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise KubeconfigError(f"no usable kubeconfig ({where}: {' '.join(str(exc).split())}): pass --kubeconfig "
                              "FILE or set KUBECONFIG") from None
    configuration.retries = retries
    configuration.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration)


def api_request(api_client: Any, method: str, path: str, timeout: float, body: Any = None,
                content_type: str | None = None) -> tuple[int, bytes]:
    """One raw JSON request through the official client's ApiClient (auth, TLS, proxy from its config).

    Objects stay plain dicts: the generated model classes cost far more than the work done here.
    Transport failures raise; HTTP errors are returned as their status.
    """
    headers = {"Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    method, url, headers, data, _ = api_client.param_serialize(
        method, path, header_params=headers, body=body, auth_settings=["BearerToken"])
    response = api_client.call_api(method, url, headers, data, _request_timeout=timeout)
    return response.status, response.read()

"""Disruption budgets in process: an unstarted LocalCluster's apiserver driven by the test, which stands in for the
scheduler and kubelets (binding pods, writing their phase and Ready condition) and runs the disruption
controller's passes itself."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from cluster.apiserver import Response
from cluster.controllers import Client
from cluster.disruption import DisruptionController
from cluster.local import ADMIN, LocalCluster

NS = "default"
PODS, PDBS = f"/api/v1/namespaces/{NS}/pods", f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets"
APP = {"app": "web"}


@dataclass
class Budgets:
    cluster: LocalCluster = field(default_factory=LocalCluster)

    def __post_init__(self) -> None:
        self.admin = Client(self.cluster.api, ADMIN)
        self.controller = DisruptionController(self.cluster.api)

    def pod(self, name: str, ready: bool = True, phase: str = "Running", labels: dict[str, str] | None = None,
            owner: dict[str, Any] | None = None, **meta: Any) -> None:
        """A pod of ``labels`` (APP), bound to node-0 with ``phase`` and Ready ``ready`` unless it is Pending."""
        meta = {"name": name, "labels": APP if labels is None else labels, **meta}
        if owner is not None:
            meta["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                        "controller": True}]
        self.admin.create(PODS, {"metadata": meta, "spec": {"terminationGracePeriodSeconds": 30,
                                                            "containers": [{"name": "c", "image": "i"}]}})
        if phase != "Pending":
            self.admin.create(f"{PODS}/{name}/binding", {"metadata": {"name": name},
                                                         "target": {"kind": "Node", "name": "node-0"}})
            self.admin.patch(f"{PODS}/{name}/status", {"status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": "True" if ready else "False"}]}})

    def budget(self, name: str = "budget", selector: Any = APP, observed: bool = False, **spec: Any) -> None:
        """A PodDisruptionBudget over ``selector`` (None: no selector); ``observed``: its status computed."""
        body: dict[str, Any] = {"metadata": {"name": name}, "spec": dict(spec)}
        if selector is not None:
            body["spec"]["selector"] = {"matchLabels": selector}
        self.admin.create(PDBS, body)
        if observed:
            self.controller.reconcile()

    def status(self, name: str = "budget") -> dict[str, Any]:
        """The budget's status after a pass of the disruption controller."""
        self.controller.reconcile()
        return self.admin.call("GET", f"{PDBS}/{name}").get("status") or {}

    def events(self, reason: str) -> list[str]:
        return [e["message"] for e in self.admin.call("GET", f"/api/v1/namespaces/{NS}/events")["items"]
                if e["reason"] == reason]

    def evict(self, name: str, query: str = "", **options: Any) -> Response:
        """POST an Eviction of pod ``name`` (its deleteOptions ``options``); the apiserver's Response itself."""
        body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
        if options:
            body["deleteOptions"] = options
        return self.cluster.api.handle("POST", f"{PODS}/{name}/eviction{query}",
                                       {"content-type": "application/json"}, json.dumps(body).encode(), ADMIN)

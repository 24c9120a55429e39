"""Argo Workflows (``argoproj.io``)."""

from __future__ import annotations

from workloads.record import Resource, Row, Workload

WORKLOAD = Workload(
    roots=(Resource("argoproj.io", "v1alpha1", "Workflow", "workflows", ("wf",)),),
    readme=(Row("Workflow `argoproj.io/v1alpha1`", "only with an explicit `kubenexus.io/min-available`", "no"),),
)

"""The adapter table: every supported root kind, registered in exactly one place."""

from __future__ import annotations

from gang.adapters.argo import WorkflowAdapter
from gang.adapters.base import WorkloadAdapter
from gang.adapters.batch import CronJobAdapter, JobAdapter
from gang.adapters.jobset import JobSetAdapter, TrainJobAdapter
from gang.adapters.lws import LeaderWorkerSetAdapter
from gang.adapters.mpi import MPIJobV2Adapter
from gang.adapters.ray import RayClusterAdapter, RayJobAdapter, RayServiceAdapter
from gang.adapters.spark import ScheduledSparkApplicationAdapter, SparkApplicationAdapter
from gang.adapters.training import JAX, MPI_V1, PADDLE, PYTORCH, TENSORFLOW, XGBOOST
from gang.kinds import split_api_version

ADAPTERS: tuple[WorkloadAdapter, ...] = (
    SparkApplicationAdapter(),
    ScheduledSparkApplicationAdapter(),
    PYTORCH,
    TENSORFLOW,
    XGBOOST,
    PADDLE,
    JAX,
    MPI_V1,
    MPIJobV2Adapter(),
    JobSetAdapter(),
    TrainJobAdapter(),
    RayClusterAdapter(),
    RayJobAdapter(),
    RayServiceAdapter(),
    LeaderWorkerSetAdapter(),
    JobAdapter(),
    CronJobAdapter(),
    WorkflowAdapter(),
)

_BY_KIND: dict[tuple[str, str, str | None], WorkloadAdapter] = {}
for _adapter in ADAPTERS:
    for _version in _adapter.api_versions or (None,):
        _BY_KIND[(_adapter.kind.group, _adapter.kind.kind, _version)] = _adapter


def adapter_for(api_version: str, kind: str) -> WorkloadAdapter | None:
    """The adapter for a root kind; versioned entries (MPIJob v1 vs v2beta1) win."""
    group, version = split_api_version(api_version)
    return _BY_KIND.get((group, kind, version)) or _BY_KIND.get((group, kind, None))

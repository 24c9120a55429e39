"""LeaderWorkerSet (``leaderworkerset.x-k8s.io``)."""

from __future__ import annotations

from workloads.record import Resource, Row, Workload

WORKLOAD = Workload(
    roots=(Resource("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets", ("lws",)),),
    readme=(
        Row("LeaderWorkerSet `leaderworkerset.x-k8s.io/v1`", "one gang per group: `leaderWorkerTemplate.size`",
            "workers under `startupPolicy: LeaderReady`"),
    ),
)

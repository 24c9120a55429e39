"""TrainJob (trainer.kubeflow.org): it runs as a JobSet of the same name, so its gang is that JobSet's."""

from __future__ import annotations

from gang.adapters.base import Chain, Membership, Obj, WorkloadAdapter, name_of, not_member
from gang.kinds import Kind
from workloads.jobset.adapter import GROUP, REPLICATED_JOB_LABEL, jobset_membership


class TrainJobAdapter(WorkloadAdapter):
    """The opt-in is read on the TrainJob; the gang is computed from its JobSet."""

    kind = Kind("trainer.kubeflow.org", "TrainJob", "trainjobs")
    role_label = REPLICATED_JOB_LABEL  # its JobSet's replicated jobs: node, initializer, ...

    def pod_count(self, root: Obj) -> int | None:
        return None  # the runtime decides the pods; validated against the JobSet at admission

    def membership(self, pod: Obj, chain: Chain) -> Membership:
        jobset = chain.find(GROUP, "JobSet")
        if jobset is None:
            return not_member("no JobSet between the pod and its TrainJob")
        return jobset_membership(pod, chain, jobset, name_of(chain.root))


ADAPTERS: tuple[WorkloadAdapter, ...] = (TrainJobAdapter(),)

"""The gang contract: every annotation, label and gate name the product reads or writes.

Nothing else in the code base spells these strings; the webhook, the gate controller and
the tooling all import them from here so that the contract has exactly one definition.
"""

# --- Opt-in and overrides, read from the root object (SparkApplication, PyTorchJob, ...) ---
PREFIX = "kubenexus.io/"
GANG_SCHEDULING = PREFIX + "gang-scheduling"  # "true" | "false" on roots; label on namespaces
MIN_AVAILABLE = PREFIX + "min-available"
GROUP_NAME = PREFIX + "group-name"
SCHEDULE_TIMEOUT_SECONDS = PREFIX + "schedule-timeout-seconds"
# "true": release even when a member has constraints the gate controller cannot check exactly
# (pod affinity, topology spread, unbound volume claims, resource claims).
BEST_EFFORT = PREFIX + "best-effort-placement"
# A node label key: every member on nodes sharing one value of it (required), or on as few values as possible
# (preferred: any placement rather than waiting). Nodes without the label are in no domain.
TOPOLOGY_REQUIRED = PREFIX + "topology-required"
TOPOLOGY_PREFERRED = PREFIX + "topology-preferred"
# The Queue (scheduling.kubenexus.io/v1alpha1, cluster-scoped) a root's gang belongs to; without it, the one Queue
# whose namespaceSelector matches the gang's namespace (controller/queues.py).
QUEUE = PREFIX + "queue"
ROOT_ANNOTATIONS = (GANG_SCHEDULING, MIN_AVAILABLE, GROUP_NAME, SCHEDULE_TIMEOUT_SECONDS, BEST_EFFORT,
                    TOPOLOGY_REQUIRED, TOPOLOGY_PREFERRED, QUEUE)
# Per role, on kinds whose members have roles: ``kubenexus.io/topology-required.<role>: <node label key>``, the
# members of that role (present and expected) in one domain, the others anywhere.
TOPOLOGY_REQUIRED_ROLE_PREFIX = TOPOLOGY_REQUIRED + "."
# JobSet's own annotation, honoured: each child Job in a domain of its own, no two child Jobs sharing one.
JOBSET_EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
# Other projects' root annotations the contract honours, read like ours.
HONOURED_ROOT_ANNOTATIONS = (JOBSET_EXCLUSIVE_TOPOLOGY,)


def read_on_roots(key: str) -> bool:
    """Whether the product reads this annotation on root objects: ours (``kubenexus.io/*``) and those it honours.

    Every decoder that slims roots keeps annotations by this one rule (the webhook's owner reads,
    ``gang/slim.py``; the gate controller's watch of roots and ``simulate``, ``controller/roots.py``), so that a
    constraint cannot reach one path and be dropped on another."""
    return key.startswith(PREFIX) or key in HONOURED_ROOT_ANNOTATIONS

# Values of GANG_SCHEDULING on roots and of the namespace label of the same key.
ROOT_OPT_IN = "true"
ROOT_OPT_OUT = "false"
NAMESPACE_ENABLED = "enabled"
NAMESPACE_DISABLED = "disabled"

# --- Written on member pods ---
POD_GROUP_LABEL = "pod-group.scheduling.kubenexus.io/name"
POD_GROUP_MIN_LABEL = "pod-group.scheduling.kubenexus.io/min-available"
# What the KubeNexus scheduler's coscheduling plugin reads (and the seed-era explicit opt-in).
COSCHED_GROUP_ANNOTATION = "pod-group.scheduling.sigs.k8s.io/name"
COSCHED_MIN_ANNOTATION = "pod-group.scheduling.sigs.k8s.io/min-available"

GANG_GATE = "scheduling.kubenexus.io/gang"
OWNER_ANNOTATION = "scheduling.kubenexus.io/owner"  # <group>/<version>/<kind>/<name>
OWNER_UID_ANNOTATION = "scheduling.kubenexus.io/owner-uid"
EXPECTED_MEMBERS_ANNOTATION = "scheduling.kubenexus.io/expected-members"
UNRESOLVED_ANNOTATION = "scheduling.kubenexus.io/unresolved"

# --- Written on member pods by the gate controller, in the PATCH that removes the gate ---
PLANNED_NODE_ANNOTATION = "scheduling.kubenexus.io/planned-node"
# JSON list of node names, one per expected member in annotation order: their reserved slots.
RESERVED_NODES_ANNOTATION = "scheduling.kubenexus.io/reserved-nodes"

# The product's own state on member pods: written only by admission (at CREATE: owner, owner-uid,
# expected-members, unresolved) and by the gate controller's identity (the rest, and everything after
# creation). The webhooks refuse anyone else's create or change of these (gang/validate.py, gang/mutate.py).
PRODUCT_STATE = (
    OWNER_ANNOTATION,
    OWNER_UID_ANNOTATION,
    EXPECTED_MEMBERS_ANNOTATION,
    UNRESOLVED_ANNOTATION,
    PLANNED_NODE_ANNOTATION,
    RESERVED_NODES_ANNOTATION,
)

# Everything admission may write on a pod (the mutation diff looks at these keys only).
WRITTEN_LABELS = (POD_GROUP_LABEL, POD_GROUP_MIN_LABEL)
WRITTEN_ANNOTATIONS = (
    COSCHED_GROUP_ANNOTATION,
    COSCHED_MIN_ANNOTATION,
    OWNER_ANNOTATION,
    OWNER_UID_ANNOTATION,
    EXPECTED_MEMBERS_ANNOTATION,
    UNRESOLVED_ANNOTATION,
)

# Keys that identify a pod's gang and may not change once set (validated on UPDATE).
IMMUTABLE_LABELS = (POD_GROUP_LABEL, POD_GROUP_MIN_LABEL)
IMMUTABLE_ANNOTATIONS = (
    COSCHED_GROUP_ANNOTATION,
    COSCHED_MIN_ANNOTATION,
    OWNER_ANNOTATION,
    OWNER_UID_ANNOTATION,
)

# --- The PodGroup (deploy/base/podgroup-crd.yaml): one per gang, named as the gang ---
PODGROUP_GROUP = "scheduling.kubenexus.io"
PODGROUP_VERSION = "v1alpha1"
PODGROUP_API_VERSION = f"{PODGROUP_GROUP}/{PODGROUP_VERSION}"
PODGROUP_KIND = "PodGroup"
PODGROUP_PLURAL = "podgroups"
# On the PodGroups the gate controller creates (a user-created PodGroup lacks it: the controller writes only its
# status), and the label back to the gang's root object (its kind, lowercased, and its name as a label value).
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_CONTROLLER = "kubenexus-gate-controller"
ROOT_KIND_LABEL = "scheduling.kubenexus.io/root-kind"
ROOT_NAME_LABEL = "scheduling.kubenexus.io/root-name"

# --- Markers of operator-native gang scheduling that we must not fight ---
# Volcano PodGroup annotation, scheduler-plugins coscheduling label, YuniKorn task groups.
NATIVE_GANG_POD_MARKERS = (
    "scheduling.k8s.io/group-name",
    "scheduling.x-k8s.io/pod-group",
    "yunikorn.apache.org/task-group-name",
)

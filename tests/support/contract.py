"""The gang contract as the issue states it, spelled once for the black-box tests.

Deliberately not imported from ``gang.keys``: the tests check the product against the
documented contract, not against itself.
"""

OPT_IN = "kubenexus.io/gang-scheduling"
MIN_AVAILABLE = "kubenexus.io/min-available"
GROUP_NAME = "kubenexus.io/group-name"
GROUP = "pod-group.scheduling.kubenexus.io/name"
MIN = "pod-group.scheduling.kubenexus.io/min-available"
SIGS_GROUP = "pod-group.scheduling.sigs.k8s.io/name"
SIGS_MIN = "pod-group.scheduling.sigs.k8s.io/min-available"
GATE = "scheduling.kubenexus.io/gang"
OWNER = "scheduling.kubenexus.io/owner"
OWNER_UID = "scheduling.kubenexus.io/owner-uid"
EXPECTED = "scheduling.kubenexus.io/expected-members"
UNRESOLVED = "scheduling.kubenexus.io/unresolved"
SCHEDULER = "kubenexus-scheduler"
CONTROLLER = "system:serviceaccount:kubenexus-system:kubenexus-controller"
PLANNED_NODE = "scheduling.kubenexus.io/planned-node"
RESERVED_NODES = "scheduling.kubenexus.io/reserved-nodes"

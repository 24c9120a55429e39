"""End to end, through the running webhook: pods shaped as each supported operator creates them.

Every gang size and expected member below is computed from the fixture's spec by the formula
documented in /work/shared/operators.md (or by hand, with the arithmetic in a comment), never
taken from the webhook's output.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from fractions import Fraction

import pytest

from cluster.stub import path_of
from tests.support import operator_fixtures as f
from tests.support.contract import EXPECTED, GATE, GROUP_NAME, MIN_AVAILABLE, OWNER, OWNER_UID, SCHEDULER
from tests.support.contract import GROUP as GROUP_LABEL
from tests.support.contract import MIN as MIN_LABEL
from tests.support.contract import SIGS_GROUP as COSCHED_GROUP
from tests.support.contract import SIGS_MIN as COSCHED_MIN
from tests.support.operator_fixtures import MI, OPT_IN, Obj
from tests.support.operator_scenarios import LAUNCHER, LAUNCHER_SPEC, SCENARIOS, Scenario
from workloads import records

pytestmark = pytest.mark.e2e

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


# --- Spark ---------------------------------------------------------------------------------------


# --- training-operator ---------------------------------------------------------------------------


# --- MPIJob v2beta1 ------------------------------------------------------------------------------


# --- JobSet / TrainJob ---------------------------------------------------------------------------


# --- KubeRay -------------------------------------------------------------------------------------


# --- LeaderWorkerSet -----------------------------------------------------------------------------


# --- batch, Argo ---------------------------------------------------------------------------------


def test_every_registered_root_kind_has_scenarios() -> None:
    """A kind registered in workloads/ comes with pods shaped as its operator creates them, here."""
    registered = {(f"{r.group}/{r.version}", r.kind) for record in records().values() for r in record.roots}
    built = [build("ns", {}) for build in SCENARIOS.values()]
    assert {(s.root["apiVersion"], s.root["kind"]) for s in built} == registered


# --- helpers -------------------------------------------------------------------------------------


def admit(webhook, apiserver, ns: str, scenario: Scenario) -> tuple[Obj, Obj]:
    apiserver.put(*scenario.owners)
    return webhook.admit(scenario.pod, ns)


def normalized(members: list[Obj]) -> list[Obj]:
    """Expected members with requests as exact numbers, so '5Gi' and '5120Mi' compare equal."""
    return [{**m, "requests": {k: Fraction(v) if not isinstance(v, str) else f.quantity(v)
                               for k, v in m["requests"].items()}} for m in members]


def assert_untouched(response: Obj, pod: Obj, after: Obj, warned: bool) -> None:
    assert "patch" not in response and after == pod
    assert bool(response.get("warnings")) is warned, response.get("warnings")


def assert_gang(after: Obj, original: Obj, group: str, size: int, root: Obj) -> None:
    labels, annotations = after["metadata"]["labels"], after["metadata"]["annotations"]
    assert labels[GROUP_LABEL] == group
    assert labels[MIN_LABEL] == str(size)
    assert annotations[COSCHED_GROUP] == group and annotations[COSCHED_MIN] == str(size)
    assert {"name": GATE} in after["spec"]["schedulingGates"]
    assert after["spec"]["schedulerName"] == SCHEDULER
    assert annotations[OWNER] == f.owner_string(root)
    assert annotations[OWNER_UID] == root["metadata"]["uid"]
    assert original["metadata"]["labels"].items() <= labels.items()  # nothing of the operator's removed
    assert after["metadata"]["ownerReferences"] == original["metadata"]["ownerReferences"]


def expected_members(after: Obj) -> list[Obj] | None:
    text = after["metadata"]["annotations"].get(EXPECTED)
    return None if text is None else normalized(json.loads(text))


# --- every operator: gang, opt-in, idempotency ---------------------------------------------------


@pytest.mark.parametrize("name", SCENARIOS)
def test_operator_pod_joins_its_gang(webhook, apiserver, namespace, name):
    scenario = SCENARIOS[name](namespace, OPT_IN)
    response, after = admit(webhook, apiserver, namespace, scenario)
    assert not response.get("warnings")
    assert_gang(after, scenario.pod, scenario.group, scenario.size, scenario.root)
    expected = None if scenario.expected is None else normalized(scenario.expected)
    assert expected_members(after) == expected


@pytest.mark.parametrize("name", SCENARIOS)
def test_root_without_opt_in_is_left_alone_quietly(webhook, apiserver, namespace, name):
    scenario = SCENARIOS[name](namespace, {})
    response, after = admit(webhook, apiserver, namespace, scenario)
    assert_untouched(response, scenario.pod, after, warned=False)


@pytest.mark.parametrize("name", SCENARIOS)
def test_reinvocation_adds_nothing(webhook, apiserver, namespace, name):
    scenario = SCENARIOS[name](namespace, OPT_IN)
    _, first = admit(webhook, apiserver, namespace, scenario)
    response, again = webhook.admit(first, namespace)
    assert "patch" not in response and again == first
    # Another webhook (LWS's, JobSet's) changed the pod in between: still nothing of ours to add.
    touched = copy.deepcopy(first)
    touched["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] = "0"
    touched["metadata"]["annotations"]["example.com/injected"] = "yes"
    response, _ = webhook.admit(touched, namespace)
    assert "patch" not in response


@pytest.mark.parametrize("name", ["spark-executor", "jobset-dependson-first", "lws-leaderready-worker"])
def test_reinvocation_on_another_replica_while_the_api_fails_adds_nothing(
        webhook, start_webhook, apiserver, namespace, name):
    """The apiserver may reinvoke a different webhook replica, whose owner cache is cold; if its owner read
    fails, the pod an earlier pass already resolved must still get no patch (no "unresolved" marker)."""
    scenario = SCENARIOS[name](namespace, OPT_IN)
    _, first = admit(webhook, apiserver, namespace, scenario)
    other_replica = start_webhook(apiTimeoutSeconds=1.5)
    apiserver.fail(scenario.owners[0], status=503)
    response, again = other_replica.admit(first, namespace)
    assert "patch" not in response and again == first


# --- overrides on the root -----------------------------------------------------------------------


@pytest.mark.parametrize("name, override, trimmed", [
    # Spark: driver + 3 executors; 3 members = driver + 2 executors.
    ("spark-driver", 3, [("executor", 2)]),
    ("spark-driver", 1, None),  # the driver alone: nothing to wait for
    # JobSet dependsOn: 1 launcher now, 8 workers later; 5 = launcher + 4 workers.
    ("jobset-dependson-first", 5, [("workers", 4)]),
    # InOrder: 2 driver pods now, then 3 workers, then 1 evaluator; later stages are dropped first.
    ("jobset-inorder-first", 4, [("workers", 2)]),
    ("jobset-inorder-first", 5, [("workers", 3)]),
    ("jobset-inorder-first", 6, [("workers", 3), ("evaluator", 1)]),
    # LWS LeaderReady: leader now, 3 workers later.
    ("lws-leaderready-leader", 2, [("worker", 1)]),
    # MPI WaitForWorkersReady: 4 workers now, the launcher later.
    ("mpi-v2-wait-worker", 4, None),
    ("training-PyTorchJob", 2, None),
    ("raycluster-head", 5, None),
    ("job", 2, None),
])
def test_min_available_override_sets_size_and_trims_expected(webhook, apiserver, namespace, name, override, trimmed):
    scenario = SCENARIOS[name](namespace, {**OPT_IN, MIN_AVAILABLE: str(override)})
    response, after = admit(webhook, apiserver, namespace, scenario)
    assert not response.get("warnings")
    assert_gang(after, scenario.pod, scenario.group, override, scenario.root)
    members = expected_members(after)
    assert [(m["role"], m["count"]) for m in members or []] == (trimmed or [])
    assert (members is None) is (trimmed is None)


def test_min_available_larger_than_the_job_warns(webhook, apiserver, namespace):
    scenario = SCENARIOS["job"](namespace, {**OPT_IN, MIN_AVAILABLE: "40"})
    response, after = admit(webhook, apiserver, namespace, scenario)
    assert response.get("warnings")
    assert after["metadata"]["labels"][MIN_LABEL] == "40"


def test_invalid_min_available_is_ignored_with_a_warning(webhook, apiserver, namespace):
    scenario = SCENARIOS["training-PyTorchJob"](namespace, {**OPT_IN, MIN_AVAILABLE: "all"})
    response, after = admit(webhook, apiserver, namespace, scenario)
    assert response.get("warnings")
    assert_gang(after, scenario.pod, scenario.group, scenario.size, scenario.root)


@pytest.mark.parametrize("name", ["spark-driver", "training-TFJob", "mpi-v2-wait-worker", "jobset-dependson-first",
                                  "trainjob-node", "raycluster-worker", "rayjob-cluster-pod", "job"])
def test_group_name_override(webhook, apiserver, namespace, name):
    scenario = SCENARIOS[name](namespace, {**OPT_IN, GROUP_NAME: "team-a.run-7"})
    _, after = admit(webhook, apiserver, namespace, scenario)
    assert_gang(after, scenario.pod, "team-a.run-7", scenario.size, scenario.root)


# --- Spark ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec, cpu, memory_mib, extra", [
    # JVM: factor 0.1, floor 384Mi
    ({"type": "Scala", "executor": {"instances": 2, "cores": 2, "memory": "2g"}}, 2, 2048 + 384, {}),
    ({"type": "Java", "executor": {"instances": 2, "cores": 4, "memory": "8g"}}, 4, 8192 + 819, {}),
    # Python/R: factor 0.4, floor(0.4 × 1024) = 409
    ({"type": "Python", "executor": {"instances": 2, "cores": 1, "memory": "1g"}}, 1, 1024 + 409, {}),
    ({"type": "R", "executor": {"instances": 2, "cores": 1, "memory": "4g"}}, 1, 4096 + 1638, {}),
    # explicit factor (spec, then sparkConf) and explicit overhead
    ({"type": "Python", "memoryOverheadFactor": "0.2", "executor": {"instances": 2, "cores": 1, "memory": "4g"}},
     1, 4096 + 819, {}),
    ({"type": "Scala", "sparkConf": {"spark.kubernetes.memoryOverheadFactor": "0.25"},
      "executor": {"instances": 2, "cores": 1, "memory": "4096m"}}, 1, 4096 + 1024, {}),
    ({"type": "Python", "executor": {"instances": 2, "cores": 1, "memory": "4g", "memoryOverhead": "1g"}},
     1, 4096 + 1024, {}),
    # coreRequest wins over cores; GPUs from executor.gpu
    ({"type": "Scala", "executor": {"instances": 2, "cores": 4, "coreRequest": "1500m", "memory": "2g",
                                    "gpu": {"name": "nvidia.com/gpu", "quantity": 2}}},
     Fraction(3, 2), 2048 + 384, {"nvidia.com/gpu": 2}),
])
def test_spark_driver_announces_executor_size(webhook, apiserver, namespace, spec, cpu, memory_mib, extra):
    app = f.spark_app(namespace, "sized", f.spark_spec(**spec), annotations=OPT_IN)
    apiserver.put(app)
    _, after = webhook.admit(f.spark_driver(app), namespace)
    (member,) = expected_members(after)
    assert member["role"] == "executor" and member["count"] == 2
    assert member["requests"] == {"cpu": Fraction(cpu), "memory": memory_mib * MI, **extra}


def test_spark_executor_placement_is_announced(webhook, apiserver, namespace):
    toleration = {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}}
    spec = f.spark_spec(nodeSelector={"team": "ml", "pool": "general"},
                        executor={"instances": 4, "cores": 1, "memory": "2g", "nodeSelector": {"pool": "spot"},
                                  "tolerations": [toleration], "affinity": affinity})
    app = f.spark_app(namespace, "placed", spec, annotations=OPT_IN)
    apiserver.put(app)
    _, after = webhook.admit(f.spark_driver(app), namespace)
    (member,) = expected_members(after)
    assert member["nodeSelector"] == {"team": "ml", "pool": "spot"}  # executor's value wins
    assert member["tolerations"] == [toleration]
    assert member["affinity"] == affinity


@pytest.mark.parametrize("overrides, executors", [
    ({"executor": {"instances": 2}, "dynamicAllocation": {"enabled": True, "initialExecutors": 5, "minExecutors": 3,
                                                          "maxExecutors": 20}}, 5),
    ({"executor": {"instances": 6}, "dynamicAllocation": {"enabled": True, "initialExecutors": 2, "minExecutors": 1}},
     6),
    ({"executor": {"instances": 1}, "sparkConf": {"spark.dynamicAllocation.enabled": "true",
                                                  "spark.dynamicAllocation.minExecutors": "4"}}, 4),
    ({"executor": {}, "dynamicAllocation": {"enabled": False, "initialExecutors": 9}}, 1),  # off; default 1
])
def test_spark_dynamic_allocation_executor_count(webhook, apiserver, namespace, overrides, executors):
    """E = max(instances, initialExecutors, minExecutors) under dynamic allocation."""
    app = f.spark_app(namespace, "dyn", f.spark_spec(**overrides), annotations=OPT_IN)
    apiserver.put(app)
    _, after = webhook.admit(f.spark_driver(app), namespace)
    assert after["metadata"]["labels"][MIN_LABEL] == str(1 + executors)
    assert [m["count"] for m in expected_members(after)] == [executors]


def test_thousand_spark_executors_cost_three_reads(webhook, apiserver, namespace):
    app = f.spark_app(namespace, "wide", f.spark_spec(executor={"instances": 1000, "cores": 1, "memory": "1g"}),
                      annotations=OPT_IN)
    driver = f.stored(f.spark_driver(app), namespace)
    apiserver.put(app, driver)
    # The owners, once each, then from the owner cache. (The namespace is not counted: the webhook watches
    # namespaces, and reads them, cached for 1 s, only while it has no watch, as on this stub, which serves none.)
    owner_reads = lambda: apiserver.reads[path_of(app)] + apiserver.reads[path_of(driver)]  # noqa: E731
    before = owner_reads()
    _, driver_after = webhook.admit(f.spark_driver(app), namespace)
    groups = set()
    for exec_id in range(1, 1001):
        _, after = webhook.admit(f.spark_executor(app, driver, exec_id), namespace)
        labels = after["metadata"]["labels"]
        groups.add((labels[GROUP_LABEL], labels[MIN_LABEL]))
    assert groups == {("wide", "1001")}
    assert driver_after["metadata"]["labels"][GROUP_LABEL] == "wide"
    assert owner_reads() - before <= 2  # SparkApplication, driver pod


def test_spark_driver_gets_its_owner_from_the_operator_webhook_then_reinvocation(webhook, apiserver, namespace):
    """spark-operator's own webhook may add the driver's owner reference after ours ran: our first pass
    finds no owner and leaves the pod alone; the reinvocation (still the CREATE) makes it a member."""
    app = f.spark_app(namespace, "late-owner", annotations=OPT_IN)
    apiserver.put(app)
    driver = f.spark_driver(app)
    driver["metadata"]["ownerReferences"] = []
    response, after = webhook.admit(driver, namespace)
    assert_untouched(response, driver, after, warned=False)
    after["metadata"]["ownerReferences"] = [f.ref(app)]
    after["spec"]["schedulerName"] = "spark-scheduler"  # what the operator's webhook may also set
    response, final = webhook.admit(after, namespace)
    assert_gang(final, after, "late-owner", 1 + f.spark_executors(app["spec"]), app)


def test_owner_recreated_under_the_same_name_is_read_again(webhook, apiserver, namespace):
    """kubectl delete + apply of a SparkApplication within the owner cache's TTL: the new uid wins."""
    first = f.spark_app(namespace, "again", f.spark_spec(executor={"instances": 2}), annotations=OPT_IN)
    apiserver.put(first)
    assert webhook.admit(f.spark_driver(first), namespace)[1]["metadata"]["labels"][MIN_LABEL] == "3"
    second = f.spark_app(namespace, "again", f.spark_spec(executor={"instances": 7}), annotations=OPT_IN)
    apiserver.put(second)
    _, after = webhook.admit(f.spark_driver(second), namespace)
    assert after["metadata"]["labels"][MIN_LABEL] == "8"  # driver + 7 executors
    assert after["metadata"]["annotations"][OWNER_UID] == second["metadata"]["uid"]


# --- staged gangs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("api_version, staged", [("kubeflow.org/v1", False), ("kubeflow.org/v2beta1", True)])
def test_mpijob_dispatches_on_api_version(webhook, apiserver, namespace, api_version, staged):
    """The same MPIJob spec: training-operator (v1) creates all pods together; mpi-operator (v2beta1)
    under WaitForWorkersReady creates the launcher later, so workers announce it."""
    job = f.mpijob_v2(namespace, "mpi", workers=3, policy="WaitForWorkersReady", launcher_spec=LAUNCHER_SPEC,
                      annotations=OPT_IN, api_version=api_version)
    apiserver.put(job)
    _, after = webhook.admit(f.mpi_worker(job, 0), namespace)
    size = f.training_size(job["spec"], "mpiReplicaSpecs")  # 1 launcher + 3 workers, both ways
    assert_gang(after, f.mpi_worker(job, 0), "mpi", size, job)
    assert after["metadata"]["annotations"][OWNER] == f"{api_version}/MPIJob/mpi"
    assert expected_members(after) == (normalized([LAUNCHER]) if staged else None)


def test_lws_groups_are_separate_gangs(webhook, apiserver, namespace):
    lws_obj = f.lws(namespace, "vllm", size=2, replicas=3, annotations=OPT_IN)
    sts = f.lws_leader_sts(lws_obj)
    apiserver.put(lws_obj, sts)
    groups = [webhook.admit(f.lws_leader(lws_obj, sts, i, revision="abc"), namespace)[1]["metadata"]["labels"]
              [GROUP_LABEL] for i in range(3)]
    assert groups == ["vllm-0-abc", "vllm-1-abc", "vllm-2-abc"]


def test_lws_group_index_comes_from_the_name_not_the_index_labels(webhook, apiserver, namespace):
    """LWS's webhook may add (or have stale) index labels; the ordinal of the pod name decides."""
    lws_obj = f.lws(namespace, "vllm", size=2, replicas=3, annotations=OPT_IN)
    sts = f.lws_leader_sts(lws_obj)
    apiserver.put(lws_obj, sts)
    leader = f.lws_leader(lws_obj, sts, 2, revision=None)
    leader["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"] = "0"
    _, after = webhook.admit(leader, namespace)
    assert after["metadata"]["labels"][GROUP_LABEL] == "vllm-2"


def test_cronjob_runs_are_separate_gangs(webhook, apiserver, namespace):
    cron = f.cronjob(namespace, "nightly", f.job_spec(parallelism=2), annotations=OPT_IN)
    runs = [f.cron_run(cron, minute) for minute in (28950000, 28951440)]
    apiserver.put(cron, *runs)
    groups = {webhook.admit(f.job_pod(run), namespace)[1]["metadata"]["labels"][GROUP_LABEL] for run in runs}
    assert groups == {f.name_of(run) for run in runs}


def test_rayservice_upgrade_makes_a_second_gang(webhook, apiserver, namespace):
    svc = f.ray_service(namespace, "serve", f.ray_cluster_spec(f.worker_group("w", replicas=1)), annotations=OPT_IN)
    old, new = f.cluster_of(svc, "serve-raycluster-aaaaa"), f.cluster_of(svc, "serve-raycluster-bbbbb")
    new["spec"]["workerGroupSpecs"][0]["replicas"] = 3  # the upgrade scales the worker group
    apiserver.put(svc, old, new)
    labels = [webhook.admit(f.ray_pod(c, "w"), namespace)[1]["metadata"]["labels"] for c in (old, new)]
    assert [(x[GROUP_LABEL], x[MIN_LABEL]) for x in labels] == [(f.name_of(c), str(f.ray_size(c["spec"])))
                                                                 for c in (old, new)]


# --- left alone, with a warning ------------------------------------------------------------------


def test_rayjob_submitter_is_not_a_member(webhook, apiserver, namespace):
    rj = f.ray_job(namespace, "batch-infer", f.ray_cluster_spec(f.worker_group("cpu", replicas=2)), annotations=OPT_IN)
    submitter = f.batch_job(namespace, "batch-infer", f.job_spec(backoffLimit=2), owners=(f.ref(rj),))
    apiserver.put(rj, submitter)
    pod = f.job_pod(submitter)
    response, after = webhook.admit(pod, namespace)
    assert_untouched(response, pod, after, warned=True)


def test_argo_without_min_available_is_left_alone(webhook, apiserver, namespace):
    wf = f.workflow(namespace, "wf", annotations=OPT_IN)
    apiserver.put(wf)
    pod = f.argo_pod(wf, "step-a")
    response, after = webhook.admit(pod, namespace)
    assert_untouched(response, pod, after, warned=True)


def _volcano_pod(pod: Obj) -> None:
    pod["metadata"].setdefault("annotations", {})["scheduling.k8s.io/group-name"] = "podgroup-x"


def _marker(section: str, key: str) -> Callable[[Obj], None]:
    return lambda pod: pod["metadata"].setdefault(section, {}).update({key: "pg-1"})


def _scheduler(name: str) -> Callable[[Obj], None]:
    return lambda pod: pod["spec"].update(schedulerName=name)


def _spark_scheduler(name: str) -> Callable[[Obj], None]:
    return lambda root: root["spec"].update(batchScheduler=name)


@pytest.mark.parametrize("build, change_root, change_pod", [
    (SCENARIOS["spark-driver"], _spark_scheduler("volcano"), None),
    (SCENARIOS["spark-executor"], _spark_scheduler("yunikorn"), None),
    (SCENARIOS["scheduled-spark-driver"], lambda root: root["spec"]["template"].update(batchScheduler="volcano"),
     None),
    (SCENARIOS["raycluster-head"], lambda root: root["metadata"].update(labels={"ray.io/scheduler-name": "volcano"}),
     None),
    (SCENARIOS["training-PyTorchJob"], None, _volcano_pod),  # training-operator --gang-scheduling=volcano
    (SCENARIOS["mpi-v2-worker"], None, _scheduler("volcano")),
    (SCENARIOS["lws-leader"], None, _volcano_pod),
    (SCENARIOS["job"], None, _scheduler("yunikorn")),
    (SCENARIOS["training-TFJob"], None, _marker("labels", "scheduling.x-k8s.io/pod-group")),  # scheduler-plugins
    (SCENARIOS["raycluster-worker"], None, _marker("annotations", "yunikorn.apache.org/task-group-name")),
], ids=["spark", "spark-executor", "scheduled-spark", "raycluster", "volcano-annotation", "volcano-scheduler",
        "lws-volcano", "yunikorn-scheduler", "scheduler-plugins-label", "yunikorn-task-group"])
def test_native_gang_schedulers_are_not_fought(webhook, apiserver, namespace, build, change_root, change_pod):
    scenario = build(namespace, OPT_IN)
    for change, target in ((change_root, scenario.root), (change_pod, scenario.pod)):
        if change:
            change(target)
    response, after = admit(webhook, apiserver, namespace, scenario)
    assert_untouched(response, scenario.pod, after, warned=True)


# --- long names ----------------------------------------------------------------------------------


def truncated_labels(pod: Obj) -> Obj:
    """Label values carrying a 100+ character root name are cut to 63 characters, as operators must."""
    pod["metadata"]["labels"] = {k: v[:63].rstrip("-.") for k, v in pod["metadata"]["labels"].items()}
    return pod


def test_long_root_names_give_stable_distinct_valid_groups(webhook, apiserver, namespace):
    prefix = "llama-3-70b-instruct-finetune.with-a-very-long-experiment-name-that-keeps-going-and-going-and-going"
    jobs = [f.training_job("PyTorchJob", namespace, f"{prefix}-{suffix}", {"Master": 1, "Worker": 2},
                           annotations=OPT_IN) for suffix in ("run-0001", "run-0002")]
    assert all(len(f.name_of(job)) >= 100 for job in jobs)
    apiserver.put(*jobs)
    groups = []
    for job in jobs:
        first = webhook.admit(truncated_labels(f.training_pod(job, "Master", 0)), namespace)[1]
        second = webhook.admit(truncated_labels(f.training_pod(job, "Worker", 1)), namespace)[1]
        group = first["metadata"]["labels"][GROUP_LABEL]
        assert second["metadata"]["labels"][GROUP_LABEL] == group  # stable across the gang
        assert len(group) <= 63 and LABEL_VALUE.match(group)
        assert first["metadata"]["annotations"][COSCHED_GROUP] == group
        assert first["metadata"]["annotations"][OWNER] == f.owner_string(job)  # the full name
        groups.append(group)
    assert groups[0] != groups[1]


def test_long_names_in_composed_groups(webhook, apiserver, namespace):
    """A long LWS name plus ``-<index>-<revision>``: still one valid label value per group."""
    lws_obj = f.lws(namespace, "l" * 110, size=2, replicas=2, annotations=OPT_IN)
    sts = f.lws_leader_sts(lws_obj)
    apiserver.put(lws_obj, sts)
    leaders = [truncated_labels(f.lws_leader(lws_obj, sts, i, revision="5d4c3b2a1")) for i in (0, 1, 0)]
    groups = [webhook.admit(leader, namespace)[1]["metadata"]["labels"][GROUP_LABEL] for leader in leaders]
    assert groups[0] == groups[2] != groups[1]
    assert all(len(g) <= 63 and LABEL_VALUE.match(g) for g in groups)


@pytest.mark.parametrize("min_available, announced", [(3, 0), (4, 0), (5, 1)])
def test_mpijob_operator_min_available_trims_the_announced_launcher(
        webhook, apiserver, namespace, min_available, announced):
    """runPolicy.schedulingPolicy.minAvailable counts from the 4 workers created first: once the workers
    alone reach it, the launcher is not part of the gang's minimum and is not announced."""
    job = f.mpijob_v2(namespace, "mpi", workers=4, policy="WaitForWorkersReady", launcher_spec=LAUNCHER_SPEC,
                      annotations=OPT_IN)
    job["spec"]["runPolicy"]["schedulingPolicy"] = {"minAvailable": min_available}
    apiserver.put(job)
    _, after = webhook.admit(f.mpi_worker(job, 0), namespace)
    assert after["metadata"]["labels"][MIN_LABEL] == str(min_available)
    assert expected_members(after) == (normalized([LAUNCHER]) if announced else None)

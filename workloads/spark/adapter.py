"""SparkApplication and ScheduledSparkApplication (kubeflow spark-operator).

The driver is created first; the driver creates the executors once it runs. So the driver
is a first-stage member announcing the executors as expected members, and every executor
is a late member of the same gang. Executor size follows Spark's own arithmetic.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, TypedDict

from gang.adapters.base import (
    Chain,
    ExpectedMember,
    Membership,
    Obj,
    WorkloadAdapter,
    as_int,
    controller_ref,
    labels_of,
    mapping,
    name_of,
    not_member,
    spec,
)
from gang.kinds import Kind
from gang.quantity import QuantityError, parse_quantity
from gang.resources import format_requests

GROUP = "sparkoperator.k8s.io"
ROLE_LABEL = "spark-role"
MIB = Decimal(2**20)
MIN_OVERHEAD_MIB = Decimal(384)
_JVM_UNITS = {"k": Decimal(1) / 1024, "m": Decimal(1), "g": Decimal(1024), "t": Decimal(1024**2)}


class _ExecutorShape(TypedDict, total=False):
    instances: Any
    cores: Any
    coreRequest: Any
    memory: Any
    memoryOverhead: Any
    gpu: Any
    nodeSelector: Any
    tolerations: Any
    affinity: Any


class _SparkShape(TypedDict, total=False):
    type: Any
    batchScheduler: Any
    sparkConf: Any
    memoryOverheadFactor: Any
    nodeSelector: Any
    executor: _ExecutorShape
    dynamicAllocation: Any


class _ScheduledShape(TypedDict, total=False):
    template: _SparkShape


def jvm_memory_mib(value: object) -> Decimal | None:
    """Spark memory strings ('4g', '512m', '1024' = MiB) in MiB; None if unreadable."""
    text = str(value or "").strip().lower().removesuffix("b")
    if not text:
        return None
    unit = _JVM_UNITS.get(text[-1])
    number = text[:-1] if unit is not None else text
    try:
        return Decimal(number) * (unit if unit is not None else 1)
    except ArithmeticError:
        return None


def _conf(app_spec: Obj) -> dict[str, str]:
    return {str(k): str(v) for k, v in mapping(app_spec.get("sparkConf")).items()}


def executor_count(app_spec: Obj) -> int:
    """spec.executor.instances (default 1); under dynamic allocation also initial/min executors."""
    conf = _conf(app_spec)
    executor = mapping(app_spec.get("executor"))
    count = as_int(executor.get("instances"), as_int(conf.get("spark.executor.instances"), 1))
    dynamic = mapping(app_spec.get("dynamicAllocation"))
    if dynamic.get("enabled") is True or conf.get("spark.dynamicAllocation.enabled", "").lower() == "true":
        for field in ("initialExecutors", "minExecutors"):
            count = max(count, as_int(dynamic.get(field), as_int(conf.get(f"spark.dynamicAllocation.{field}"), 0)))
    return count


def role_requests(app_spec: Obj, role: str = "executor") -> dict[str, str]:
    """A driver's or executor's pod requests: cpu = coreRequest or cores; memory = memory + overhead; GPUs from
    its gpu."""
    conf = _conf(app_spec)
    part = mapping(app_spec.get(role))
    requests: dict[str, Decimal] = {}
    try:
        requests["cpu"] = parse_quantity(part.get("coreRequest") or part.get("cores") or 1)
    except QuantityError:
        requests["cpu"] = Decimal(1)
    memory = jvm_memory_mib(part.get("memory") or conf.get(f"spark.{role}.memory") or "1g")
    if memory is not None:
        overhead = jvm_memory_mib(part.get("memoryOverhead") or conf.get(f"spark.{role}.memoryOverhead"))
        if overhead is None:
            python = str(app_spec.get("type", "")).lower() in ("python", "r")
            factor_text = app_spec.get("memoryOverheadFactor") or conf.get("spark.kubernetes.memoryOverheadFactor")
            try:
                factor = Decimal(str(factor_text)) if factor_text else Decimal("0.4" if python else "0.1")
            except ArithmeticError:
                factor = Decimal("0.4" if python else "0.1")
            overhead = max(MIN_OVERHEAD_MIB, (factor * memory).to_integral_value(rounding="ROUND_FLOOR"))
        requests["memory"] = ((memory + overhead) * MIB).to_integral_value()
    gpu = mapping(part.get("gpu"))
    if gpu.get("name"):
        requests[str(gpu["name"])] = Decimal(as_int(gpu.get("quantity"), 1))
    return format_requests(requests)


def _executors(app_spec: Obj, count: int) -> ExpectedMember:
    executor = mapping(app_spec.get("executor"))
    return ExpectedMember(
        role="executor",
        count=count,
        requests=role_requests(app_spec),
        node_selector={**mapping(app_spec.get("nodeSelector")), **mapping(executor.get("nodeSelector"))},
        tolerations=tuple(executor.get("tolerations") or ()),
        affinity=mapping(executor.get("affinity")) or None,
    )


def spark_membership(pod: Obj, app: Obj) -> Membership:
    """Shared by both Spark kinds: the SparkApplication run defines the gang."""
    app_spec = spec(app)
    executors = executor_count(app_spec)
    group, size = name_of(app), 1 + executors
    if labels_of(pod).get(ROLE_LABEL) == "executor":
        return Membership(True, "Spark executor: late member, created by the driver", group, size, late=True)
    if labels_of(pod).get(ROLE_LABEL) == "driver":
        expected = (_executors(app_spec, executors),) if executors else ()
        return Membership(True, f"Spark driver: first stage, expects {executors} executor(s)", group, size,
                          expected=expected)
    return not_member(f"pod has no {ROLE_LABEL} label of driver or executor")


def driver_pod(app: Obj) -> Obj:
    """The driver pod as spark-submit creates it for the operator, as far as admission and planning read it: its
    role label, resources (requests; memory and any coreLimit or GPU as limits), placement and scheduler."""
    app_spec, meta = spec(app), mapping(app.get("metadata"))
    driver = mapping(app_spec.get("driver"))
    requests = role_requests(app_spec, "driver")
    limits = {"memory": requests["memory"]} if "memory" in requests else {}
    if driver.get("coreLimit"):
        limits["cpu"] = str(driver["coreLimit"])
    limits.update({k: v for k, v in requests.items() if k not in ("cpu", "memory")})
    container = {"name": "spark-kubernetes-driver", "image": driver.get("image") or app_spec.get("image"),
                 "resources": {"requests": {k: requests[k] for k in ("cpu", "memory") if k in requests},
                               "limits": limits}}
    pod_spec: Obj = {"containers": [container], "restartPolicy": "Never"}
    if driver.get("serviceAccount"):
        pod_spec["serviceAccountName"] = driver["serviceAccount"]
    selector = {**mapping(app_spec.get("nodeSelector")), **mapping(driver.get("nodeSelector"))}
    if selector:
        pod_spec["nodeSelector"] = selector
    for field in ("tolerations", "affinity", "priorityClassName"):
        if driver.get(field):
            pod_spec[field] = driver[field]
    scheduler = driver.get("schedulerName") or app_spec.get("batchScheduler")
    if scheduler:
        pod_spec["schedulerName"] = scheduler
    labels = {**mapping(meta.get("labels")), **mapping(driver.get("labels")), ROLE_LABEL: "driver",
              f"{GROUP}/app-name": name_of(app), f"{GROUP}/launched-by-spark-operator": "true"}
    pod_meta: Obj = {"name": f"{name_of(app)}-driver", "labels": labels, "ownerReferences": [controller_ref(app)]}
    if driver.get("annotations"):
        pod_meta["annotations"] = dict(mapping(driver.get("annotations")))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": pod_spec}


def _batch_scheduler(app: Obj) -> str | None:
    scheduler = spec(app).get("batchScheduler")
    return f"SparkApplication uses spec.batchScheduler={scheduler}" if scheduler else None


class SparkApplicationAdapter(WorkloadAdapter):
    kind = Kind(GROUP, "SparkApplication", "sparkapplications")
    non_controller_owners = frozenset({(GROUP, "ScheduledSparkApplication")})
    spec_shape = _SparkShape
    role_label = ROLE_LABEL  # driver, executor (the role of its expected executors)

    def membership(self, pod: Obj, chain: Chain) -> Membership:
        return spark_membership(pod, chain.root)

    def pod_count(self, root: Obj) -> int | None:
        return 1 + executor_count(spec(root))

    def native_scheduler(self, root: Obj) -> str | None:
        return _batch_scheduler(root)

    def roles(self, root: Obj) -> frozenset[str] | None:
        return frozenset({"driver", "executor"})

    def created(self, root: Obj) -> list[Obj] | None:
        """The driver alone, ``<app>-driver`` (its executors come later, from the driver)."""
        return [driver_pod(root)]


class ScheduledSparkApplicationAdapter(WorkloadAdapter):
    """Opt-in on the schedule, one gang per run (the SparkApplication it created)."""

    kind = Kind(GROUP, "ScheduledSparkApplication", "scheduledsparkapplications")
    spec_shape = _ScheduledShape

    def membership(self, pod: Obj, chain: Chain) -> Membership:
        app = chain.find(GROUP, "SparkApplication")
        if app is None:
            return not_member("no SparkApplication between the pod and its ScheduledSparkApplication")
        return spark_membership(pod, app)

    def pod_count(self, root: Obj) -> int | None:
        return 1 + executor_count(mapping(spec(root).get("template")))

    def native_scheduler(self, root: Obj) -> str | None:
        scheduler = mapping(spec(root).get("template")).get("batchScheduler")
        return f"ScheduledSparkApplication uses spec.template.batchScheduler={scheduler}" if scheduler else None


ADAPTERS: tuple[WorkloadAdapter, ...] = (SparkApplicationAdapter(), ScheduledSparkApplicationAdapter())

"""Kubeflow spark-operator (v1beta2) and the Spark driver it launches.

The operator "submits" an application by creating the driver pod ``<app>-driver`` (what spark-submit
does, with the owner reference spark-operator's pod webhook adds) and tracks the app state from it.
Executors are not the operator's: the running driver's ExecutorPodsAllocator creates them, under the
driver's own service account, named ``<app>-<16 hex>-exec-<id>``, in batches
(``spark.kubernetes.allocation.batch.size``/``.delay``), owned by the driver pod (controller) plus,
operator >= 2.4 style, a plain reference to the SparkApplication.
"""

from __future__ import annotations

import hashlib
import re
import time
import uuid

from cluster.apiserver import ApiServer
from cluster.operators.base import PODS, Operator, alive, controller_of, labels, owner_ref, phase, service_account
from cluster.store import Obj, now

APPS = ("sparkoperator.k8s.io", "v1beta2", "sparkapplications")
OP = "sparkoperator.k8s.io"
_UNIT_MIB = {"": 1, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024**2, "p": 1024**3}
_STATE = {"Pending": "SUBMITTED", "Running": "RUNNING", "Succeeded": "COMPLETED", "Failed": "FAILED"}
_EXECUTOR_STATE = {"Pending": "PENDING", "Running": "RUNNING", "Succeeded": "COMPLETED", "Failed": "FAILED"}


def _mib(text: object) -> int:
    """Spark memory strings (``4g``, ``512m``, ``2048``): MiB, a bare number being MiB."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)b?\s*", str(text).lower())
    if not match:
        raise ValueError(f"not a Spark memory size: {text!r}")
    return int(float(match[1]) * _UNIT_MIB[match[2]])


def _seconds(text: object) -> float:
    """Spark time strings (``1s``, ``500ms``; a bare number is seconds here)."""
    value = str(text).strip().lower()
    return float(value[:-2]) / 1000 if value.endswith("ms") else float(value.rstrip("s"))


def _label_value(text: str) -> str:
    value = re.sub(r"[^a-z0-9\-_.]", "-", text.lower())[:63]
    return re.sub(r"^[^a-z0-9]+|[^a-z0-9]+$", "", value)


def executor_count(spec: Obj) -> int:
    """executor.instances (default 1); with dynamic allocation max(instances, initial, min) executors."""
    count = int((spec.get("executor") or {}).get("instances", 1))
    conf, dynamic = spec.get("sparkConf") or {}, spec.get("dynamicAllocation") or {}
    if dynamic.get("enabled") or str(conf.get("spark.dynamicAllocation.enabled")).lower() == "true":
        for key in ("initialExecutors", "minExecutors"):
            count = max(count, int(dynamic.get(key, conf.get(f"spark.dynamicAllocation.{key}", 0))))
    return count


def resources(spec: Obj, role: str) -> Obj:
    """Pod resources Spark derives for ``role``: cpu = coreRequest or cores; memory = memory + overhead."""
    part, conf = spec.get(role) or {}, spec.get("sparkConf") or {}
    memory = _mib(part.get("memory") or conf.get(f"spark.{role}.memory") or "1g")
    factor = float(spec.get("memoryOverheadFactor") or conf.get(f"spark.{role}.memoryOverheadFactor")
                   or conf.get("spark.kubernetes.memoryOverheadFactor")
                   or (0.4 if spec.get("type") in ("Python", "R") else 0.1))
    explicit = part.get("memoryOverhead") or conf.get(f"spark.{role}.memoryOverhead")
    overhead = _mib(explicit) if explicit else max(384, int(factor * memory))
    cpu = str(part.get("coreRequest") or part.get("cores") or 1)
    requests, limits = {"cpu": cpu, "memory": f"{memory + overhead}Mi"}, {"memory": f"{memory + overhead}Mi"}
    if part.get("coreLimit"):
        limits["cpu"] = str(part["coreLimit"])
    gpu = part.get("gpu") or {}
    if gpu.get("name"):
        limits[gpu["name"]] = str(gpu.get("quantity", 1))
    return {"requests": requests, "limits": limits}


def _pod_spec(app: Obj, role: str, container: Obj) -> Obj:
    spec, part = app["spec"], app["spec"].get(role) or {}
    pod_spec: Obj = {"containers": [container], "restartPolicy": "Never"}
    if part.get("serviceAccount"):
        pod_spec["serviceAccountName"] = part["serviceAccount"]
    node_selector = {**(spec.get("nodeSelector") or {}), **(part.get("nodeSelector") or {})}
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    for key in ("tolerations", "affinity", "priorityClassName"):
        if part.get(key):
            pod_spec[key] = part[key]
    scheduler = part.get("schedulerName") or spec.get("batchScheduler")
    if scheduler:
        pod_spec["schedulerName"] = scheduler
    return pod_spec


def _labels(app: Obj, role: str, app_id: str, submission: str) -> dict[str, str]:
    meta, spec = app["metadata"], app["spec"]
    return {**(meta.get("labels") or {}), **((spec.get(role) or {}).get("labels") or {}),
            "spark-app-selector": app_id, "spark-role": role, "spark-app-name": _label_value(meta["name"]),
            "spark-version": str(spec.get("sparkVersion", "")),
            f"{OP}/app-name": meta["name"], f"{OP}/launched-by-spark-operator": "true",
            f"{OP}/mutated-by-spark-operator": "true", f"{OP}/submission-id": submission}


class SparkApplicationController(Operator):
    """spark-operator: submit (create the driver), then mirror the driver's phase into the app state."""

    root = APPS
    identity = ("spark-operator", "spark-operator")

    def sync(self, app: Obj) -> None:
        spec, status = app.get("spec") or {}, app.get("status") or {}
        name, namespace = app["metadata"]["name"], app["metadata"]["namespace"]
        driver_name = ((spec.get("driver") or {}).get("podName")
                       or (spec.get("sparkConf") or {}).get("spark.kubernetes.driver.pod.name") or f"{name}-driver")
        driver = self.get(PODS, namespace, driver_name)
        state = (status.get("applicationState") or {}).get("state", "")
        if driver is None:
            if state in ("", "NEW"):
                self._submit(app, driver_name)
            return
        app_id = labels(driver).get("spark-app-selector", "")
        executors = {p["metadata"]["name"]: _EXECUTOR_STATE.get(phase(p), "UNKNOWN")
                     for p in self.items(PODS, namespace)
                     if labels(p).get("spark-role") == "executor" and labels(p).get("spark-app-selector") == app_id}
        self.patch_status(APPS, app, {
            "applicationState": {"state": _STATE.get(phase(driver), "UNKNOWN")},
            "driverInfo": {"podName": driver_name}, "sparkApplicationId": app_id,
            "submissionID": labels(driver).get(f"{OP}/submission-id", ""), "executorState": executors})

    def _submit(self, app: Obj, driver_name: str) -> None:
        spec = app["spec"]
        submission, app_id = str(uuid.uuid4()), f"spark-{uuid.uuid4().hex}"
        driver_spec = spec.get("driver") or {}
        args = ["driver", "--properties-file", "/opt/spark/conf/spark.properties"]
        if spec.get("mainClass"):
            args += ["--class", spec["mainClass"]]
        args += [spec.get("mainApplicationFile") or "spark-internal", *(spec.get("arguments") or [])]
        container = {"name": "spark-kubernetes-driver", "image": driver_spec.get("image") or spec.get("image"),
                     "args": args, "resources": resources(spec, "driver"),
                     "ports": [{"name": "driver-rpc-port", "containerPort": 7078},
                               {"name": "blockmanager", "containerPort": 7079},
                               {"name": "spark-ui", "containerPort": 4040}],
                     "env": [{"name": "SPARK_APPLICATION_ID", "value": app_id},
                             {"name": "SPARK_DRIVER_BIND_ADDRESS",
                              "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}
        pod_meta: Obj = {"name": driver_name, "labels": _labels(app, "driver", app_id, submission),
                         "ownerReferences": [owner_ref(app)]}
        if driver_spec.get("annotations"):
            pod_meta["annotations"] = dict(driver_spec["annotations"])
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": _pod_spec(app, "driver", container)}
        if self.create(PODS, app, pod) is not None:
            self.patch_status(APPS, app, {"applicationState": {"state": "SUBMITTED"}, "submissionID": submission,
                                          "sparkApplicationId": app_id, "driverInfo": {"podName": driver_name},
                                          "submissionAttempts": 1, "lastSubmissionAttemptTime": now()})


class SparkDriver(Operator):
    """Each running driver's ExecutorPodsAllocator; the executor settings come from the app spec, which the
    operator hands to the driver as Spark conf."""

    root = PODS
    identity = ("spark-operator", "spark-operator")  # reads only: each driver creates as its own service account

    def __init__(self, api: ApiServer) -> None:
        super().__init__(api)
        self._last_batch: dict[str, float] = {}

    def roots(self) -> list[Obj]:
        return [p for p in self.items(PODS) if labels(p).get("spark-role") == "driver" and alive(p)
                and labels(p).get(f"{OP}/launched-by-spark-operator") == "true" and phase(p) == "Running"]

    def sync(self, driver: Obj) -> None:
        meta = driver["metadata"]
        owner = controller_of(driver) or {}
        app = self.get(APPS, meta["namespace"], owner.get("name", "")) if owner.get("kind") == "SparkApplication" \
            else None
        if app is None or app["metadata"]["uid"] != owner.get("uid"):
            return
        app_id = labels(driver)["spark-app-selector"]
        mine = [p for p in self.items(PODS, meta["namespace"])
                if labels(p).get("spark-app-selector") == app_id and labels(p).get("spark-role") == "executor"]
        live = [p for p in mine if alive(p) and phase(p) not in ("Succeeded", "Failed")]
        missing = executor_count(app["spec"]) - len(live)
        conf = app["spec"].get("sparkConf") or {}
        delay = _seconds(conf.get("spark.kubernetes.allocation.batch.delay", "1s"))
        clock = time.monotonic()
        if missing <= 0 or clock - self._last_batch.get(meta["uid"], -delay) < delay:
            return
        self._last_batch[meta["uid"]] = clock
        batch = min(missing, int(conf.get("spark.kubernetes.allocation.batch.size", 10)))
        first = max((int(labels(p).get("spark-exec-id", 0)) for p in mine), default=0) + 1
        account = (driver.get("spec") or {}).get("serviceAccountName") or "default"
        client = type(self.client)(self.api, service_account(meta["namespace"], account))
        for exec_id in range(first, first + batch):
            self.create(PODS, app, self._executor(app, driver, exec_id), client=client)

    @staticmethod
    def _executor(app: Obj, driver: Obj, exec_id: int) -> Obj:
        spec, dmeta = app["spec"], driver["metadata"]
        app_id = labels(driver)["spark-app-selector"]
        prefix = f"{_label_value(app['metadata']['name'])}-{hashlib.sha1(dmeta['uid'].encode()).hexdigest()[:16]}"
        name = f"{prefix}-exec-{exec_id}"
        part = spec.get("executor") or {}
        pod_labels = {**_labels(app, "executor", app_id, labels(driver).get(f"{OP}/submission-id", "")),
                      "spark-exec-id": str(exec_id), "spark-exec-resourceprofile-id": "0"}
        container = {"name": "spark-kubernetes-executor", "image": part.get("image") or spec.get("image"),
                     "args": ["executor"], "resources": resources(spec, "executor"),
                     "ports": [{"name": "blockmanager", "containerPort": 7079}],
                     "env": [{"name": "SPARK_EXECUTOR_ID", "value": str(exec_id)},
                             {"name": "SPARK_APPLICATION_ID", "value": app_id},
                             {"name": "SPARK_EXECUTOR_POD_NAME", "value": name},
                             {"name": "SPARK_DRIVER_URL",
                              "value": f"spark://CoarseGrainedScheduler@{dmeta['name']}-svc:7078"},
                             {"name": "SPARK_EXECUTOR_CORES", "value": str(part.get("cores", 1))},
                             {"name": "SPARK_EXECUTOR_MEMORY", "value": str(part.get("memory", "1g"))}]}
        pod_spec = _pod_spec(app, "executor", container)
        pod_spec["hostname"] = name[:63].rstrip("-.")
        pod_meta: Obj = {"name": name, "labels": pod_labels,
                         "ownerReferences": [owner_ref(app, controller=False),
                                             owner_ref(driver, controller=True, block=False)]}
        if part.get("annotations"):
            pod_meta["annotations"] = dict(part["annotations"])
        return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": pod_spec}

"""Kubeflow spark-operator (v1beta2, operator 2.x) and the Spark driver it launches.

The operator "submits" an application by creating the driver pod ``<app>-driver`` (what spark-submit does, owned
by the SparkApplication) and follows the app through the states of its reconciler:

- NEW: submit. Success: SUBMITTED, ``submissionAttempts`` and ``executionAttempts`` + 1,
  ``lastSubmissionAttemptTime``; the driver refused (e.g. by admission): SUBMISSION_FAILED
  (v1beta2 ApplicationStateFailedSubmission).
- SUBMITTED/RUNNING follow the driver (Pending, Running); driver Succeeded -> SUCCEEDING; driver Failed (also
  rejected by its kubelet) or *driver pod not found* (deleted) -> FAILING.
- FAILING / SUBMISSION_FAILED: ``ShouldRetry`` per ``spec.restartPolicy`` (defaulted as the operator's webhook
  does: type Never; retry intervals 5 s): Never -> FAILED; Always -> retry; OnFailure -> retry while
  ``executionAttempts`` <= ``onFailureRetries`` (resp. ``submissionAttempts`` <= ``onSubmissionFailureRetries``).
  A retry waits until ``onFailureRetryInterval`` x ``submissionAttempts`` seconds after the last submission
  (``isNextRetryDue``), deletes the driver (grace period 0) and goes PENDING_RERUN; once the driver is gone the
  status is reset (``submissionAttempts`` 0) and the app submitted again, with a new app id. SUCCEEDING
  reruns under Always, else COMPLETED. COMPLETED and FAILED are final.

Executors are not the operator's: the running driver's ExecutorPodsAllocator creates them, under the driver's
own service account, named ``<app>-<16 hex>-exec-<id>`` (ids never reused by a driver), in batches
(``spark.kubernetes.allocation.batch.size``/``.delay``), owned by the driver pod alone (controller), as
spark-operator does again since kubeflow/spark-operator#3152; operators from 2.4 (#2670) to that fix also
added a plain reference to the SparkApplication, which kept executors alive after their driver was deleted
(#2961). A driver deleted thus takes its executors with it (garbage collection); executors that are deleted or
fail are replaced by the driver (failed ones deleted first, ``spark.kubernetes.executor.deleteOnTermination``).
"""

from __future__ import annotations

import datetime
import hashlib
import re
import time
import uuid

from cluster.apiserver import ApiServer
from cluster.operators.base import (
    PODS,
    Operator,
    alive,
    controlled_by,
    controller_of,
    labels,
    owner_ref,
    phase,
    service_account,
    url,
)
from cluster.store import ApiError, Obj, now, parse_time

APPS = ("sparkoperator.k8s.io", "v1beta2", "sparkapplications")
OP = "sparkoperator.k8s.io"
_UNIT_MIB = {"": 1, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024**2, "p": 1024**3}
_STATE = {"Pending": "SUBMITTED", "Running": "RUNNING", "Succeeded": "SUCCEEDING", "Failed": "FAILING"}
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


def restart_policy(spec: Obj) -> Obj:
    """spec.restartPolicy with the defaults spark-operator's webhook sets (type Never; intervals 5 s)."""
    policy = dict(spec.get("restartPolicy") or {})
    policy.setdefault("type", "Never")
    if policy["type"] != "Never":
        policy.setdefault("onFailureRetryInterval", 5)
        policy.setdefault("onSubmissionFailureRetryInterval", 5)
    return policy


def should_retry(spec: Obj, status: Obj) -> bool:
    """``util.ShouldRetry``."""
    policy, state = restart_policy(spec), (status.get("applicationState") or {}).get("state")
    if state == "SUCCEEDING":
        return bool(policy["type"] == "Always")
    if state not in ("FAILING", "SUBMISSION_FAILED") or policy["type"] == "Never":
        return False
    if policy["type"] == "Always":
        return True
    attempts, limit = ((status.get("executionAttempts", 0), policy.get("onFailureRetries")) if state == "FAILING"
                       else (status.get("submissionAttempts", 0), policy.get("onSubmissionFailureRetries")))
    return limit is not None and attempts <= int(limit)


def next_retry_due(spec: Obj, status: Obj) -> bool:
    """``isNextRetryDue``: onFailureRetryInterval x submissionAttempts since lastSubmissionAttemptTime."""
    interval, attempts = restart_policy(spec).get("onFailureRetryInterval"), status.get("submissionAttempts", 0)
    last = status.get("lastSubmissionAttemptTime")
    if interval is None or not last or attempts <= 0:
        return False
    due = parse_time(last) + datetime.timedelta(seconds=float(interval) * attempts)
    return datetime.datetime.now(datetime.UTC) > due


class SparkApplicationController(Operator):
    """spark-operator's SparkApplication reconciler: submission, state from the driver, retries."""

    root = APPS
    identity = ("spark-operator", "spark-operator")

    def sync(self, app: Obj) -> None:
        spec, status = app.get("spec") or {}, dict(app.get("status") or {})
        name, namespace = app["metadata"]["name"], app["metadata"]["namespace"]
        driver_name = ((spec.get("driver") or {}).get("podName")
                       or (spec.get("sparkConf") or {}).get("spark.kubernetes.driver.pod.name") or f"{name}-driver")
        driver = self.get(PODS, namespace, driver_name)
        if driver is not None and not controlled_by(driver, app):
            driver = None
        state = (status.get("applicationState") or {}).get("state", "") or "NEW"
        if state == "NEW":
            self._submit(app, driver_name, status)
        elif state in ("SUBMITTED", "RUNNING", "UNKNOWN"):
            self._follow(app, driver, driver_name, status)
        elif state in ("FAILING", "SUBMISSION_FAILED"):
            if not should_retry(spec, status):
                self.patch_status(APPS, app, {"applicationState": {**status["applicationState"], "state": "FAILED"},
                                              "terminationTime": status.get("terminationTime") or now()})
            elif next_retry_due(spec, status):
                if driver is not None:
                    self.delete(PODS, driver, grace=0)
                self.patch_status(APPS, app, {"applicationState": {"state": "PENDING_RERUN"}})
        elif state == "SUCCEEDING":
            if should_retry(spec, status):
                if driver is not None:
                    self.delete(PODS, driver, grace=0)
                self.patch_status(APPS, app, {"applicationState": {"state": "PENDING_RERUN"}})
            else:
                self.patch_status(APPS, app, {"applicationState": {"state": "COMPLETED"}})
        elif state == "PENDING_RERUN" and driver is None:  # resetSparkApplicationStatus, then submit
            self._submit(app, driver_name, {**status, "sparkApplicationId": "", "submissionAttempts": 0,
                                            "driverInfo": {}, "executorState": None})

    def _follow(self, app: Obj, driver: Obj | None, driver_name: str, status: Obj) -> None:
        """``updateDriverState`` and ``updateExecutorState``."""
        if driver is None:
            self.patch_status(APPS, app, {"applicationState": {"state": "FAILING",
                                                               "errorMessage": "driver pod not found"},
                                          "terminationTime": now()})
            return
        state = _STATE.get(phase(driver), "UNKNOWN")
        update: Obj = {"applicationState": {"state": state}, "driverInfo": {"podName": driver_name}}
        if state == "FAILING":
            update["applicationState"]["errorMessage"] = (driver.get("status") or {}).get("message", "")
            update["terminationTime"] = now()
        app_id = labels(driver).get("spark-app-selector", "")
        update["executorState"] = {p["metadata"]["name"]: _EXECUTOR_STATE.get(phase(p), "UNKNOWN")
                                   for p in self.items(PODS, app["metadata"]["namespace"])
                                   if labels(p).get("spark-role") == "executor"
                                   and labels(p).get("spark-app-selector") == app_id} or None
        self.patch_status(APPS, app, update)

    def _submit(self, app: Obj, driver_name: str, status: Obj) -> None:
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
        attempts = status.get("submissionAttempts", 0) + 1
        try:
            self.client.create(url(PODS, app["metadata"]["namespace"]), pod)
        except ApiError as exc:
            self.event(app, "SparkApplicationSubmissionFailed", f"failed to submit SparkApplication "
                                                                f"{app['metadata']['name']}: {exc.message}")
            self.patch_status(APPS, app, {"applicationState": {"state": "SUBMISSION_FAILED",
                                                               "errorMessage": exc.message},
                                          "submissionAttempts": attempts, "lastSubmissionAttemptTime": now()})
            return
        self.patch_status(APPS, app, {"applicationState": {"state": "SUBMITTED"}, "submissionID": submission,
                                      "sparkApplicationId": app_id, "driverInfo": {"podName": driver_name},
                                      "submissionAttempts": attempts,
                                      "executionAttempts": status.get("executionAttempts", 0) + 1,
                                      "lastSubmissionAttemptTime": now(), "executorState": None})


class SparkDriver(Operator):
    """Each running driver's ExecutorPodsAllocator; the executor settings come from the app spec, which the
    operator hands to the driver as Spark conf."""

    root = PODS
    identity = ("spark-operator", "spark-operator")  # reads only: each driver creates as its own service account

    def __init__(self, api: ApiServer) -> None:
        super().__init__(api)
        self._last_batch: dict[str, float] = {}
        self._next_id: dict[str, int] = {}  # driver uid -> next executor id (EXECUTOR_ID_COUNTER)

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
        for pod in mine:  # deleteOnTermination: the allocator removes executors that ended
            if phase(pod) in ("Succeeded", "Failed"):
                self.delete(PODS, pod)
        live = [p for p in mine if alive(p) and phase(p) not in ("Succeeded", "Failed")]
        missing = executor_count(app["spec"]) - len(live)
        conf = app["spec"].get("sparkConf") or {}
        delay = _seconds(conf.get("spark.kubernetes.allocation.batch.delay", "1s"))
        clock = time.monotonic()
        if missing <= 0 or clock - self._last_batch.get(meta["uid"], -delay) < delay:
            return
        self._last_batch[meta["uid"]] = clock
        batch = min(missing, int(conf.get("spark.kubernetes.allocation.batch.size", 10)))
        first = max([self._next_id.get(meta["uid"], 1)]
                    + [int(labels(p).get("spark-exec-id", 0)) + 1 for p in mine])
        self._next_id[meta["uid"]] = first + batch
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
                         "ownerReferences": [owner_ref(driver, controller=True, block=False)]}
        if part.get("annotations"):
            pod_meta["annotations"] = dict(part["annotations"])
        return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": pod_spec}


OPERATORS: dict[str, type[Operator]] = {"spark-operator": SparkApplicationController, "spark-driver": SparkDriver}

"""Server-side printing: the ``meta.k8s.io`` ``Table`` the apiserver answers when a client asks for one.

kubectl sends ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;
g=meta.k8s.io,application/json`` on every ``get`` it prints for a human, and prints the cells it gets back: the
columns of ``kubectl get pods`` (READY, STATUS, RESTARTS, ...) are computed by the apiserver, not by kubectl. Ported
from kubernetes/kubernetes (read the source, not memory):

  staging/src/k8s.io/apiserver/pkg/endpoints/handlers/response.go   ``asTable``: ``includeObject`` (``Metadata`` by
      default: each row's object is a ``PartialObjectMetadata``; ``Object``: the object itself; ``None``), the
      table's ``metadata.resourceVersion``; NotAcceptable for another Table group version
  staging/src/k8s.io/apiserver/pkg/endpoints/handlers/watch.go      a watch answers one Table per event, with the
      column definitions in the first only (``TableOptions.NoHeaders`` after it), so kubectl prints the header once
  pkg/printers/storage/storage.go     built-in kinds are printed with ``GenerateOptions{Wide: true}``: the cells
      of the priority-1 columns (``-o wide``) are always there, kubectl hides them unless asked
  pkg/printers/internalversion/printers.go   ``printPod`` (READY, STATUS as ``SchedulingGated``, ``Init:1/2``,
      ``Completed``, ``Terminating``, ``OOMKilled``, ..., RESTARTS with "(5m ago)", IP, NODE, NOMINATED NODE, READINESS
      GATES), ``printNode`` (Ready/NotReady/Unknown, SchedulingDisabled; ROLES from ``node-role.kubernetes.io/*``
      and ``kubernetes.io/role``), ``printEvent``, ``printNamespace``, ``printConfigMap``, ``printSecret``,
      ``printServiceAccount``, ``printLease``, ``printJob``, ``printStatefulSet``, ``printDeployment``, the webhook
      configurations', ``printRoleBinding``, ``printPriorityClass``, ``printPodDisruptionBudget``
  staging/src/k8s.io/apiserver/pkg/registry/rest/table.go           every other kind: NAME and "Created At" (a
      ``date`` column whose cell is the RFC 3339 timestamp itself; kubectl prints it as is)
  staging/src/k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor/tableconvertor.go
      custom resources: NAME, then the served version's ``additionalPrinterColumns`` (an ``Age`` date column when it
      has none, ``serveDefaultColumnsIfEmpty``), each a JSONPath whose first result is the cell: ``string`` columns
      print it as jsonpath does (JSON for maps and lists), ``integer``/``number``/``boolean`` take a JSON value of
      that type (else the cell is null: kubectl prints nothing), and ``date`` columns are converted *by the server*
      into an age (``ConvertToHumanReadableDateType``: "5m", ``<invalid>`` for an unparsable time). kubectl converts
      nothing.
  staging/src/k8s.io/apimachinery/pkg/util/duration/duration.go     ``HumanDuration``, the AGE text

Kinds served here whose real printer is not ported (Services, NetworkPolicies) get the
default table, so ``kubectl get`` shows fewer columns for them than on a cluster.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cluster.resources import PrinterColumn, Resource
from cluster.store import ApiError, Obj

TABLE_VERSIONS = ("meta.k8s.io/v1", "meta.k8s.io/v1beta1")
INCLUDE_OBJECT = ("Metadata", "None", "Object")

NAME_DOC = ("Name must be unique within a namespace. Is required when creating resources, although some resources "
            "may allow a client to request the generation of an appropriate name automatically. Name is primarily "
            "intended for creation idempotence and configuration definition. Cannot be updated. More info: "
            "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names")
CREATED_DOC = ("CreationTimestamp is a timestamp representing the server time when this object was created. It is "
               "not guaranteed to be set in happens-before order across separate operations. Clients may not set "
               "this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. "
               "Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/"
               "api-conventions.md#metadata")


# --- content negotiation ---------------------------------------------------------------------------------------


def negotiate(accept: str) -> str | None:
    """The Table group version the ``Accept`` header asks for (``meta.k8s.io/v1``), None for the object itself.

    Media ranges are tried by quality, then in order (``goautoneg``); JSON with ``as=Table;g=meta.k8s.io`` and a
    Table version is a Table, JSON without ``as`` the object. Ranges this emulator does not produce (protobuf, YAML,
    ``as=PartialObjectMetadata``, another Table version) are skipped; when none is left, the object is served as
    JSON (where the apiserver would answer 406: lenient, as the emulator was before it printed tables).
    """
    ranges = []
    for index, part in enumerate(accept.split(",")):
        media, *params = [p.strip() for p in part.split(";")]
        options = {k.strip(): v.strip() for k, _, v in (p.partition("=") for p in params)}
        try:
            quality = float(options.pop("q", "1"))
        except ValueError:
            quality = 1.0
        ranges.append((-quality, index, media.lower(), options))
    for _, _, media, options in sorted(ranges):
        if media not in ("application/json", "application/*", "*/*"):
            continue
        conversion = options.get("as")
        if not conversion:
            return None
        version = f"{options.get('g', '')}/{options.get('v', '')}"
        if conversion == "Table" and version in TABLE_VERSIONS:
            return version
    return None


def include_object(query: dict[str, str]) -> str:
    """``TableOptions.includeObject``, validated as ``ValidateTableOptions`` does."""
    value = query.get("includeObject", "") or "Metadata"
    if value not in INCLUDE_OBJECT:
        raise ApiError(400, "BadRequest", 'Unable to convert to Table as requested: includeObject: Unsupported value: '
                                          f'"{value}": supported values: "Metadata", "None", "Object"')
    return value


# --- time ------------------------------------------------------------------------------------------------------


def parse_time(text: Any) -> datetime.datetime | None:
    """An RFC 3339 timestamp (metav1.Time, or MicroTime with its fraction), None when absent or unparsable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def human_duration(seconds: float) -> str:
    """``duration.HumanDuration``: ~2-3 significant figures ("45s", "5m30s", "3h", "4d2h", "2y30d")."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        rest = whole % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        rest = (hours // 24) % 365
        return f"{hours // 24 // 365}y{rest}d" if rest else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def clock() -> datetime.datetime:
    """Now, as ages are computed (tests set it)."""
    return datetime.datetime.now(datetime.UTC)


def since(text: Any) -> str:
    """``translateTimestampSince``: the age of a timestamp, ``<unknown>`` when there is none."""
    moment = parse_time(text)
    if moment is None:
        return "<unknown>"
    return human_duration((clock() - moment).total_seconds())


# --- JSONPath (the subset additionalPrinterColumns use) --------------------------------------------------------

_STEP = re.compile(r"""\.(?P<field>[^.\[\]]+)|\[(?:(?P<index>-?\d+)|'(?P<sq>[^']*)'|"(?P<dq>[^"]*)"|(?P<star>\*)"""
                   r"""|\?\(@\.(?P<fpath>[\w.\-/]+)\s*==\s*(?:'(?P<fsq>[^']*)'|"(?P<fdq>[^"]*)"|(?P<fnum>-?[\d.]+))\))\]""")


def json_path(path: str, obj: Any) -> list[Any]:
    """The results of a simple JSONPath (``.status.phase``, ``.spec.items[0].name``, ``.metadata.labels['a.b/c']``,
    ``.status.conditions[?(@.type=="Ready")].status``, ``[*]``) with missing keys allowed (``AllowMissingKeys``).
    An expression beyond this subset yields nothing (the cell is null)."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    text = text.removeprefix("$")
    results = [obj]
    position = 0
    while position < len(text):
        match = _STEP.match(text, position)
        if match is None:
            return []
        position = match.end()
        following: list[Any] = []
        for value in results:
            key = match["field"] if match["field"] is not None else match["sq"] if match["sq"] is not None \
                else match["dq"]
            if key is not None:
                if isinstance(value, dict) and key in value:
                    following.append(value[key])
            elif match["index"] is not None:
                index = int(match["index"])
                if isinstance(value, list) and -len(value) <= index < len(value):
                    following.append(value[index])
            elif match["star"]:
                following.extend(value if isinstance(value, list) else value.values() if isinstance(value, dict)
                                 else [])
            elif isinstance(value, list):
                wanted: Any = match["fsq"] if match["fsq"] is not None else match["fdq"]
                if wanted is None:
                    wanted = float(match["fnum"])
                for item in value:
                    found = json_path("." + match["fpath"], item)
                    if found and (found[0] == wanted or (isinstance(wanted, float) and isinstance(found[0], int | float)
                                                         and not isinstance(found[0], bool)
                                                         and float(found[0]) == wanted)):
                        following.append(item)
        results = following
    return results


def _text(value: Any) -> str:
    """jsonpath's ``PrintResults``: JSON for maps and lists, ``fmt.Print`` of a scalar."""
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def custom_cell(column: PrinterColumn, obj: Obj) -> Any:
    """``tableconvertor.ConvertToTable`` and ``cellForJSONValue`` for one additional printer column."""
    found = json_path(column.json_path, obj)
    if not found or found[0] is None:
        return None
    value = found[0]
    if column.type == "string":
        return _text(value)
    if column.type == "integer" and isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    if column.type == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return value
    if column.type == "boolean" and isinstance(value, bool):
        return value
    if column.type == "date" and isinstance(value, str):
        return since(value) if parse_time(value) is not None else "<invalid>"
    return None


# --- printers --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Col:
    name: str
    type: str = "string"
    description: str = ""
    format: str = ""
    priority: int = 0

    def definition(self) -> Obj:
        return {"name": self.name, "type": self.type, "format": self.format, "description": self.description,
                "priority": self.priority}


NAME = Col("Name", format="name", description=NAME_DOC)
AGE = Col("Age", description=CREATED_DOC)
Row = tuple[list[Any], list[Obj] | None]  # cells, row conditions
Printer = Callable[[Obj], Row]


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _dict(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _age(obj: Obj) -> str:
    return since(_meta(obj).get("creationTimestamp"))


def _condition_true(conditions: Any, kind: str) -> bool:
    return any(_dict(c).get("type") == kind and _dict(c).get("status") == "True" for c in _list(conditions))


def _restartable(container: Any) -> bool:
    """``podutil.IsRestartableInitContainer``: a sidecar (an init container with restartPolicy Always)."""
    return isinstance(container, dict) and container.get("restartPolicy") == "Always"


def _later(first: Any, second: Any) -> Any:
    """The later of two timestamps (either may be absent)."""
    a, b = parse_time(first), parse_time(second)
    if b is not None and (a is None or a < b):
        return second
    return first


_POD_SUCCEEDED = [{"type": "Completed", "status": "True", "reason": "Succeeded",
                   "message": "The pod has completed successfully."}]
_POD_FAILED = [{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}]
NODE_UNREACHABLE_POD_REASON = "NodeLost"


def print_pod(pod: Obj) -> Row:  # noqa: C901, PLR0912 (printPod's own branching, kept as upstream has it)
    """``printPod``: NAME, READY, STATUS, RESTARTS, AGE, IP, NODE, NOMINATED NODE, READINESS GATES."""
    spec, status = _dict(pod.get("spec")), _dict(pod.get("status"))
    containers, init_containers = _list(spec.get("containers")), _list(spec.get("initContainers"))
    restarts = sidecar_restarts = ready = 0
    total = len(containers)
    last_restart: Any = None
    last_sidecar_restart: Any = None
    phase = str(status.get("phase") or "")
    reason = str(status.get("reason") or "") or phase
    if any(_dict(c).get("type") == "PodScheduled" and _dict(c).get("reason") == "SchedulingGated"
           for c in _list(status.get("conditions"))):
        reason = "SchedulingGated"
    conditions = _POD_SUCCEEDED if phase == "Succeeded" else _POD_FAILED if phase == "Failed" else None

    by_name = {c.get("name"): c for c in init_containers if isinstance(c, dict)}
    total += sum(1 for c in init_containers if _restartable(c))
    initializing = False
    for index, raw in enumerate(_list(status.get("initContainerStatuses"))):
        container = _dict(raw)
        state, last = _dict(container.get("state")), _dict(container.get("lastState"))
        restarts += int(container.get("restartCount") or 0)
        terminated_before = _dict(last.get("terminated"))
        if terminated_before:
            last_restart = _later(last_restart, terminated_before.get("finishedAt"))
        sidecar = _restartable(by_name.get(container.get("name")))
        if sidecar:
            sidecar_restarts += int(container.get("restartCount") or 0)
            if terminated_before:
                last_sidecar_restart = _later(last_sidecar_restart, terminated_before.get("finishedAt"))
        terminated, waiting = _dict(state.get("terminated")), _dict(state.get("waiting"))
        if terminated and int(terminated.get("exitCode") or 0) == 0:
            continue
        if sidecar and container.get("started"):
            ready += 1 if container.get("ready") else 0
            continue
        if terminated:
            if not terminated.get("reason"):
                reason = f"Init:Signal:{terminated['signal']}" if terminated.get("signal") else \
                    f"Init:ExitCode:{int(terminated.get('exitCode') or 0)}"
            else:
                reason = f"Init:{terminated['reason']}"
        elif waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = f"Init:{waiting['reason']}"
        else:
            reason = f"Init:{index}/{len(init_containers)}"
        initializing = True
        break

    if not initializing or _condition_true(status.get("conditions"), "Initialized"):
        restarts, last_restart = sidecar_restarts, last_sidecar_restart
        running = False
        for raw in reversed(_list(status.get("containerStatuses"))):
            container = _dict(raw)
            state, last = _dict(container.get("state")), _dict(container.get("lastState"))
            restarts += int(container.get("restartCount") or 0)
            terminated_before = _dict(last.get("terminated"))
            if terminated_before:
                last_restart = _later(last_restart, terminated_before.get("finishedAt"))
            terminated, waiting = _dict(state.get("terminated")), _dict(state.get("waiting"))
            if waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated:
                reason = f"Signal:{terminated['signal']}" if terminated.get("signal") else \
                    f"ExitCode:{int(terminated.get('exitCode') or 0)}"
            elif container.get("ready") and "running" in state:
                running = True
                ready += 1
        if reason == "Completed" and running:
            reason = "Running" if _condition_true(status.get("conditions"), "Ready") else "NotReady"

    deleting = bool(_meta(pod).get("deletionTimestamp"))
    if deleting and status.get("reason") == NODE_UNREACHABLE_POD_REASON:
        reason = "Unknown"
    elif deleting and phase not in ("Succeeded", "Failed"):
        reason = "Terminating"

    restarts_text = str(restarts)
    if restarts and parse_time(last_restart) is not None:
        restarts_text = f"{restarts} ({since(last_restart)} ago)"

    ips = _list(status.get("podIPs"))
    ip = str(_dict(ips[0]).get("ip") or "") if ips else ""
    gates = _list(spec.get("readinessGates"))
    readiness = "<none>"
    if gates:
        by_type: dict[Any, Obj] = {}
        for c in _list(status.get("conditions")):
            by_type.setdefault(_dict(c).get("type"), _dict(c))
        met = sum(1 for g in gates if by_type.get(_dict(g).get("conditionType"), {}).get("status") == "True")
        readiness = f"{met}/{len(gates)}"
    return ([_meta(pod).get("name", ""), f"{ready}/{total}", reason, restarts_text, _age(pod),
             ip or "<none>", spec.get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>",
             readiness], conditions)


POD_COLUMNS = [
    NAME,
    Col("Ready", description="The aggregate readiness state of this pod for accepting traffic."),
    Col("Status", description="The aggregate status of the containers in this pod."),
    Col("Restarts", description="The number of times the containers in this pod have been restarted and when the "
                                "last container in this pod has restarted."),
    AGE,
    Col("IP", priority=1, description="podIP address allocated to the pod. Routable at least within the cluster. "
                                      "Empty if not yet allocated."),
    Col("Node", priority=1, description="NodeName indicates in which node this pod is scheduled. If empty, this pod "
                                        "is a candidate for scheduling by the scheduler defined in schedulerName."),
    Col("Nominated Node", priority=1, description="nominatedNodeName is set only when this pod preempts other pods "
                                                  "on the node, but it cannot be scheduled right away as preemption "
                                                  "victims receive their graceful termination periods."),
    Col("Readiness Gates", priority=1, description="If specified, all readiness gates will be evaluated for pod "
                                                   "readiness."),
]


def print_node(node: Obj) -> Row:
    """``printNode``: NAME, STATUS, ROLES, AGE, VERSION (+ INTERNAL-IP, EXTERNAL-IP, OS-IMAGE, KERNEL-VERSION,
    CONTAINER-RUNTIME)."""
    spec, status, labels = _dict(node.get("spec")), _dict(node.get("status")), _dict(_meta(node).get("labels"))
    ready = next((_dict(c) for c in _list(status.get("conditions")) if _dict(c).get("type") == "Ready"), None)
    states = ["Unknown"] if ready is None else ["Ready" if ready.get("status") == "True" else "NotReady"]
    if spec.get("unschedulable"):
        states.append("SchedulingDisabled")
    roles = sorted({key.removeprefix("node-role.kubernetes.io/") for key in labels
                    if key.startswith("node-role.kubernetes.io/") and key != "node-role.kubernetes.io/"}
                   | {str(value) for key, value in labels.items() if key == "kubernetes.io/role" and value})
    info = _dict(status.get("nodeInfo"))

    def address(kind: str) -> str:
        return next((str(_dict(a).get("address")) for a in _list(status.get("addresses"))
                     if _dict(a).get("type") == kind), "<none>")

    return ([_meta(node).get("name", ""), ",".join(states), ",".join(roles) or "<none>", _age(node),
             info.get("kubeletVersion", ""), address("InternalIP"), address("ExternalIP"),
             info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
             info.get("containerRuntimeVersion") or "<unknown>"], None)


NODE_COLUMNS = [
    NAME,
    Col("Status", description="The status of the node"),
    Col("Roles", description="The roles of the node"),
    AGE,
    Col("Version", description="Kubelet Version reported by the node."),
    Col("Internal-IP", priority=1, description="List of addresses reachable to the node."),
    Col("External-IP", priority=1, description="List of addresses reachable to the node."),
    Col("OS-Image", priority=1, description="OS Image reported by the node from /etc/os-release (e.g. Debian "
                                            "GNU/Linux 7 (wheezy))."),
    Col("Kernel-Version", priority=1, description="Kernel Version reported by the node from 'uname -r' (e.g. "
                                                  "3.16.0-0.bpo.4-amd64)."),
    Col("Container-Runtime", priority=1, description="ContainerRuntime Version reported by the node through runtime "
                                                     "remote API (e.g. containerd://1.4.2)."),
]


def print_event(event: Obj) -> Row:
    """``printEvent`` over a core/v1 Event: LAST SEEN (the series' lastObservedTime when there is a series),
    TYPE, REASON, OBJECT, MESSAGE (+ SUBOBJECT, SOURCE, FIRST SEEN, COUNT, NAME)."""
    first = since(event.get("firstTimestamp")) if parse_time(event.get("firstTimestamp")) else \
        since(event.get("eventTime"))
    last = since(event.get("lastTimestamp")) if parse_time(event.get("lastTimestamp")) else first
    count = int(event.get("count") or 0)
    series = event.get("series")
    if isinstance(series, dict):
        last, count = since(series.get("lastObservedTime")), int(series.get("count") or 0)
    elif count == 0:
        count = 1  # singleton events of the new API carry no count
    involved, source = _dict(event.get("involvedObject")), _dict(event.get("source"))
    kind = str(involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    component = source.get("component") or event.get("reportingComponent") or ""
    instance = source.get("host") or event.get("reportingInstance") or ""
    return ([last, event.get("type", ""), event.get("reason", ""), target, involved.get("fieldPath", ""),
             f"{component}, {instance}" if instance else component, str(event.get("message") or "").strip(), first,
             count, _meta(event).get("name", "")], None)


EVENT_COLUMNS = [
    Col("Last Seen", description="The time at which the most recent occurrence of this event was recorded."),
    Col("Type", description="Type of this event (Normal, Warning), new types could be added in the future"),
    Col("Reason", description="This should be a short, machine understandable string that gives the reason for the "
                              "transition into the object's current status."),
    Col("Object", description="The object that this event is about."),
    Col("Subobject", priority=1, description="If referring to a piece of an object instead of an entire object, "
                                             "this string should contain a valid JSON/Go field access statement."),
    Col("Source", priority=1, description="The component reporting this event. Should be a short machine "
                                          "understandable string."),
    Col("Message", description="A human-readable description of the status of this operation."),
    Col("First Seen", priority=1, description="The time at which the event was first recorded. (Time of server "
                                              "receipt is in TypeMeta.)"),
    Col("Count", priority=1, description="The number of times this event has occurred."),
    Col("Name", priority=1, format="name", description=NAME_DOC),
]


def _selector(selector: Any) -> str:
    """``metav1.FormatLabelSelector``: requirements sorted by key, ``<none>`` for an empty or absent selector."""
    if not isinstance(selector, dict):
        return "<none>"
    parts = [(str(k), f"{k}={v}") for k, v in _dict(selector.get("matchLabels")).items()]
    for expression in _list(selector.get("matchExpressions")):
        expression = _dict(expression)
        key, operator = str(expression.get("key", "")), expression.get("operator")
        values = ",".join(sorted(str(v) for v in _list(expression.get("values"))))
        text = {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})", "Exists": key,
                "DoesNotExist": f"!{key}"}.get(str(operator))
        if text is None:
            return "<error>"
        parts.append((key, text))
    return ",".join(text for _, text in sorted(parts)) or "<none>"


def _containers(template: Any) -> list[str]:
    """``layoutContainerCells`` of a pod template: container names, images."""
    containers = [_dict(c) for c in _list(_dict(_dict(template).get("spec")).get("containers"))]
    return [",".join(str(c.get("name", "")) for c in containers), ",".join(str(c.get("image", "")) for c in containers)]


def print_job(job: Obj) -> Row:
    spec, status = _dict(job.get("spec")), _dict(job.get("status"))
    if spec.get("completions") is not None:
        completions = f"{int(status.get('succeeded') or 0)}/{spec['completions']}"
    elif int(spec.get("parallelism") or 0) > 1:
        completions = f"{int(status.get('succeeded') or 0)}/1 of {spec['parallelism']}"
    else:
        completions = f"{int(status.get('succeeded') or 0)}/1"
    start, end = parse_time(status.get("startTime")), parse_time(status.get("completionTime"))
    duration = "" if start is None else since(status.get("startTime")) if end is None else \
        human_duration((end - start).total_seconds())

    def condition(kind: str) -> bool:
        return next((_dict(c).get("status") == "True" for c in _list(status.get("conditions"))
                     if _dict(c).get("type") == kind), False)

    state = "Complete" if condition("Complete") else "Failed" if condition("Failed") else \
        "Terminating" if _meta(job).get("deletionTimestamp") else "Suspended" if condition("Suspended") else \
        "FailureTarget" if condition("FailureTarget") else "Running"
    return [_meta(job).get("name", ""), state, completions, duration, _age(job),
            *_containers(spec.get("template")), _selector(spec.get("selector"))], None


def _containers_columns(selector: bool = True) -> list[Col]:
    return [Col("Containers", priority=1, description="Names of each container in the template."),
            Col("Images", priority=1, description="Images referenced by each container in the template."),
            *([Col("Selector", priority=1, description="A label query over pods that should match the pod count.")]
              if selector else [])]


def print_stateful_set(sts: Obj) -> Row:
    spec, status = _dict(sts.get("spec")), _dict(sts.get("status"))
    return [_meta(sts).get("name", ""), f"{int(status.get('readyReplicas') or 0)}/{int(spec.get('replicas') or 0)}",
            _age(sts), *_containers(spec.get("template"))], None


def print_deployment(deployment: Obj) -> Row:
    spec, status = _dict(deployment.get("spec")), _dict(deployment.get("status"))
    replicas = spec.get("replicas")
    return [_meta(deployment).get("name", ""),
            f"{int(status.get('readyReplicas') or 0)}/{int(replicas if replicas is not None else 1)}",
            int(status.get("updatedReplicas") or 0), int(status.get("availableReplicas") or 0), _age(deployment),
            *_containers(spec.get("template")), _selector(spec.get("selector"))], None


def print_role_binding(binding: Obj) -> Row:
    role = _dict(binding.get("roleRef"))
    users, groups, accounts = [], [], []
    for subject in _list(binding.get("subjects")):
        subject = _dict(subject)
        if subject.get("kind") == "User":
            users.append(str(subject.get("name", "")))
        elif subject.get("kind") == "Group":
            groups.append(str(subject.get("name", "")))
        elif subject.get("kind") == "ServiceAccount":
            accounts.append(f"{subject.get('namespace', '')}/{subject.get('name', '')}")
    return [_meta(binding).get("name", ""), f"{role.get('kind', '')}/{role.get('name', '')}", _age(binding),
            ", ".join(users), ", ".join(groups), ", ".join(accounts)], None


def print_priority_class(pc: Obj) -> Row:
    """``printPriorityClass``: PREEMPTIONPOLICY is a default column (empty when unset), not ``-o wide``."""
    return [_meta(pc).get("name", ""), int(pc.get("value") or 0), bool(pc.get("globalDefault")), _age(pc),
            pc.get("preemptionPolicy") or ""], None


_PRIORITY_CLASS_COLUMNS = [
    NAME, Col("Value", type="integer", description="value represents the integer value of this priority class. This "
              "is the actual priority that pods receive when they have the name of this class in their pod spec."),
    Col("Global-Default", type="boolean", description="globalDefault specifies whether this PriorityClass should be "
        "considered as the default priority for pods that do not have any priority class. Only one PriorityClass "
        "can be marked as `globalDefault`. However, if more than one PriorityClasses exists with their "
        "`globalDefault` field set to true, the smallest value of such global default PriorityClasses will be used "
        "as the default priority."),
    AGE,
    Col("PreemptionPolicy", description="preemptionPolicy is the Policy for preempting pods with lower priority. One "
        "of Never, PreemptLowerPriority. Defaults to PreemptLowerPriority if unset."),
]


def print_pod_disruption_budget(pdb: Obj) -> Row:
    """``printPodDisruptionBudget``: MIN AVAILABLE and MAX UNAVAILABLE as written (``N/A`` when unset)."""
    spec = _dict(pdb.get("spec"))
    bounds = ["N/A" if spec.get(key) is None else str(spec[key]) for key in ("minAvailable", "maxUnavailable")]
    return [_meta(pdb).get("name", ""), *bounds, int(_dict(pdb.get("status")).get("disruptionsAllowed") or 0),
            _age(pdb)], None


def created_at(obj: Obj) -> Row:
    """The default table's row (``rest.defaultTableConvertor``): the name and the creation time, RFC 3339 in UTC."""
    moment = parse_time(_meta(obj).get("creationTimestamp"))
    stamp = moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if moment else "0001-01-01T00:00:00Z"
    return [_meta(obj).get("name", ""), stamp], None


DEFAULT_COLUMNS = [NAME, Col("Created At", type="date", description=CREATED_DOC)]
_BINDING_COLUMNS = [NAME, Col("Role", description="RoleRef can only reference a ClusterRole in the global namespace."),
                    AGE, Col("Users", priority=1, description="Users in the roleBinding"),
                    Col("Groups", priority=1, description="Groups in the roleBinding"),
                    Col("ServiceAccounts", priority=1, description="ServiceAccounts in the roleBinding")]
_WEBHOOKS = ([NAME, Col("Webhooks", type="integer", description="Webhooks is a list of webhooks and the affected "
                                                                "resources and operations."), AGE],
             lambda o: ([_meta(o).get("name", ""), len(_list(o.get("webhooks"))), _age(o)], None))

#: (group, kind) -> column definitions and the row printer, for the built-in kinds ported here.
PRINTERS: dict[tuple[str, str], tuple[list[Col], Printer]] = {
    ("", "Pod"): (POD_COLUMNS, print_pod),
    ("", "Node"): (NODE_COLUMNS, print_node),
    ("", "Event"): (EVENT_COLUMNS, print_event),
    ("", "Namespace"): ([NAME, Col("Status", description="The status of the namespace"), AGE],
                        lambda o: ([_meta(o).get("name", ""), _dict(o.get("status")).get("phase", ""), _age(o)],
                                   None)),
    ("", "ConfigMap"): ([NAME, Col("Data", description="Data contains the configuration data."), AGE],
                        lambda o: ([_meta(o).get("name", ""),
                                    len(_dict(o.get("data"))) + len(_dict(o.get("binaryData"))), _age(o)], None)),
    ("", "Secret"): ([NAME, Col("Type", description="Used to facilitate programmatic handling of secret data."),
                      Col("Data", description="Data contains the secret data."), AGE],
                     lambda o: ([_meta(o).get("name", ""), o.get("type", ""),
                                 len(_dict(o.get("data")).keys() | _dict(o.get("stringData")).keys()), _age(o)],
                                None)),
    ("", "ServiceAccount"): ([NAME, Col("Secrets", description="Secrets is a list of the secrets in the same "
                                                               "namespace that pods running using this "
                                                               "ServiceAccount are allowed to use."), AGE],
                             lambda o: ([_meta(o).get("name", ""), len(_list(o.get("secrets"))), _age(o)], None)),
    ("coordination.k8s.io", "Lease"): ([NAME, Col("Holder", description="holderIdentity contains the identity of "
                                                                        "the holder of a current lease."), AGE],
                                       lambda o: ([_meta(o).get("name", ""),
                                                   _dict(o.get("spec")).get("holderIdentity") or "", _age(o)], None)),
    ("batch", "Job"): ([NAME, Col("Status", description="Status of the job."),
                        Col("Completions", description="The number of pods which reached phase Succeeded."),
                        Col("Duration", description="Time required to complete the job."), AGE,
                        *_containers_columns()], print_job),
    ("apps", "StatefulSet"): ([NAME, Col("Ready", description="Number of the pod with ready state"), AGE,
                               *_containers_columns(selector=False)], print_stateful_set),
    ("apps", "Deployment"): ([NAME, Col("Ready", description="Number of the pod with ready state"),
                              Col("Up-to-date", description="Total number of non-terminated pods targeted by this "
                                                            "deployment that have the desired template spec."),
                              Col("Available", description="Total number of available pods (ready for at least "
                                                           "minReadySeconds) targeted by this deployment."), AGE,
                              *_containers_columns()], print_deployment),
    ("scheduling.k8s.io", "PriorityClass"): (_PRIORITY_CLASS_COLUMNS, print_priority_class),
    ("policy", "PodDisruptionBudget"): ([NAME, Col("Min Available", description="The minimum number of pods that must "
                                                                                "be available."),
                                         Col("Max Unavailable", description="The maximum number of pods that may be "
                                                                            "unavailable."),
                                         Col("Allowed Disruptions", type="integer", description="Calculated number of "
                                             "pods that may be disrupted at this time."), AGE],
                                        print_pod_disruption_budget),
    ("rbac.authorization.k8s.io", "RoleBinding"): (_BINDING_COLUMNS, print_role_binding),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): (_BINDING_COLUMNS, print_role_binding),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"): _WEBHOOKS,
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"): _WEBHOOKS,
}


def columns_and_printer(resource: Resource) -> tuple[list[Obj], Callable[[Obj], Row]]:
    """The column definitions and the row printer the apiserver uses for ``resource``."""
    if not resource.builtin:
        custom = list(resource.columns) or [PrinterColumn("Age", "date", ".metadata.creationTimestamp",
                                                          description=CREATED_DOC)]
        definitions = [NAME.definition()] + [
            {"name": c.name, "type": c.type, "format": c.format, "priority": c.priority,
             "description": c.description or f"Custom resource definition column (in JSONPath format): "
                                             f"{c.json_path}"} for c in custom]
        return definitions, lambda o: ([_meta(o).get("name", ""), *(custom_cell(c, o) for c in custom)], None)
    # events.k8s.io Events are printed as the core/v1 Events they are (the caller converts them).
    key = ("", "Event") if (resource.group, resource.kind) == ("events.k8s.io", "Event") else \
        (resource.group, resource.kind)
    columns, printer = PRINTERS.get(key, (DEFAULT_COLUMNS, created_at))
    return [c.definition() for c in columns], printer


def table(resource: Resource, items: list[Obj], resource_version: str, version: str, include: str, *,
          headers: bool = True, printed: Callable[[Obj], Obj] = lambda o: o,
          continue_token: str = "") -> Obj:
    """The Table of ``items`` (``printed`` gives the form the printer reads, e.g. the core/v1 form of an
    events.k8s.io Event), each row's object as ``include`` says."""
    definitions, printer = columns_and_printer(resource)
    rows = []
    for item in items:
        cells, conditions = printer(printed(item))
        row: Obj = {"cells": cells[:len(definitions)]}
        if conditions:
            row["conditions"] = conditions
        if include == "Object":
            row["object"] = item
        elif include == "Metadata":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": version, "metadata": _meta(item)}
        rows.append(row)
    metadata: Obj = {"resourceVersion": resource_version}
    if continue_token:
        metadata["continue"] = continue_token
    return {"kind": "Table", "apiVersion": version, "metadata": metadata,
            "columnDefinitions": definitions if headers else [], "rows": rows}

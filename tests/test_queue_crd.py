"""The Queue API (deploy/base/queue-crd.yaml): its defaults are the ones gang/queues.py applies, every spec mistake is
refused at apply time with a message that names it, the status the controller writes fits the schema, and
``kubectl get queues`` shows NAME, COHORT, WEIGHT, PENDING, ADMITTED, USAGE and AGE.

The unit tests run the emulator's apiextensions validation (cluster/validation/: pruning, defaults, the OpenAPI
schema, the CEL rules) on the CRD as shipped; the end-to-end test applies Queues with kubectl on the local cluster.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster.local import LocalCluster
from cluster.validation.crd import validate_crd
from cluster.validation.schema import default, prune, validate
from cluster.validation.schema_cel import NOT_CHECKED
from cluster.validation.schema_cel import validate as validate_rules
from gang.queues import GROUP, KIND, PLURAL, VERSION, parse_queue
from tests.support.kubectl import Kubectl, manifest

ROOT = Path(__file__).resolve().parent.parent
CRD = yaml.safe_load((ROOT / "deploy" / "base" / "queue-crd.yaml").read_text())
[SERVED] = CRD["spec"]["versions"]
SCHEMA = SERVED["schema"]["openAPIV3Schema"]
Obj = dict[str, Any]


def queue(name: str = "team-a", **spec: Any) -> Obj:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": name}, "spec": spec}


def stored(obj: Obj, old: Obj | None = None) -> tuple[Obj, list[str]]:
    """``obj`` as the apiserver would store it (pruned, defaulted) and the errors that refuse it."""
    obj = prune(copy.deepcopy(obj), SCHEMA)
    default(obj, SCHEMA)
    errors = validate(obj, SCHEMA)
    return obj, errors + validate_rules(obj, old, SCHEMA, errors)


@pytest.mark.unit
def test_the_crd_is_what_the_product_names() -> None:
    assert validate_crd(CRD) == []
    assert (CRD["spec"]["group"], CRD["spec"]["names"]["kind"], CRD["spec"]["names"]["plural"],
            SERVED["name"], CRD["spec"]["scope"]) == (GROUP, KIND, PLURAL, VERSION, "Cluster")
    assert SERVED["served"] and SERVED["storage"] and SERVED["subresources"] == {"status": {}}


@pytest.mark.unit
@pytest.mark.parametrize("spec", [{}, {"cohort": "research"}, {"preemption": {"withinQueue": "Never"}},
                                  {"fairSharing": {}}])
def test_the_schemas_defaults_are_the_ones_the_product_applies(spec: Obj) -> None:
    obj, errors = stored(queue(**spec))
    assert errors == []
    assert parse_queue(obj) == parse_queue(queue(**spec))  # the product reads the same with or without them
    assert obj["spec"]["fairSharing"]["weight"] == 1 and obj["spec"]["queueingStrategy"] == "BestEffortFIFO"
    assert obj["spec"]["preemption"]["reclaimWithinCohort"] == "Any"


@pytest.mark.unit
def test_a_full_spec_is_accepted_and_read() -> None:
    spec = {"namespaceSelector": {"matchLabels": {"team": "a"},
                                  "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]},
                                                       {"key": "frozen", "operator": "DoesNotExist"}]},
            "cohort": "research", "nominalQuota": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": 4, "pods": "100",
                                                    "hugepages-2Mi": "1Gi"},
            "borrowingLimit": {"cpu": "500m", "nvidia.com/gpu": 0}, "fairSharing": {"weight": "2.5"},
            "queueingStrategy": "StrictFIFO", "preemption": {"withinQueue": "Never", "reclaimWithinCohort": "Never"}}
    obj, errors = stored(queue(**spec))
    assert errors == [] and obj["spec"] == spec
    read = parse_queue(obj)
    assert (read.borrowing_limit, read.weight, read.strategy) == (
        {"cpu": Decimal("0.5"), "nvidia.com/gpu": Decimal(0)}, Decimal("2.5"), "StrictFIFO")


@pytest.mark.unit
@pytest.mark.parametrize(("spec", "expected"), [
    ({"borrowingLimit": {"cpu": "1"}, "nominalQuota": {"cpu": "4"}},
     ['spec: Invalid value: "object": borrowingLimit requires a cohort']),
    ({"cohort": "c", "nominalQuota": {"cpu": "4"}, "borrowingLimit": {"cpu": "1", "memory": "1Gi", "pods": 2}},
     ['spec: Invalid value: "object": borrowingLimit names resources without a nominalQuota: memory, pods']),
    ({"cohort": "c", "borrowingLimit": {"cpu": "1"}},
     ['spec: Invalid value: "object": borrowingLimit names resources without a nominalQuota: cpu']),
    ({"nominalQuota": {"GPU": 1, "cpu": 2, "a b": 1}},
     ['spec.nominalQuota: Invalid value: "object": not resource names (cpu, memory, ephemeral-storage, pods, '
      'hugepages-<size> or a prefixed name such as nvidia.com/gpu): GPU, a b']),
    ({"cohort": "Research"}, ["spec.cohort: Invalid value: \"Research\": spec.cohort in body should match "
                              "'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'"]),
    ({"queueingStrategy": "FIFO"},
     ['spec.queueingStrategy: Unsupported value: "FIFO": supported values: "BestEffortFIFO", "StrictFIFO"',
      NOT_CHECKED]),
    ({"preemption": {"reclaimWithinCohort": "Always"}},
     ['spec.preemption.reclaimWithinCohort: Unsupported value: "Always": supported values: "Any", "LowerPriority", '
      '"Never"', NOT_CHECKED]),
    ({"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "In"},
                                                 {"key": "b", "operator": "Exists", "values": ["x"]},
                                                 {"key": "c", "operator": "NotIn", "values": ["y"]}]}},
     ['spec.namespaceSelector.matchExpressions[0]: Invalid value: "object": values must be non-empty for In and '
      'NotIn, and empty for Exists and DoesNotExist',
      'spec.namespaceSelector.matchExpressions[1]: Invalid value: "object": values must be non-empty for In and '
      'NotIn, and empty for Exists and DoesNotExist']),
])
def test_a_mistaken_spec_is_refused_with_what_is_wrong(spec: Obj, expected: list[str]) -> None:
    assert stored(queue(**spec))[1] == expected


@pytest.mark.unit
@pytest.mark.parametrize("value", ["-1", -1, "1.5.0", "two", "1Ki ", "-500m"])
@pytest.mark.parametrize("where", ["nominalQuota", "borrowingLimit", "weight"])
def test_quantities_are_non_negative_quantities(value: Any, where: str) -> None:
    spec: Obj = {"cohort": "c", "nominalQuota": {"cpu": "1"}}
    if where == "weight":
        spec["fairSharing"] = {"weight": value}
        path = "spec.fairSharing.weight"
    else:
        spec[where] = {**spec.get(where, {}), "cpu": value}
        path = f"spec.{where}.cpu"
    errors = stored(queue(**spec))[1]
    assert len(errors) == 1 and errors[0].startswith(f"{path}: Invalid value: "), errors
    detail = "greater than or equal to 0" if isinstance(value, int) else "should match"
    assert detail in errors[0]


@pytest.mark.unit
@pytest.mark.parametrize("value", ["0", 0, "16", "500m", "1.5", "64Gi", "1e3", "+2", ".5"])
def test_non_negative_quantities_are_accepted(value: Any) -> None:
    spec = {"cohort": "c", "nominalQuota": {"cpu": value}, "borrowingLimit": {"cpu": value},
            "fairSharing": {"weight": value}}
    assert stored(queue(**spec))[1] == []


STATUS = {"usage": {"cpu": "12", "nvidia.com/gpu": "4"}, "borrowing": {"cpu": "0"}, "pendingGangs": 3,
          "admittedGangs": 2, "weightedShare": 9223372036854775807, "usageSummary": "cpu 12/16 nvidia.com/gpu 4/4",
          "observedGeneration": 1,
          "conditions": [{"type": "Active", "status": "True", "reason": "Ready", "message": "m",
                          "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]}


@pytest.mark.unit
def test_the_status_the_controller_writes_fits_the_schema() -> None:
    obj = {**queue(), "status": STATUS}
    assert stored(obj) == ({**obj, "spec": stored(queue())[0]["spec"]}, [])
    bad = copy.deepcopy(obj)
    bad["status"].update(usage={"cpu": "-1"}, pendingGangs=-1)
    bad["status"]["conditions"][0]["type"] = "Ready"
    assert [e.split(":")[0] for e in stored(bad)[1]] == [
        "status.usage.cpu", "status.pendingGangs", "status.conditions[0].type", "<nil>"]


# --- on the local cluster -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kubectl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubectl]:
    with LocalCluster() as local:
        kubectl = Kubectl(local.kubeconfig, tmp_path_factory.mktemp("kube-cache"))
        kubectl("apply", "-f", str(ROOT / "deploy" / "base" / "queue-crd.yaml"))
        kubectl("wait", "--for", "condition=Established", f"crd/{PLURAL}.{GROUP}")
        yield kubectl


@pytest.mark.e2e
def test_kubectl_apply_refuses_a_mistake_and_get_shows_the_columns(kubectl: Kubectl, tmp_path: Path) -> None:
    refused = kubectl("apply", "-f", manifest(tmp_path, queue("lender", borrowingLimit={"cpu": "1"},
                                                              nominalQuota={"cpu": "4"})), check=False)
    assert refused.returncode != 0
    assert (f'The {KIND} "lender" is invalid: spec: Invalid value: "object": borrowingLimit requires a cohort'
            in refused.stderr), refused.stderr
    kubectl("apply", "-f", manifest(tmp_path, queue("team-a", cohort="research", nominalQuota={"cpu": "16"},
                                                    fairSharing={"weight": 2}), queue("team-b")))
    kubectl("patch", "queue", "team-a", "--subresource", "status", "--type", "merge", "-p",
            yaml.safe_dump({"status": STATUS}))
    rows = kubectl.table("get", "queues")
    assert list(rows[0]) == ["NAME", "COHORT", "WEIGHT", "PENDING", "ADMITTED", "USAGE", "AGE"]
    assert [{k: v for k, v in row.items() if k != "AGE"} for row in rows] == [
        {"NAME": "team-a", "COHORT": "research", "WEIGHT": "2", "PENDING": "3", "ADMITTED": "2",
         "USAGE": STATUS["usageSummary"]},
        {"NAME": "team-b", "COHORT": "", "WEIGHT": "1", "PENDING": "", "ADMITTED": "", "USAGE": ""}]

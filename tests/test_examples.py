"""The examples the docs point at (docs/tasks/explain-simulate.md) give the decisions their records document
(``workloads/<kind>/examples/``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kubenexus.local_webhook import KUBENEXUS
from tests.support.contract import EXPECTED, GROUP
from workloads import records
from workloads.record import Example

pytestmark = pytest.mark.e2e

WORKLOADS = Path(__file__).resolve().parent.parent / "workloads"
EXAMPLES = [(name, example) for name, record in records().items() for example in record.examples]


@pytest.mark.parametrize("kind, example", EXAMPLES, ids=[example.pod for _, example in EXAMPLES])
def test_example(kind: str, example: Example) -> None:
    folder = WORKLOADS / kind / "examples"
    done = subprocess.run([KUBENEXUS, "explain", "--pod", str(folder / example.pod), "--objects",
                           str(folder / example.objects), "--output", "json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["action"] == example.action
    assert (result["pod"]["metadata"].get("labels") or {}).get(GROUP) == example.group
    if example.pod == "spark-pi-driver.yaml":  # 10 executors of 2 cpu and 4g + max(384Mi, 10%) memory, batch pool
        expected = json.loads(result["pod"]["metadata"]["annotations"][EXPECTED])
        assert expected == [{"role": "executor", "count": 10, "requests": {"cpu": "2", "memory": "4505Mi"},
                             "nodeSelector": {"pool": "batch"}, "tolerations": [], "affinity": None}]


def test_the_documented_examples_are_run() -> None:
    """The docs' (the Spark driver) and the others DEVELOPERS.md relies on stay listed in their records."""
    assert {example.pod for _, example in EXAMPLES} >= {"spark-pi-driver.yaml", "spark-pi-executor.yaml",
                                                         "pytorch-worker.yaml", "batch-job-pod.yaml"}

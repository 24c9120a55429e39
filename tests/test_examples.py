"""The examples the README points at give the decisions it describes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kubenexus.local_webhook import KUBENEXUS
from tests.support.contract import EXPECTED, GROUP

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("pod, objects, action, group", [
    ("spark-pi-driver", "spark-pi-objects", "gang", "spark-pi"),
    ("spark-pi-executor", "spark-pi-objects", "gang", "spark-pi"),
    ("pytorch-worker", "pytorch-objects", "gang", "resnet"),
    ("batch-job-pod", "batch-job-objects", "skip", None),
])
def test_example(pod, objects, action, group):
    done = subprocess.run([KUBENEXUS, "explain", "--pod", str(EXAMPLES / f"{pod}.yaml"), "--objects",
                           str(EXAMPLES / f"{objects}.yaml"), "--output", "json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["action"] == action
    assert (result["pod"]["metadata"].get("labels") or {}).get(GROUP) == group
    if pod == "spark-pi-driver":  # 10 executors of 2 cpu and 4g + max(384Mi, 10%) memory, on the batch pool
        expected = json.loads(result["pod"]["metadata"]["annotations"][EXPECTED])
        assert expected == [{"role": "executor", "count": 10, "requests": {"cpu": "2", "memory": "4505Mi"},
                             "nodeSelector": {"pool": "batch"}, "tolerations": [], "affinity": None}]

"""Planner scenarios through ``kubenexus simulate``, the way users run it.

Each scenario in ``tests/scenarios/`` is a cluster snapshot as ``kubectl get -o yaml`` prints it: Nodes with their
allocatable and conditions, Pods as operators create them (after admission), root objects. Every test runs the real
CLI and derives its expectations from the YAML by hand: the free capacity of each node and the requests of each
member are spelled out as arithmetic next to the assertion, and every plan the CLI prints is checked independently
by ``check_plan`` below (every member placed, per-node totals within the free capacity, only allowed nodes, host
ports apart). Nothing here imports the planner, so a planner bug cannot hide behind itself.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubenexus.local_webhook import KUBENEXUS

pytestmark = pytest.mark.e2e

SCENARIOS = Path(__file__).parent / "scenarios"
NOW = "2026-11-22T09:03:00Z"  # three minutes after the first gang of most scenarios: nobody starves yet
GPU = "nvidia.com/gpu"
#: What simulate reads of a cluster besides the jobs, as every copy of the snapshot command must list it.
SNAPSHOT = ("kubectl get namespaces,nodes,pods,poddisruptionbudgets,queues.scheduling.kubenexus.io,"
            "podgroups.scheduling.kubenexus.io -A -o yaml")
GI = 1024  # MiB per GiB; memory below is in MiB, cpu in millicores
RESOURCES = ("cpu", "memory", GPU, "pods")
Res = dict[str, int]

# Every (scenario, --now) a test below asks for, started together so that the module stays fast.
RUNS = [
    ("fragmentation.yaml", NOW), ("spark-driver.yaml", NOW), ("spark-running.yaml", NOW), ("gpu.yaml", NOW),
    ("pod-slots.yaml", NOW), ("taints.yaml", NOW), ("affinity.yaml", NOW), ("hostports.yaml", NOW),
    ("requests.yaml", NOW), ("terminating.yaml", NOW), ("trap.yaml", NOW), ("whole-cluster.yaml", NOW),
    ("priority.yaml", NOW), ("never-fits.yaml", "2026-11-22T09:05:00Z"), ("starvation.yaml", "2026-11-22T09:02:00Z"),
    ("starvation.yaml", "2026-11-22T09:06:00Z"), ("unbound.yaml", NOW), ("nominated.yaml", NOW),
    ("certifiable.yaml", NOW), ("anti-affinity.yaml", NOW), ("waiting.yaml", NOW), ("unresolved.yaml", NOW),
    ("stranded.yaml", NOW), ("submit.yaml", NOW), ("preemption.yaml", NOW), ("queues.yaml", NOW),
]


# simulate imports the controller: about 0.5 s of CPU per run with bytecode caches, more without (and this
# environment may set PYTHONDONTWRITEBYTECODE). Its runs here share a bytecode cache outside the source tree.
ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
ENV["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / f"kubenexus-tests-pycache-{os.getuid()}")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KUBENEXUS, "simulate", *args], capture_output=True, text=True, timeout=60, env=ENV)


def _json_run(scenario: str, now: str, *extra: str) -> dict[str, Any]:
    done = run_cli(str(SCENARIOS / scenario), "-o", "json", "--now", now, *extra)
    assert done.stdout, done.stderr
    result = json.loads(done.stdout)
    # The exit status: 1 exactly when a gang can never fit or cannot be certified (the job must change).
    stuck = [g["name"] for g in result["gangs"] if g["decision"] in ("never-fits", "not-certifiable")]
    assert done.returncode == (1 if stuck else 0), (stuck, done.stderr)
    return result


@functools.cache
def _prefetched() -> dict[tuple[str, str], dict[str, Any]]:
    first = _json_run(*RUNS[0])  # alone: it fills the bytecode cache the others read
    with ThreadPoolExecutor(max_workers=max(4, os.cpu_count() or 1)) as pool:
        results = pool.map(lambda run: _json_run(*run), RUNS[1:])
        return dict(zip(RUNS, [first, *results], strict=True))


def output(scenario: str, now: str = NOW) -> dict[str, Any]:
    """What ``kubenexus simulate SCENARIO -o json --now NOW`` printed."""
    return _prefetched().get((scenario, now)) or _json_run(scenario, now)


def simulate(scenario: str, now: str = NOW) -> dict[str, dict[str, Any]]:
    """The gangs ``kubenexus simulate -o json`` reports, by name (names are unique within each scenario)."""
    result = output(scenario, now)
    assert set(result) == {"submitted", "gangs", "ungated", "deleted", "preempted", "queues", "podgroups"}
    gangs = {gang["name"]: gang for gang in result["gangs"]}
    assert len(gangs) == len(result["gangs"])
    for gang in result["gangs"]:
        assert set(gang) == {"namespace", "name", "decision", "reason", "plan", "released"}
    return gangs


# --- reading the scenario (member names only: requests and capacities are written out by hand) -------------------


@functools.cache
def objects(scenario: str) -> tuple[dict[str, Any], ...]:
    found: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all((SCENARIOS / scenario).read_text()):
        found.extend(doc["items"] if doc.get("kind") == "List" else [doc])
    return tuple(found)


def members(scenario: str, group: str) -> list[str]:
    """Names of the pods of gang ``group`` in the snapshot, by their gang label."""
    return sorted(o["metadata"]["name"] for o in objects(scenario) if o["kind"] == "Pod" and
                  (o["metadata"].get("labels") or {}).get("pod-group.scheduling.kubenexus.io/name") == group)


# --- the independent plan checker ------------------------------------------------------------------------------------


def R(cpu: int = 0, mem: int = 0, gpu: int = 0, pods: int = 0) -> Res:
    """Resources in the units used here: millicores, MiB, GPUs, pod slots."""
    return {"cpu": cpu, "memory": mem, GPU: gpu, "pods": pods}


def demand(names: Iterable[str], each: Res) -> dict[str, Res]:
    return dict.fromkeys(names, each)


def check_plan(plan: Mapping[str, str], wants: Mapping[str, Res], free: Mapping[str, Res],
               allowed: Mapping[str, Iterable[str]] | None = None,
               apart: Iterable[Iterable[str]] = ()) -> dict[str, Res]:
    """Assert that ``plan`` is a witness: every member of ``wants`` placed exactly once, each on a node it may use,
    every node's totals (one pod slot per member included) within ``free``; members of each ``apart`` group on
    distinct nodes. Returns the load per node."""
    assert sorted(plan) == sorted(wants), "the plan must place every member, and nothing else"
    load: dict[str, Res] = {}
    for pod, node in plan.items():
        assert node in free, f"{pod} is planned on {node}, which none of this gang's members may use"
        if allowed is not None:
            assert node in set(allowed[pod]), f"{pod} is planned on {node}; it may only use {sorted(allowed[pod])}"
        total = load.setdefault(node, R())
        for resource in RESOURCES:
            total[resource] += wants[pod].get(resource, 0) + (1 if resource == "pods" else 0)
    for node, total in sorted(load.items()):
        for resource in RESOURCES:
            assert total[resource] <= free[node][resource], \
                f"{node}: members need {total[resource]} {resource}, only {free[node][resource]} free"
    for group in apart:
        nodes = [plan[pod] for pod in group]
        assert len(set(nodes)) == len(nodes), f"{sorted(group)} must be on distinct nodes, got {nodes}"
    return load


def merged(*plans: Mapping[str, str]) -> dict[str, str]:
    """Plans of several gangs released in one pass: together they must fit."""
    together: dict[str, str] = {}
    for plan in plans:
        assert not set(plan) & set(together)
        together.update(plan)
    return together


def assert_released(gang: Mapping[str, Any], names: Iterable[str]) -> None:
    assert gang["decision"] == "release", gang["reason"]
    assert sorted(gang["released"]) == sorted(names)


def assert_held(gang: Mapping[str, Any], decision: str, *reason_parts: str) -> None:
    """Not released: no plan, nobody ungated, and the reason carries the numbers derived in the test."""
    assert gang["decision"] == decision, gang["reason"]
    assert gang["plan"] == {} and gang["released"] == []
    for part in reason_parts:
        assert part in gang["reason"], f"{part!r} not in {gang['reason']!r}"


# --- scenarios -------------------------------------------------------------------------------------------------------


def test_fragmentation_the_sum_says_yes_the_nodes_say_no():
    gangs = simulate("fragmentation.yaml")
    # Three nodes of 4 cpu / 16Gi / 110 pods, each running one 2 cpu / 4Gi web replica.
    free = {node: R(cpu=4000 - 2000, mem=16 * GI - 4 * GI, pods=110 - 1) for node in ("frag-a", "frag-b", "frag-c")}
    aggregate = sum(f["cpu"] for f in free.values())
    bert, etl = members("fragmentation.yaml", "bert"), members("fragmentation.yaml", "etl")
    assert aggregate == 6000 == len(bert) * 3000 == len(etl) * 1500  # a sum of free cpu says both fit

    # bert: a 3 cpu worker fits on no node (2 cpu free on each).
    assert_held(gangs["bert"], "wait", "needs 3 cpu, 6Gi memory", "the most free is 2 cpu", "holds 0 of 2 members")
    # etl: 2000 // 1500 = 1 pod per node, 3 of 4.
    assert_held(gangs["etl"], "wait", "4 members like etl-0-7xk2p need 1500m cpu, 2Gi memory each",
                "their 3 eligible nodes have room for only 3 (free cpu alone allows no more)", "holds 3 of 4 members")
    # shard: 3 x 2 cpu, exactly one per node (2000 // 2000 = 1).
    shard = members("fragmentation.yaml", "shard")
    assert_released(gangs["shard"], shard)
    check_plan(gangs["shard"]["plan"], demand(shard, R(cpu=2000, mem=4 * GI)), free)
    assert sorted(gangs["shard"]["plan"].values()) == ["frag-a", "frag-b", "frag-c"]
    assert gangs["shard"]["reason"] == "all 3 members fit on 3 node(s)"


def test_staged_spark_driver_goes_where_its_executors_still_fit():
    gangs = simulate("spark-driver.yaml")
    # 8 cpu / 32Gi nodes running 4, 4 and 3 cpu (8Gi each) of feature-store.
    free = {"spark-a": R(cpu=8000 - 4000, mem=24 * GI, pods=109), "spark-b": R(cpu=8000 - 4000, mem=24 * GI, pods=109),
            "spark-c": R(cpu=8000 - 3000, mem=24 * GI, pods=109)}
    executors = [f"executor (expected #{i})" for i in range(1, 7)]
    wants = {"pi-driver": R(cpu=1000, mem=1408), **demand(executors, R(cpu=2000, mem=4505))}
    pi = gangs["pi"]
    assert_released(pi, ["pi-driver"])  # only the driver exists; the executors get reserved slots
    load = check_plan(pi["plan"], wants, free)
    # Executors per node: 4000 // 2000 = 2, 2 and 5000 // 2000 = 2: six only with two on every node. The driver then
    # needs 1 cpu next to two executors: spark-a and spark-b have 4000 - 4000 = 0 left, spark-c 5000 - 4000 = 1000.
    # (Driver on spark-a would leave (4000 - 1000) // 2000 = 1 executor there: 1 + 2 + 2 = 5 < 6.)
    assert pi["plan"]["pi-driver"] == "spark-c"
    assert {node: total["pods"] for node, total in load.items()} == {"spark-a": 2, "spark-b": 2, "spark-c": 3}
    assert pi["reason"] == "all 7 members fit on 3 node(s) (6 more expected later)"


def test_late_spark_executors_take_their_reserved_slots_and_nobody_else_does():
    gangs = simulate("spark-running.yaml")
    # Free before the slots: spark-a 8000 - 4000, spark-b 8000 - 4000, spark-c 8000 - 3000 - 1000 (the driver).
    free = {"spark-a": R(cpu=4000, mem=24 * GI, pods=109), "spark-b": R(cpu=4000, mem=24 * GI, pods=109),
            "spark-c": R(cpu=4000, mem=24 * GI - 1408, pods=108)}
    slots = {"spark-a": 2, "spark-b": 2, "spark-c": 2}  # the driver's reserved-nodes annotation
    executors = members("spark-running.yaml", "pi")
    executors.remove("pi-driver")
    pi = gangs["pi"]
    assert_released(pi, executors)
    load = check_plan(pi["plan"], demand(executors, R(cpu=2000, mem=4505)), free)
    for node, total in load.items():
        assert total["pods"] <= slots[node], f"{node}: more executors than slots reserved there"
    # The 6 slots hold 2 x 2000 on every node, all the free cpu: the intruder, although older than the executors,
    # finds 4000 - 4000 = 0 cpu.
    assert_held(gangs["intruder"], "wait", "needs 2 cpu, 4Gi memory", "the most free is 0 cpu")


def test_gpu_gangs():
    gangs = simulate("gpu.yaml")
    # p4d nodes: 95690m cpu, 1130Gi, 737 pods, 8 GPUs; the device plugin takes 50m / 100Mi on each, the notebook
    # 16 cpu / 128Gi / 4 GPUs on gpu-b. cpu-a has no GPUs.
    free = {"gpu-a": R(cpu=95690 - 50, mem=1130 * GI - 100, gpu=8, pods=737 - 1),
            "gpu-b": R(cpu=95690 - 50 - 16000, mem=1130 * GI - 100 - 128 * GI, gpu=8 - 4, pods=737 - 2)}
    # llama: 4 x 4 GPUs; 8 // 4 + 4 // 4 = 3 workers fit now, 4 on empty nodes (8 // 4 * 2): it waits.
    assert_held(gangs["llama"], "wait", "4 members like llama-worker-0 need 16 cpu, 160Gi memory, 4 nvidia.com/gpu",
                "their 2 eligible nodes have room for only 3", "holds 3 of 4 members")
    # resnet: 2 x 4 GPUs, on the GPU nodes only (its workers tolerate the taint; cpu-a offers no GPU).
    resnet = members("gpu.yaml", "resnet")
    assert_released(gangs["resnet"], resnet)
    check_plan(gangs["resnet"]["plan"], demand(resnet, R(cpu=8000, mem=64 * GI, gpu=4)), free)
    # vit: no toleration for nvidia.com/gpu=present:NoSchedule, and cpu-a has no nvidia.com/gpu at all: no filter
    # rules out all three nodes alone; the first each fails (the scheduler's order: taints before resources).
    assert_held(gangs["vit"], "never-fits", "member vit-worker-0 can run on no node: none of the 3 nodes passes its "
                "filters: 2 are tainted nvidia.com/gpu=present:NoSchedule, 1 is without nvidia.com/gpu")


def test_pod_slots_are_a_resource():
    gangs = simulate("pod-slots.yaml")
    # Each edge node allows 4 pods and runs kube-proxy (DaemonSet: stays forever) and a gateway replica.
    free = {node: R(cpu=8000 - 100 - 250, mem=32 * GI - 64 - 256, pods=4 - 2) for node in ("edge-a", "edge-b")}
    # scan-huge: even with every workload gone, (4 - 1) * 2 = 6 slots < 7 pods.
    # The pod limit is what runs out, not cpu: (8000 - 100) // 100 = 79 members per node by cpu alone.
    assert_held(gangs["scan-huge"], "never-fits", "7 members like scan-huge-0-7xk2p",
                "room for only 6 (the nodes' pod limits allow no more)")
    # scan-big: 2 + 2 = 4 slots free now < 5 pods, yet 6 >= 5 once the gateways go: it waits.
    assert_held(gangs["scan-big"], "wait", "5 members like scan-big-0-7xk2p",
                "room for only 4 (the nodes' pod limits allow no more)", "holds 4 of 5 members")
    # scan: 4 pods in 2 + 2 slots.
    scan = members("pod-slots.yaml", "scan")
    assert_released(gangs["scan"], scan)
    load = check_plan(gangs["scan"]["plan"], demand(scan, R(cpu=100, mem=128)), free)
    assert {node: total["pods"] for node, total in load.items()} == {"edge-a": 2, "edge-b": 2}


# Nodes each gang of taints.yaml may use, worked out from each node's taints, spec.unschedulable and Ready condition
# and the gang's tolerations (every pod also has the default NoExecute not-ready/unreachable tolerations).
TAINT_NODES = ("t-ready", "t-soft", "t-dedicated", "t-draining", "t-cordoned", "t-notready", "t-unknown")
TOLERATED = {
    "plain": {"t-ready", "t-soft"},  # PreferNoSchedule is a score, not a filter
    "plain-3": {"t-ready", "t-soft"},
    "ml": {"t-ready", "t-soft", "t-dedicated"},  # dedicated=ml:NoSchedule tolerated with Equal ml
    "ml-other-value": {"t-ready", "t-soft"},  # Equal batch does not tolerate value ml
    "drain": {"t-ready", "t-soft", "t-draining"},  # example.com/draining:NoExecute tolerated
    "drain-wrong-effect": {"t-ready", "t-soft"},  # a NoSchedule toleration does not cover a NoExecute taint
    "cordon": {"t-ready", "t-soft", "t-cordoned"},  # spec.unschedulable = the node.kubernetes.io/unschedulable taint
    "notready": {"t-ready", "t-soft", "t-notready"},  # Ready=False: not-ready:NoSchedule, tolerated (any effect)
    "unreachable": {"t-ready", "t-soft", "t-unknown"},  # Ready=Unknown: unreachable:NoSchedule
    "everywhere": set(TAINT_NODES),  # operator Exists without a key tolerates every taint
}
TAINT_PORTS = {"plain": 7001, "plain-3": 7011, "ml": 7002, "ml-other-value": 7003, "drain": 7004,
               "drain-wrong-effect": 7014, "cordon": 7005, "notready": 7006, "unreachable": 7008, "everywhere": 7007}


def test_taints_cordoned_and_not_ready_nodes():
    gangs = simulate("taints.yaml")
    assert set(gangs) == set(TOLERATED)
    free = {node: R(cpu=4000, mem=16 * GI, pods=110) for node in TAINT_NODES}  # nothing runs yet
    plans = []
    for job, nodes in TOLERATED.items():
        pods = members("taints.yaml", job)
        if len(pods) > len(nodes):  # one pod per node (a host port each): more pods than tolerated nodes
            assert_held(gangs[job], "never-fits", f"{len(pods)} members use host port {TAINT_PORTS[job]}/TCP, "
                        f"but only {len(nodes)} of their eligible nodes have it free")
            continue
        assert_released(gangs[job], pods)
        check_plan(gangs[job]["plan"], demand(pods, R(cpu=100, mem=128)), free,
                   allowed=dict.fromkeys(pods, nodes), apart=[pods])
        assert set(gangs[job]["plan"].values()) == nodes  # as many pods as tolerated nodes: all of them
        plans.append(gangs[job]["plan"])
    check_plan(merged(*plans), {p: R(cpu=100, mem=128) for plan in plans for p in plan}, free)
    assert {job for job, g in gangs.items() if g["decision"] == "never-fits"} == {
        "plain-3", "ml-other-value", "drain-wrong-effect"}


AFFINITY_NODES = {  # name: (zone, pool, instance type, example.com/cpu-generation)
    "aff-a1": ("eu-west-1a", "batch", "c5.2xlarge", 5), "aff-a2": ("eu-west-1a", "general", "m5.2xlarge", 5),
    "aff-b1": ("eu-west-1b", "batch", "c6i.2xlarge", 6), "aff-b2": ("eu-west-1b", "general", "m6i.2xlarge", 6),
    "aff-c1": ("eu-west-1c", "batch", "c7i.2xlarge", 7),
}


def _matching(test) -> set[str]:
    return {name for name, (zone, pool, kind, generation) in AFFINITY_NODES.items()
            if test(name, zone, pool, kind, generation)}


def test_node_selector_and_required_node_affinity():
    gangs = simulate("affinity.yaml")
    eligible = {
        "sel": _matching(lambda n, z, p, k, g: p == "batch"),  # the preferred zone filters nothing
        "expr": _matching(lambda n, z, p, k, g: z in ("eu-west-1a", "eu-west-1b") and p != "general"),
        "newer": _matching(lambda n, z, p, k, g: g > 5),  # Gt 5, and every node has an instance type
        "fields-or": _matching(lambda n, z, p, k, g: n == "aff-a2" or z == "eu-west-1c"),
        "fields-and": _matching(lambda n, z, p, k, g: p == "batch" and n != "aff-a1"),
        "both": _matching(lambda n, z, p, k, g: z == "eu-west-1b" and k in ("m6i.2xlarge", "c7i.2xlarge")),
    }
    assert eligible == {"sel": {"aff-a1", "aff-b1", "aff-c1"}, "expr": {"aff-a1", "aff-b1"},
                        "newer": {"aff-b1", "aff-b2", "aff-c1"}, "fields-or": {"aff-a2", "aff-c1"},
                        "fields-and": {"aff-b1", "aff-c1"}, "both": {"aff-b2"}}
    free = {node: R(cpu=8000, mem=32 * GI, pods=110) for node in AFFINITY_NODES}
    plans = []
    for job, nodes in eligible.items():
        pods = members("affinity.yaml", job)
        assert len(pods) == len(nodes)  # one pod per matching node (a host port each)
        assert_released(gangs[job], pods)
        check_plan(gangs[job]["plan"], demand(pods, R(cpu=100, mem=128)), free,
                   allowed=dict.fromkeys(pods, nodes), apart=[pods])
        plans.append(gangs[job]["plan"])
    check_plan(merged(*plans), {p: R(cpu=100, mem=128) for plan in plans for p in plan}, free)
    # absent: generation Lt 6 (a1, a2) AND no pool label (none: every node has one); gpu-pool: no node has pool=gpu.
    assert_held(gangs["absent"], "never-fits", "member absent-0-7xk2p can run on no node: no node matches its required "
                "node affinity example.com/cpu-generation<6,!pool (no node satisfies !pool)")
    assert_held(gangs["gpu-pool"], "never-fits",
                "member gpu-pool-0-7xk2p can run on no node: no node matches the node selector pool=gpu")


def test_host_ports():
    gangs = simulate("hostports.yaml")
    # node-exporter (a DaemonSet: it never leaves) holds 9100/TCP on all three nodes.
    assert_held(gangs["exporter"], "never-fits", "host port 9100/TCP", "none of its 3 eligible nodes")
    # 4 workers on 29500/TCP need 4 nodes; there are 3.
    assert_held(gangs["allreduce"], "never-fits",
                "4 members use host port 29500/TCP, but only 3 of their eligible nodes have it free")
    # ingress-nginx holds 443/TCP on hp-3, but it is a Deployment pod that may go: wait, do not give up.
    assert_held(gangs["edge-proxy"], "wait", "3 members use host port 443/TCP, but only 2 of their eligible nodes",
                "holds 2 of 3 members")
    # 443/UDP clashes with nothing: one pod per node.
    quic = members("hostports.yaml", "quic-probe")
    assert_released(gangs["quic-probe"], quic)
    free = {"hp-1": R(cpu=8000 - 100, mem=32 * GI - 180, pods=109),
            "hp-2": R(cpu=8000 - 100, mem=32 * GI - 180, pods=109),
            "hp-3": R(cpu=8000 - 100 - 100, mem=32 * GI - 180 - 90, pods=108)}  # ingress-nginx too
    check_plan(gangs["quic-probe"]["plan"], demand(quic, R(cpu=250, mem=256)), free, apart=[quic])


def test_init_containers_sidecars_and_overhead():
    gangs = simulate("requests.yaml")
    # Effective requests, as kube-scheduler computes them:
    # init: max(init 2000m / 4Gi, app 1000m / 2Gi)
    init = R(cpu=max(2000, 1000), mem=max(4 * GI, 2 * GI))
    # sidecar: the app runs with the sidecar (1000 + 500, 2Gi + 512Mi); the migrate step runs after the sidecar
    # started (500 + 2000, 512Mi + 1Gi).
    sidecar = R(cpu=max(1000 + 500, 500 + 2000), mem=max(2 * GI + 512, 512 + GI))
    # kata: the app plus the RuntimeClass overhead.
    kata = R(cpu=1000 + 250, mem=GI + 160)
    assert (init["cpu"], sidecar["cpu"], sidecar["memory"], kata["cpu"], kata["memory"]) == \
        (2000, 2500, 2560, 1250, 1184)
    # Each pair of Jobs is pinned to its node, where something already runs.
    free = {"r-init": R(cpu=8000 - 3000, mem=32 * GI - 8 * GI, pods=109),
            "r-sidecar": R(cpu=8000 - 2500, mem=32 * GI - 4 * GI, pods=109),
            "r-overhead": R(cpu=4000 - 1000, mem=16 * GI - 2 * GI, pods=109)}
    cases = [("init", init, "r-init", "2 cpu, 4Gi memory"),
             ("sidecar", sidecar, "r-sidecar", "2500m cpu, 2560Mi memory"),
             ("kata", kata, "r-overhead", "1250m cpu, 1184Mi memory")]
    plans, wants = [], {}
    for job, each, node, shown in cases:
        room = free[node]["cpu"] // each["cpu"]
        assert room == 2  # 5000 // 2000, 5500 // 2500, 3000 // 1250: three do not fit, two do
        assert_held(gangs[f"{job}-3"], "wait", f"3 members like {job}-3-0-7xk2p need {shown} each",
                    f"their 1 eligible nodes have room for only {room}")
        pods = members("requests.yaml", f"{job}-2")
        assert_released(gangs[f"{job}-2"], pods)
        check_plan(gangs[f"{job}-2"]["plan"], demand(pods, each), free, allowed=dict.fromkeys(pods, {node}))
        plans.append(gangs[f"{job}-2"]["plan"])
        wants.update(demand(pods, each))
    check_plan(merged(*plans), wants, free)


def test_terminating_pods_hold_their_node_terminal_pods_do_not():
    gangs = simulate("terminating.yaml")
    # redis-0 is terminating (deletionTimestamp, still Running): its 3 cpu count until it is gone. The Succeeded and
    # the Failed pods count nothing.
    free = {"term-a": R(cpu=4000 - 3000, mem=16 * GI - 6 * GI, pods=109), "term-b": R(cpu=4000, mem=16 * GI, pods=110),
            "term-c": R(cpu=4000, mem=16 * GI, pods=110)}
    room = sum(f["cpu"] // 2000 for f in free.values())
    assert room == 0 + 2 + 2
    assert_held(gangs["big"], "wait", "5 members like big-0-7xk2p need 2 cpu, 2Gi memory each",
                f"room for only {room}")
    ok = members("terminating.yaml", "ok")
    assert_released(gangs["ok"], ok)
    check_plan(gangs["ok"]["plan"], demand(ok, R(cpu=2000, mem=2 * GI)), free)
    assert "term-a" not in gangs["ok"]["plan"].values()


def test_the_2_2_4_stranding_trap():
    gangs = simulate("trap.yaml")
    wide = gangs["wide"]
    wants = {"wide-chief-0": R(cpu=2000, mem=4 * GI), "wide-worker-0": R(cpu=2000, mem=4 * GI),
             "wide-ps-0": R(cpu=4000, mem=4 * GI)}
    assert_released(wide, wants)
    check_plan(wide["plan"], wants, {node: R(cpu=4000, mem=16 * GI, pods=110) for node in ("trap-a", "trap-b")})
    # The 4 cpu ps takes a node whole; the two 2s share the other one (one 2 on each node would strand the ps).
    plan = wide["plan"]
    assert plan["wide-chief-0"] == plan["wide-worker-0"] != plan["wide-ps-0"]
    text = run_cli(str(SCENARIOS / "trap.yaml"), "--now", NOW)
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[0] == "ml/wide: release — all 3 members fit on 2 node(s)"
    assert f"    wide-ps-0 → {plan['wide-ps-0']}" in text.stdout.splitlines()


def test_two_gangs_that_each_need_the_whole_cluster():
    gangs = simulate("whole-cluster.yaml")
    free = {node: R(cpu=8000 - 100, mem=32 * GI - 64, pods=109) for node in ("whole-a", "whole-b")}  # kube-proxy
    # A 7 cpu worker per node (7900 // 7000 = 1): each gang needs both nodes whole.
    released = [g for g in gangs.values() if g["released"]]
    assert len(released) == 1, "exactly one gang goes, never one member of each"
    # Same priority, same creation time: the name decides.
    alpha, beta = gangs["alpha"], gangs["beta"]
    assert_released(alpha, members("whole-cluster.yaml", "alpha"))
    check_plan(alpha["plan"], demand(alpha["released"], R(cpu=7000, mem=24 * GI)), free)
    # Left for beta: 7900 - 7000 = 900m per node.
    assert_held(beta, "wait", "needs 7 cpu, 24Gi memory", "the most free is 900m cpu", "holds 0 of 2 members")


def test_priority_before_age():
    gangs = simulate("priority.yaml")
    free = {node: R(cpu=8000 - 100, mem=32 * GI - 64, pods=109) for node in ("prio-a", "prio-b")}
    # prod-early and prod-late have priority 100000 (ml-high), nightly 0 although it is the oldest; of the two
    # high ones prod-early is older. Each gang needs the whole cluster.
    assert_released(gangs["prod-early"], members("priority.yaml", "prod-early"))
    check_plan(gangs["prod-early"]["plan"], demand(gangs["prod-early"]["released"], R(cpu=7000, mem=24 * GI)), free)
    for job in ("prod-late", "nightly"):
        assert_held(gangs[job], "wait", "the most free is 900m cpu")


def _cpu(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def _fits_without(scenario: str, gang: str, victims: set[str]) -> bool:
    """Whether every member of ``gang`` (one per node at most, as each takes most of a node) finds a node whose free
    cpu, with the pods named in ``victims`` gone, covers its request: the test's own check, from the snapshot."""
    pods = [o for o in objects(scenario) if o["kind"] == "Pod"]
    free = {o["metadata"]["name"]: _cpu(o["status"]["allocatable"]["cpu"]) for o in objects(scenario)
            if o["kind"] == "Node"}
    def cpu(pod: dict[str, Any]) -> int:
        return sum(_cpu(c["resources"]["requests"]["cpu"]) for c in pod["spec"]["containers"])

    for pod in pods:
        if pod["spec"].get("nodeName") and pod["metadata"]["name"] not in victims:
            free[pod["spec"]["nodeName"]] -= cpu(pod)
    wanted = sorted((cpu(p) for p in pods if p["metadata"]["name"] in members(scenario, gang)), reverse=True)
    return all(need <= room for need, room in zip(wanted, sorted(free.values(), reverse=True), strict=False)) and \
        len(wanted) <= len(free)


def test_a_gang_of_higher_priority_preempts_a_lower_gang_whole_and_nothing_more():
    result = output("preemption.yaml")
    gangs = {gang["name"]: gang for gang in result["gangs"]}
    assert_held(gangs["prod"], "wait", "preempting 1 unit(s) of lower priority, 2 pod(s) in all",
                "gang ml/nightly (priority 100, 2 pods)")
    nightly = set(members("preemption.yaml", "nightly"))
    notebook = {"notebook-7d9f8-x2k4q"}  # priority 100 as well, below prod's 100000: a candidate, not needed
    [preempting] = result["preempted"]
    assert (preempting["namespace"], preempting["gang"]) == ("ml", "prod")
    [victim] = preempting["victims"]
    assert (victim["kind"], victim["name"], victim["priority"]) == ("Gang", "nightly", 100)
    assert set(victim["pods"]) == nightly
    # The test's own arithmetic: the gang fits with nightly gone, not without, and the notebook alone does not help.
    assert _fits_without("preemption.yaml", "prod", nightly)
    assert not _fits_without("preemption.yaml", "prod", set())
    assert not _fits_without("preemption.yaml", "prod", notebook)
    groups = {g["metadata"]["name"]: g["status"] for g in result["podgroups"]}
    assert groups["prod"]["phase"] == "Preempting" and groups["prod"]["waitingFor"] == "preempted pods to go"
    assert groups["prod"]["preemption"]["victims"] == [
        {"kind": "Gang", "namespace": "ml", "name": "nightly", "priority": 100, "pods": len(nightly)}]
    assert groups["nightly"]["phase"] == "Pending" and groups["nightly"]["waitingFor"] == "recreated members"
    preempted = {c["type"]: c for c in groups["nightly"]["conditions"]}["Preempted"]
    assert preempted["status"] == "True" and "ml/prod (priority 100000)" in preempted["message"]


def test_preemption_off_leaves_the_lower_gang_running(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("controller:\n  preemption: false\n")
    result = _json_run("preemption.yaml", NOW, "--config", str(config))
    gangs = {gang["name"]: gang for gang in result["gangs"]}
    assert result["preempted"] == [] and gangs["nightly"]["decision"] == "running"
    assert_held(gangs["prod"], "wait", "the most free is 1900m cpu")


def test_quota_decides_while_the_nodes_have_room():
    # team-a and team-b: 4 cpu each in cohort research (8 in all). a/train (2 x 2) and b/etl (1 x 3) are within
    # their Queues' nominal quota; a/extra (2) would take team-a to 6, borrowing 2 of the 8 - 4 - 3 = 1 unused.
    result = output("queues.yaml")
    gangs = {gang["name"]: gang for gang in result["gangs"]}
    assert gangs["train"]["decision"] == "release" and gangs["etl"]["decision"] == "release"
    assert_held(gangs["extra"], "wait", "queue team-a: cpu 4/4 nominal, cohort research has 1 to lend; "
                                        "the gang needs 2")
    statuses = {queue["name"]: queue["status"] for queue in result["queues"]}
    assert statuses["team-a"]["usage"] == {"cpu": "4"} and statuses["team-b"]["usage"] == {"cpu": "3"}
    assert (statuses["team-a"]["admittedGangs"], statuses["team-a"]["pendingGangs"]) == (1, 1)
    assert (statuses["team-b"]["admittedGangs"], statuses["team-b"]["pendingGangs"]) == (1, 0)
    assert statuses["team-a"]["usageSummary"] == "cpu 4/4" and statuses["team-a"]["borrowing"] == {}
    groups = {g["metadata"]["name"]: g for g in result["podgroups"]}
    assert {name: g["spec"].get("queue") for name, g in groups.items()} == {
        "train": "team-a", "extra": "team-a", "etl": "team-b"}
    assert groups["extra"]["status"]["waitingFor"] == "quota"


def test_never_fits_does_not_block_a_later_gang():
    # At 09:05 colossal and gossip have waited 65 minutes, far past the 300 s starvation threshold.
    gangs = simulate("never-fits.yaml", "2026-11-22T09:05:00Z")
    # Even on otherwise empty nodes, a node offers 8000 - 100 (kube-proxy stays) < 16000.
    assert_held(gangs["colossal"], "never-fits", "needs 16 cpu, 64Gi memory", "the most allocatable is 7900m cpu")
    # Three pods on host port 8301 need three nodes; there are two.
    assert_held(gangs["gossip"], "never-fits", "3 members use host port 8301/TCP, but only 2")
    small = members("never-fits.yaml", "small")
    assert_released(gangs["small"], small)
    free = {node: R(cpu=8000 - 100, mem=32 * GI - 64, pods=109) for node in ("nf-a", "nf-b")}
    check_plan(gangs["small"]["plan"], demand(small, R(cpu=4000, mem=8 * GI)), free)


def test_starvation_shadow_plan_with_backfill():
    s1, s2 = members("starvation.yaml", "s1"), members("starvation.yaml", "s2")
    wants = {**demand(s1, R(cpu=4000, mem=8 * GI)), **demand(s2, R(cpu=2000, mem=4 * GI))}
    # The ETL pods hold 4 cpu / 8Gi on each train node now; they will finish.
    free = {"node-1": R(cpu=8000 - 4000, mem=24 * GI, pods=109), "node-2": R(cpu=8000 - 4000, mem=24 * GI, pods=109),
            "node-3": R(cpu=8000, mem=32 * GI, pods=110)}

    # 09:02: llm has waited 120 s (< 300 s). Both small Jobs backfill: 12 cpu of the 16 free.
    early = simulate("starvation.yaml", "2026-11-22T09:02:00Z")
    assert_held(early["llm"], "wait", "needs 8 cpu, 24Gi memory", "the most free is 4 cpu")
    assert "waiting longer" not in early["llm"]["reason"]
    assert_released(early["s1"], s1)
    assert_released(early["s2"], s2)
    check_plan(merged(early["s1"]["plan"], early["s2"]["plan"]), wants, free)

    # 09:06: llm has waited 360 s. Its shadow plan: one 8 cpu worker on each train node once the ETL pods finish
    # (8000 - 0 each; pool=train is only node-1 and node-2), which leaves 8000 - 8000 = 0 there for later gangs.
    late = simulate("starvation.yaml", "2026-11-22T09:06:00Z")
    assert_held(late["llm"], "wait", "the most free is 4 cpu", "waiting longer than 300s",
                "capacity is held for it on 2 node(s)")
    # s1 still goes, onto capacity llm can never use (node-3: 8000 // 4000 = 2).
    assert_released(late["s1"], s1)
    check_plan(late["s1"]["plan"], demand(s1, R(cpu=4000, mem=8 * GI)), free)
    assert set(late["s1"]["plan"].values()) == {"node-3"}
    # s2 would fit on the train nodes now (4000 free on each), but that would break llm's plan; node-3 is full.
    assert_held(late["s2"], "wait", "holds 0 of 2 members")
    # And llm's shadow plan still holds: nothing new on the train nodes, 8000 >= 8000 on each once ETL is done.
    assert not {"node-1", "node-2"} & set(late["s1"]["plan"].values())


def test_starvation_threshold_comes_from_the_config(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("controller:\n  starvationSeconds: 600\n")
    result = _json_run("starvation.yaml", "2026-11-22T09:06:00Z", "--config", str(config))
    gangs = {g["name"]: g for g in result["gangs"]}
    # 360 s < 600 s: no shadow plan, both small Jobs backfill as at 09:02.
    assert "waiting longer" not in gangs["llm"]["reason"]
    assert gangs["s1"]["decision"] == gangs["s2"]["decision"] == "release"


def test_released_but_unbound_members_keep_their_capacity():
    gangs = simulate("unbound.yaml")
    # first-worker-0 has no gate, planned-node res-a, no nodeName: its 3 cpu are reserved on res-a. first-worker-1
    # is bound to res-b.
    free = {"res-a": R(cpu=4000 - 3000, mem=16 * GI - 6 * GI, pods=109),
            "res-b": R(cpu=4000 - 3000, mem=16 * GI - 6 * GI, pods=109)}
    assert gangs["first"]["decision"] == "running" and gangs["first"]["released"] == []
    assert_held(gangs["second"], "wait", "needs 2 cpu, 4Gi memory", "the most free is 1 cpu")
    third = members("unbound.yaml", "third")
    assert_released(gangs["third"], third)
    check_plan(gangs["third"]["plan"], demand(third, R(cpu=1000, mem=2 * GI)), free)
    assert sorted(gangs["third"]["plan"].values()) == ["res-a", "res-b"]  # 1000 // 1000 = 1 per node


def test_a_gang_stranded_by_another_schedulers_pod_is_evicted_whole():
    gangs = simulate("stranded.yaml")
    # first-worker-0 (3 cpu, 6Gi) was released onto res-a; an ordinary pod of 2 cpu, 1Gi bound there since:
    # 4 - 2 = 2 cpu < 3, while 16Gi - 1Gi is enough memory. first-worker-1 runs on res-b: the gang never ran whole.
    reason = "first-worker-0 was released onto node res-a and needs 3 cpu, 6Gi memory; the pods bound there since " \
             "leave only 2 cpu"
    assert (gangs["first"]["decision"], gangs["first"]["reason"]) == ("evict", reason)
    assert output("stranded.yaml")["deleted"] == [{
        "namespace": "ml", "gang": "first", "whole_gang": True, "reason": "unplaceable", "message": reason,
        "pods": members("stranded.yaml", "first")}]
    text = run_cli(str(SCENARIOS / "stranded.yaml"), "--now", NOW).stdout
    assert "ml/first: deletes the whole gang: first-worker-0, first-worker-1 (unplaceable)" in text


def test_nominated_pods_of_at_least_the_gang_priority_take_capacity():
    gangs = simulate("nominated.yaml")
    # For the gangs (priority 1000): the critical pod (2000) nominated to nom-a and the sync pod (1000, equal) nominated
    # to nom-c count; the background pod (100) nominated to nom-b does not (the scheduler may preempt it).
    free = {"nom-a": R(cpu=4000 - 3000, mem=16 * GI - 4 * GI, pods=109), "nom-b": R(cpu=4000, mem=16 * GI, pods=110),
            "nom-c": R(cpu=4000 - 3000, mem=16 * GI - 4 * GI, pods=109)}
    room = sum(f["cpu"] // 2000 for f in free.values())
    assert room == 0 + 2 + 0
    assert_held(gangs["three"], "wait", "3 members like three-worker-0 need 2 cpu, 4Gi memory each",
                f"room for only {room}")
    two = members("nominated.yaml", "two")
    assert_released(gangs["two"], two)
    check_plan(gangs["two"]["plan"], demand(two, R(cpu=2000, mem=4 * GI)), free)
    assert set(gangs["two"]["plan"].values()) == {"nom-b"}


def test_constraints_the_controller_cannot_check_and_best_effort_roots():
    gangs = simulate("certifiable.yaml")
    assert_held(gangs["near-cache"], "not-certifiable", "required pod affinity",
                "set kubenexus.io/best-effort-placement=true on the root")
    assert_held(gangs["zonal"], "not-certifiable", "topology spread constraints")
    # The feature-cache replica takes 500m / 1Gi on cert-a.
    free = {"cert-a": R(cpu=8000 - 500, mem=31 * GI, pods=109), "cert-b": R(cpu=8000, mem=32 * GI, pods=110),
            "cert-c": R(cpu=8000, mem=32 * GI, pods=110)}
    plans = []
    # zonal-best-effort: its root PyTorchJob (in the snapshot) opts into best effort; soft has only scores.
    for job in ("zonal-best-effort", "soft"):
        pods = members("certifiable.yaml", job)
        assert_released(gangs[job], pods)
        check_plan(gangs[job]["plan"], demand(pods, R(cpu=2000, mem=8 * GI)), free)
        plans.append(gangs[job]["plan"])
    # The spread constraint was not planned: those members go unpinned, for the scheduler to place.
    assert gangs["zonal-best-effort"]["reason"].endswith(
        "best effort: members with topology spread constraints are released unpinned, for the scheduler to place")
    assert "unpinned" not in gangs["soft"]["reason"]
    check_plan(merged(*plans), {p: R(cpu=2000, mem=8 * GI) for plan in plans for p in plan}, free)


def test_one_member_per_node_anti_affinity_is_planned_exactly():
    gangs = simulate("anti-affinity.yaml")
    # Three empty 8 cpu nodes, but ring-worker-0 and -1 (2 cpu / 4Gi) run on anti-a and anti-b.
    free = {"anti-a": R(cpu=8000 - 2000, mem=28 * GI, pods=109), "anti-b": R(cpu=8000 - 2000, mem=28 * GI, pods=109),
            "anti-c": R(cpu=8000, mem=32 * GI, pods=110)}
    # ring runs; its recreated worker-2 may not join a sibling on anti-a or anti-b.
    assert_released(gangs["ring"], ["ring-worker-2"])
    assert gangs["ring"]["plan"] == {"ring-worker-2": "anti-c"}
    apart = members("anti-affinity.yaml", "apart")
    assert_released(gangs["apart"], apart)
    check_plan(gangs["apart"]["plan"], demand(apart, R(cpu=2000, mem=4 * GI)), free, apart=[apart])
    # crowd: 4 workers, one per node, 3 nodes.
    assert_held(gangs["crowd"], "never-fits", "4 members must run on separate nodes (required pod anti-affinity)",
                "only 3 of their eligible nodes")
    # etl: the executors' term selects every pod of the gang, the driver included: three distinct nodes.
    executors = ["executor (expected #1)", "executor (expected #2)"]
    assert_released(gangs["etl"], ["etl-driver"])
    etl = {"etl-driver": R(cpu=1000, mem=1408), **demand(executors, R(cpu=2000, mem=4505))}
    check_plan(gangs["etl"]["plan"], etl, free, apart=[list(etl)])
    wants = {"ring-worker-2": R(cpu=2000, mem=4 * GI), **demand(apart, R(cpu=2000, mem=4 * GI)), **etl}
    check_plan(merged(gangs["ring"]["plan"], gangs["apart"]["plan"], gangs["etl"]["plan"]), wants, free)


def test_a_gang_waits_for_its_members():
    gangs = simulate("waiting.yaml")
    # min-available 4; worker-2 is being deleted and does not count.
    assert_held(gangs["resnet"], "wait")
    assert gangs["resnet"]["reason"] == "2/4 members present"


def test_unresolved_pods_are_resolved_against_their_roots():
    result = output("unresolved.yaml")
    # nightly-report's Job does not opt in (no annotation, namespace not labelled): the pod is simply released.
    assert result["ungated"] == [{"namespace": "reports", "name": "nightly-report-x7k2p",
                                  "reason": "root batch/v1/Job/nightly-report is not opted in to gang scheduling"}]
    # monthly-rollup's Job opts in with parallelism 2: its pod joins the gang, which waits for the second pod.
    gangs = simulate("unresolved.yaml")
    assert set(gangs) == {"monthly-rollup"}
    assert_held(gangs["monthly-rollup"], "wait")
    assert gangs["monthly-rollup"]["reason"] == "1/2 members present"


def test_malformed_input_is_refused_with_a_clear_message(tmp_path):
    shape = tmp_path / "shape.yaml"
    shape.write_text("apiVersion: v1\nkind: Pod\nmetadata: [web-0]\n")
    quantity = tmp_path / "quantity.yaml"
    quantity.write_text((SCENARIOS / "trap.yaml").read_text().replace("allocatable:\n    cpu: '4'",
                                                                      "allocatable:\n    cpu: four", 1))
    runs = {
        "yaml": [str(SCENARIOS / "malformed.yaml"), "-o", "json"],
        "missing": [str(tmp_path / "absent.yaml")],
        "shape": [str(shape)],
        "quantity": [str(quantity), "--output", "yaml"],
        "now": [str(SCENARIOS / "trap.yaml"), "--now", "yesterday"],
    }
    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        done = dict(zip(runs, pool.map(lambda args: run_cli(*args), runs.values()), strict=True))
    for name, result in done.items():
        assert result.returncode == 2, (name, result.stderr)
        assert result.stdout == "" and "Traceback" not in result.stderr, name
        assert result.stderr.startswith("kubenexus simulate: ") and result.stderr.count("\n") <= 4, name
    assert done["yaml"].stderr.startswith(f"kubenexus simulate: cannot read {SCENARIOS / 'malformed.yaml'}: ")
    assert "line 4" in done["yaml"].stderr
    assert "No such file" in done["missing"].stderr
    assert done["shape"].stderr == f"kubenexus simulate: {shape}: a Pod without metadata.name\n"
    assert done["quantity"].stderr == f"kubenexus simulate: {quantity}: Node trap-a: not a quantity: 'four'\n"
    assert "--now: 'yesterday' is not an RFC 3339 time" in done["now"].stderr


# --- jobs submitted, not yet their pods ------------------------------------------------------------------------------


def test_submitted_jobs_are_admitted_then_planned() -> None:
    """submit.yaml holds the jobs alone: the pods their operators create first go through admission, then the pass
    plans them like any other (see the scenario's header)."""
    result = output("submit.yaml")
    jobs = {job["name"]: job for job in result["submitted"]}
    assert set(jobs) == {"resnet", "giant", "pi", "etl", "sweep", "serve"}  # not done: its status says it ran

    def pods(job: str) -> list[tuple[str, str, str, int]]:
        return [(p["name"], p["action"], p["group"], p["size"]) for p in jobs[job]["pods"]]

    # PyTorchJob pods are named <job>-<replica type>-<index>; all four form the gang, of 1 + 3.
    assert pods("resnet") == [("resnet-master-0", "gang", "resnet", 4)] + [
        (f"resnet-worker-{i}", "gang", "resnet", 4) for i in range(3)]
    assert pods("giant") == [("giant-master-0", "gang", "giant", 2), ("giant-worker-0", "gang", "giant", 2)]
    assert pods("pi") == [("pi-driver", "gang", "pi", 1 + 2)]  # the driver first; its 2 executors come later
    assert [(p["action"], p["reasons"][-1]) for p in jobs["etl"]["pods"]] == 2 * [
        ("skip", "root batch/v1/Job/etl is not opted in to gang scheduling")]
    # A JobSet's pods come through its Jobs (Indexed, index 0 each): one per replicated Job, one gang of 2.
    assert [(p["name"].rsplit("-", 1)[0], p["action"], p["group"], p["size"]) for p in jobs["sweep"]["pods"]] == [
        (f"sweep-workers-{i}-0", "gang", "sweep", 2) for i in range(2)]
    assert jobs["serve"]["pods"] is None  # a LeaderWorkerSet's pods come through StatefulSets: not modelled
    gangs = simulate("submit.yaml")
    free = dict.fromkeys(("node-a", "node-b"), R(cpu=8000, mem=32 * GI, gpu=4, pods=110))
    resnet = [name for name, *_ in pods("resnet")]
    assert_released(gangs["resnet"], resnet)
    check_plan(gangs["resnet"]["plan"], demand(resnet, R(cpu=1000, mem=2 * GI, gpu=1)), free)
    assert_held(gangs["giant"], "never-fits", "needs 8 nvidia.com/gpu")  # 8 > the 4 of either node
    assert gangs["pi"]["decision"] == "release" and gangs["pi"]["released"] == ["pi-driver"]
    text = run_cli(str(SCENARIOS / "submit.yaml"), "--now", NOW)
    assert text.returncode == 1, text.stderr  # giant never fits
    lines = text.stdout.splitlines()
    assert lines[:2] == ["ml/resnet: PyTorchJob submitted: its operator creates 4 pod(s) first",
                         "    resnet-master-0, resnet-worker-0, resnet-worker-1, resnet-worker-2: gated as members of "
                         "gang resnet of 4"]


def _snapshot(tmp_path: Path, *drop: str, scenario: str = "submit.yaml") -> str:
    """``scenario`` without the objects named ``drop`` ("Namespace batch"): the path of that snapshot."""
    items = list(objects(scenario))
    kept = [o for o in items if f"{o['kind']} {o['metadata']['name']}" not in drop]
    assert len(kept) == len(items) - len(drop)
    path = tmp_path / scenario
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": kept}))
    return str(path)


def test_a_namespace_admission_reads_and_the_snapshot_lacks_is_named_not_guessed(tmp_path: Path) -> None:
    """A snapshot of nodes and pods alone (the documented command once left namespaces out): etl's pods were "not
    opted in", as if its namespace had no label, and the run went on."""
    done = run_cli(_snapshot(tmp_path, "Namespace batch"), "--now", NOW)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"kubenexus simulate: {tmp_path / 'submit.yaml'}: namespace batch is not in the snapshot, "
                           f"and admitting the pods of Job batch/etl reads it: add namespaces to it ({SNAPSHOT})\n")


def _with_queue(tmp_path: Path, name: str, queue: str, *drop: str) -> str:
    """queues.yaml with PyTorchJob ``name`` naming ``queue`` (kubenexus.io/queue), without the objects ``drop``."""
    path = Path(_snapshot(tmp_path, *drop, scenario="queues.yaml"))
    snapshot = yaml.safe_load(path.read_text())
    [job] = [o for o in snapshot["items"] if (o["kind"], o["metadata"]["name"]) == ("PyTorchJob", name)]
    job["metadata"]["annotations"]["kubenexus.io/queue"] = queue
    path.write_text(yaml.safe_dump(snapshot))
    return str(path)


def test_a_queue_a_root_names_and_the_snapshot_lacks_is_named_not_called_missing(tmp_path: Path) -> None:
    """A snapshot without Queues (the documented command once left them out): the gang of a root naming one waited
    on "which does not exist: create it", sending its user to create a Queue the cluster has."""
    done = run_cli(_with_queue(tmp_path, "etl", "team-b", "Queue team-a", "Queue team-b"), "-o", "json", "--now", NOW)
    assert done.returncode == 0, done.stderr
    [etl] = [g for g in json.loads(done.stdout)["gangs"] if g["name"] == "etl"]
    assert_held(etl, "wait", "its root names Queue 'team-b' (kubenexus.io/queue), which is not in the snapshot: add "
                f"Queues to it ({SNAPSHOT})")
    assert "does not exist" not in etl["reason"]


def test_a_namespace_queues_select_by_and_the_snapshot_lacks_is_named(tmp_path: Path) -> None:
    """The Queues select namespaces by label: without namespace b, etl's Queue cannot be told, and the reason says
    the namespace is missing from the snapshot rather than "not known yet", as if it might come."""
    done = run_cli(_snapshot(tmp_path, "Namespace b", scenario="queues.yaml"), "-o", "json", "--now", NOW)
    assert done.returncode == 0, done.stderr
    [etl] = [g for g in json.loads(done.stdout)["gangs"] if g["name"] == "etl"]
    assert_held(etl, "wait", "namespace b is not in the snapshot, and Queues select by its labels: add namespaces to "
                f"it ({SNAPSHOT})")


def test_every_snapshot_command_reads_what_simulate_reads() -> None:
    """Each copy of the snapshot command (docs, README, the CLI's help and messages) lists every resource simulate
    reads besides the jobs: a copy without Queues, budgets or PodGroups gives a snapshot that decides otherwise."""
    needed = set(SNAPSHOT.removeprefix("kubectl get ").removesuffix(" -A -o yaml").split(","))
    root = Path(__file__).parent.parent
    files = [root / "README.md", *sorted((root / "docs").rglob("*.md")), *sorted((root / "kubenexus").glob("*.py"))]
    found = {}
    for path in files:
        for command in re.findall(r"kubectl get (\S*nodes,pods[^`)\n]*?) -A -o yaml", path.read_text()):
            found[f"{path.relative_to(root)}: {command}"] = set(command.split(","))
    assert len(found) >= 5, found  # getting-started, explain-simulate, troubleshooting, cli.md, simulate.py
    assert {where: sorted(needed - listed) for where, listed in found.items() if needed - listed} == {}


def test_a_root_an_unresolved_pod_needs_and_the_snapshot_lacks_is_named(tmp_path: Path) -> None:
    """Decided again without its Job, the pod was released as "not a gang member"."""
    done = run_cli(_snapshot(tmp_path, "Job monthly-rollup", scenario="unresolved.yaml"), "--now", NOW)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"kubenexus simulate: {tmp_path / 'unresolved.yaml'}: Job reports/monthly-rollup "
                                  "is not in the snapshot, and deciding pod reports/monthly-rollup-"), done.stderr
    assert done.stderr.endswith(" again (unresolved) reads it: add it (kubectl get jobs -A -o yaml)\n"), done.stderr


# --- each gang's PodGroup ------------------------------------------------------------------------------------------


def test_each_gang_shows_its_podgroup() -> None:
    """gpu.yaml: llama (4 x 4 GPU) waits for GPUs, resnet (2 x 1 GPU) is released, vit can never fit. The PodGroups
    say the same in their phase, size, counts and the short reason the printer column shows."""
    result = output("gpu.yaml")
    groups = {g["metadata"]["name"]: g for g in result["podgroups"]}
    assert set(groups) == {"llama", "resnet", "vit"}
    summary = {name: (g["status"]["phase"], g["spec"]["minMember"], g["status"]["present"], g["status"]["running"],
                      g["status"]["waitingFor"]) for name, g in groups.items()}
    assert summary == {"llama": ("Waiting", 4, 4, 0, f"capacity: {GPU}"), "resnet": ("Releasing", 2, 2, 0, "2 to bind"),
                       "vit": ("NeverFits", 2, 2, 0, "never fits")}
    for name, group in groups.items():
        assert group["apiVersion"] == "scheduling.kubenexus.io/v1alpha1" and group["kind"] == "PodGroup"
        assert group["metadata"]["namespace"] == "ml"
        assert group["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kubenexus-gate-controller"
        [owner] = group["metadata"]["ownerReferences"]
        gang = simulate("gpu.yaml")[name]
        assert group["status"]["reason"] == gang["reason"]
        assert owner["kind"] and owner["uid"], owner
    assert groups["resnet"]["status"]["nodes"] == sorted(set(simulate("gpu.yaml")["resnet"]["plan"].values()))
    text = run_cli(str(SCENARIOS / "gpu.yaml"), "--now", NOW).stdout.splitlines()
    assert f"    PodGroup llama: Waiting, min 4, present 4, running 0, waiting for capacity: {GPU}" in text
    assert "    PodGroup vit: NeverFits, min 2, present 2, running 0" in text  # it said "waiting for never fits"
    resnet = text.index("    PodGroup resnet: Releasing, min 2, present 2, running 0, waiting for 2 to bind")
    assert text[resnet - 3].startswith("ml/resnet: release"), "after its gang's line and plan"


def test_a_staged_gang_shows_its_expected_members() -> None:
    result = output("spark-driver.yaml")
    [group] = [g for g in result["podgroups"] if g["metadata"]["name"] == "pi"]
    assert group["spec"]["minMember"] == 1 + group["spec"]["expectedMembers"]
    assert group["status"]["expected"] == group["spec"]["expectedMembers"] > 0


def test_a_gang_whose_root_is_not_in_the_snapshot_waits_and_the_output_says_what_to_add(tmp_path):
    """The controller never plans a gang without what its root asks; a snapshot of nodes and pods alone (no roots)
    gets the same answer, naming the root and the command that adds it."""
    kept = [doc for doc in yaml.safe_load_all((SCENARIOS / "fragmentation.yaml").read_text())
            if doc and doc["kind"] in ("Node", "Pod")]
    snapshot = tmp_path / "nodes-and-pods.yaml"
    snapshot.write_text(yaml.safe_dump_all(kept))
    done = run_cli(str(snapshot), "-o", "json", "--now", NOW)
    gangs = {g["name"]: g for g in json.loads(done.stdout)["gangs"]}
    assert done.returncode == 0, done.stderr
    for name, root, plural in (("bert", "PyTorchJob ml/bert", "pytorchjobs"), ("shard", "Job data/shard", "jobs")):
        assert gangs[name]["decision"] == "wait" and gangs[name]["plan"] == {}, gangs[name]
        assert f"its root {root} is not in the snapshot" in gangs[name]["reason"], gangs[name]["reason"]
        assert f"kubectl get {plural} -A -o yaml" in gangs[name]["reason"], gangs[name]["reason"]

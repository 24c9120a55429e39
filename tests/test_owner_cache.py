"""gang.objects.CachedSource / MemorySource and gang.owners.walk_owners."""

from __future__ import annotations

import gc
import json
import threading
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor

import pytest

from gang import slim
from gang.kinds import JOB, NAMESPACE
from gang.objects import LookupFailed, MemorySource
from gang.owners import MAX_HOPS, Outcome, walk_owners
from kube.owner_cache import CachedSource, NeedsRead, cached_only, deep_size
from workloads.batch.adapter import JobAdapter
from workloads.spark.adapter import ScheduledSparkApplicationAdapter, SparkApplicationAdapter

pytestmark = pytest.mark.unit

NS = "team-a"
SPARK = "sparkoperator.k8s.io/v1beta2"


def obj(api_version, kind, name, uid=None, refs=(), namespace=NS):
    meta = {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}", "ownerReferences": list(refs)}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


def ref(api_version, kind, name, uid=None, controller=True):
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid or f"uid-{name}",
            "controller": controller}


def pod(*refs):
    return obj("v1", "Pod", "p-0", refs=refs)


# --- CachedSource ------------------------------------------------------------------------


class FakeSource:
    """Test equipment: an inner source that counts reads and serves what the test says."""

    def __init__(self, objects=None):
        self.objects = dict(objects or {})  # name -> object, None, or an exception to raise
        self.reads = 0
        self.lock = threading.Lock()
        self.delay = 0.0

    def get(self, kind, api_version, namespace, name, uid=None, deadline=None):
        with self.lock:
            self.reads += 1
        time.sleep(self.delay)
        result = self.objects.get(name)
        if isinstance(result, Exception):
            raise result
        return result


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def cached(inner, ttl=30.0, max_entries=100, clock=None, max_bytes=None):
    return CachedSource(inner, ttl, max_entries, max_bytes, clock or Clock())


def get(source, name, uid=None):
    return source.get(JOB, "batch/v1", NS, name, uid)


def test_refresh_replaces_or_drops_what_is_held_and_a_read_in_flight_is_not_stored():
    """What a watch of roots says an object is now (kube/fresh_roots.py): a changed copy replaced under the key of
    the watched version, dropped under another version's, dropped when deleted; a read that was in flight when the
    object changed may have read it before the change: returned, not kept."""
    first, second = obj("batch/v1", "Job", "j", uid="u1"), obj("batch/v1", "Job", "j", uid="u1")
    second["metadata"]["annotations"] = {"kubenexus.io/gang-scheduling": "false"}
    inner = FakeSource({"j": first})
    source = cached(inner)
    get(source, "j")
    other_version = ("batch/v2", "Job", NS, "j")
    source.refresh([("batch/v1", "Job", NS, "j"), other_version], second)
    assert get(source, "j") == second and inner.reads == 1, "replaced by the watch, no read"
    source.refresh([("batch/v1", "Job", NS, "j")], None)
    inner.objects["j"] = second
    assert get(source, "j") == second and inner.reads == 2, "dropped on deletion: read again"
    inner.objects["k"], inner.delay = first, 0.3
    reader = threading.Thread(target=get, args=(source, "k"))
    reader.start()
    time.sleep(0.1)
    source.refresh([("batch/v1", "Job", NS, "k")], second)  # the object changed while it was being read
    reader.join()
    inner.delay, inner.objects["k"] = 0.0, second
    assert get(source, "k") == second and inner.reads == 4, "the in-flight read was not kept"


def test_forget_drops_every_entry_of_a_kind():
    inner = FakeSource({"j": obj("batch/v1", "Job", "j")})
    source = cached(inner)
    get(source, "j")
    source.forget("Job")
    get(source, "j")
    assert inner.reads == 2 and source.size[0] == 1


def test_hit_costs_no_inner_read():
    job = obj("batch/v1", "Job", "j")
    inner = FakeSource({"j": job})
    source = cached(inner)
    assert get(source, "j") is job
    assert get(source, "j") is job
    assert get(source, "j", "uid-j") is job
    assert inner.reads == 1


def test_keys_differ_by_namespace_and_name():
    inner = FakeSource({"a": obj("batch/v1", "Job", "a"), "b": obj("batch/v1", "Job", "b")})
    source = cached(inner)
    get(source, "a")
    get(source, "b")
    source.get(JOB, "batch/v1", "other", "a")
    assert inner.reads == 3


def test_entry_expires_after_ttl():
    clock = Clock()
    inner = FakeSource({"j": obj("batch/v1", "Job", "j")})
    source = cached(inner, ttl=10, clock=clock)
    get(source, "j")
    clock.now += 9.9
    get(source, "j")
    assert inner.reads == 1
    clock.now += 0.1  # exactly ttl seconds after the read
    get(source, "j")
    assert inner.reads == 2
    clock.now += 5
    get(source, "j")  # the re-read restarted the ttl
    assert inner.reads == 2


def test_lru_bound_evicts_least_recently_used():
    inner = FakeSource({n: obj("batch/v1", "Job", n) for n in "abc"})
    source = cached(inner, max_entries=2)
    get(source, "a")
    get(source, "b")
    get(source, "a")  # hit: a is now the most recently used
    get(source, "c")  # evicts b
    assert inner.reads == 3
    get(source, "a")
    get(source, "c")
    assert inner.reads == 3
    get(source, "b")
    assert inner.reads == 4


def test_not_found_is_not_cached():
    inner = FakeSource({"gone": None})
    source = cached(inner)
    assert get(source, "gone") is None
    assert get(source, "gone") is None
    assert inner.reads == 2


def test_lookup_failure_propagates_and_is_not_cached():
    job = obj("batch/v1", "Job", "j")
    inner = FakeSource({"j": LookupFailed("GET /apis/batch/v1/...: HTTP 503")})
    source = cached(inner)
    with pytest.raises(LookupFailed, match="503"):
        get(source, "j")
    inner.objects["j"] = job
    assert get(source, "j") is job
    assert get(source, "j") is job
    assert inner.reads == 2


def test_other_uid_is_read_again():
    old, new = obj("batch/v1", "Job", "j", uid="u1"), obj("batch/v1", "Job", "j", uid="u2")
    inner = FakeSource({"j": old})
    source = cached(inner)
    assert get(source, "j", "u1") is old
    inner.objects["j"] = new  # deleted and recreated under the same name
    assert get(source, "j", "u1") is old  # still what the caller expects: a hit
    assert inner.reads == 1
    assert get(source, "j", "u2") is new
    assert inner.reads == 2
    assert get(source, "j", "u2") is new
    assert get(source, "j") is new
    assert inner.reads == 2


def test_concurrent_misses_on_one_key_cost_one_read():
    job = obj("batch/v1", "Job", "j")
    inner = FakeSource({"j": job})
    inner.delay = 0.3
    source = cached(inner)
    start = threading.Barrier(16)

    def worker(_):
        start.wait()
        return get(source, "j")

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(worker, range(16)))
    assert inner.reads == 1
    assert all(result is job for result in results)


def test_cached_only_answers_hits_and_refuses_reads():
    job = obj("batch/v1", "Job", "j")
    inner = FakeSource({"j": job, "k": obj("batch/v1", "Job", "k")})
    source = cached(inner)
    assert get(source, "j") is job
    with cached_only():
        assert get(source, "j") is job
        with pytest.raises(NeedsRead):
            get(source, "k")
        with pytest.raises(NeedsRead):  # recreated under the same name: a read
            get(source, "j", "other-uid")
    assert inner.reads == 1
    assert get(source, "k")["metadata"]["name"] == "k"  # the refused read left nothing behind, outside the mode
    assert inner.reads == 2


def test_cached_only_does_not_wait_for_a_concurrent_read():
    inner = FakeSource({"j": obj("batch/v1", "Job", "j")})
    inner.delay = 0.5
    source = cached(inner)
    with ThreadPoolExecutor(max_workers=1) as pool:
        reading = pool.submit(get, source, "j")
        while inner.reads == 0:
            time.sleep(0.005)
        started = time.monotonic()
        with cached_only(), pytest.raises(NeedsRead):
            get(source, "j")
        assert time.monotonic() - started < inner.delay / 2
        assert reading.result()["metadata"]["name"] == "j"


def test_cached_only_is_per_thread():
    inner = FakeSource({"j": obj("batch/v1", "Job", "j")})
    source = cached(inner)
    with cached_only(), ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(get, source, "j").result()["metadata"]["name"] == "j"
    assert inner.reads == 1


def test_needs_read_passes_handlers_of_failures():
    # It must reach the code that set the mode through the handlers that admit a pod unchanged on a bug.
    assert not issubclass(NeedsRead, Exception)


def test_waiters_retry_after_a_failed_leader():
    # A failure is not shared as a result: the waiting callers read again themselves.
    inner = FakeSource({"j": LookupFailed("timeout")})
    inner.delay = 0.1
    source = cached(inner)
    start = threading.Barrier(4)

    def worker(_):
        start.wait()
        try:
            return get(source, "j")
        except LookupFailed:
            return "failed"

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(worker, range(4))) == ["failed"] * 4
    assert inner.reads == 4


def test_expired_entries_are_dropped_without_being_pushed_out():
    clock = Clock()
    inner = FakeSource({n: obj("batch/v1", "Job", n) for n in "abcd"})
    source = cached(inner, ttl=10, clock=clock)
    for name in "abc":
        get(source, name)
    clock.now += 5
    get(source, "a")  # a hit does not extend the ttl
    assert source.size[0] == 3
    clock.now += 5
    get(source, "d")
    assert source.size == (1, source.size[1])
    assert source.size[1] < 2 * deep_size(inner.objects["d"]) + 1024


def test_byte_bound_evicts_least_recently_used():
    objects = {n: obj("batch/v1", "Job", n) for n in "abcd"}
    one = cached(FakeSource(objects))
    get(one, "a")
    entry = one.size[1]  # what one such entry is accounted
    inner = FakeSource(objects)
    source = cached(inner, max_bytes=3 * entry + entry // 2)
    for name in "abc":
        get(source, name)
    get(source, "a")  # a is now the most recently used
    get(source, "d")  # evicts b
    assert source.size[0] == 3 and source.size[1] <= 3 * entry + entry // 2
    assert inner.reads == 4
    get(source, "a")
    get(source, "c")
    assert inner.reads == 4
    get(source, "b")
    assert inner.reads == 5


def test_an_object_larger_than_the_byte_bound_is_not_cached():
    big = obj("batch/v1", "Job", "big")
    big["metadata"]["labels"] = {f"label-{i}": "x" * 60 for i in range(100)}
    inner = FakeSource({"big": big})
    source = cached(inner, max_bytes=4096)
    assert get(source, "big") is big
    assert get(source, "big") is big
    assert inner.reads == 2 and source.size == (0, 0)


def test_accounted_bytes_cover_what_the_cache_keeps():
    """The byte bound is measured, not guessed: what the cache holds (tracemalloc) stays within its account."""
    bodies = {}
    for i in range(1000):
        job = obj("batch/v1", "Job", f"job-{i}", refs=[ref("jobset.x-k8s.io/v1alpha2", "JobSet", "js")])
        job["metadata"].update(labels={"jobset.sigs.k8s.io/replicatedjob-name": "workers"},
                               annotations={"kubectl.kubernetes.io/last-applied-configuration": "x" * 5000},
                               managedFields=[{"manager": "jobset", "fieldsV1": {f"f:{k}": {} for k in range(50)}}])
        job["spec"] = {"parallelism": 4, "completions": 4, "template": {"spec": {"containers": [
            {"name": "c", "image": "i", "env": [{"name": f"E{k}", "value": "v"} for k in range(30)],
             "resources": {"requests": {"cpu": "1"}}}]}}}
        bodies[f"job-{i}"] = json.dumps(job).encode()

    class Decoding:
        def get(self, kind, api_version, namespace, name, uid=None, deadline=None):
            return slim.decode(kind, bodies[name])

    source = cached(Decoding(), max_entries=10_000)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for name in bodies:
            get(source, name)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    entries, accounted = source.size
    assert entries == 1000
    assert held <= accounted <= 2 * held, (held, accounted)


# --- MemorySource ------------------------------------------------------------------------


def test_memory_source_finds_by_group_kind_namespace_name():
    job = obj("batch/v1", "Job", "j")
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    source = MemorySource([job, ns])
    assert source.get(JOB, "batch/v1", NS, "j") is job
    assert source.get(JOB, "batch/v1beta1", NS, "j") is job  # any version of the group
    assert source.get(JOB, "batch/v1", "other", "j") is None
    assert source.get(JOB, "batch/v1", NS, "k") is None
    assert source.get(NAMESPACE, "v1", None, NS) is ns


# --- walk_owners -------------------------------------------------------------------------


def walk(pod_obj, *objects):
    return walk_owners(pod_obj, NS, MemorySource(objects))


def names(result):
    return [o["metadata"]["name"] for o in result.chain]


def test_controller_reference_is_followed_to_the_root():
    app = obj(SPARK, "SparkApplication", "app")
    result = walk(pod(ref(SPARK, "SparkApplication", "app")), app)
    assert result.outcome is Outcome.ROOT
    assert result.chain == [app]
    assert isinstance(result.adapter, SparkApplicationAdapter)


def test_controller_reference_wins_over_other_references():
    job = obj("batch/v1", "Job", "j")
    result = walk(pod(ref(SPARK, "SparkApplication", "other", controller=False), ref("batch/v1", "Job", "j")), job)
    assert result.outcome is Outcome.ROOT
    assert names(result) == ["j"]


def test_pod_without_controller_reference_has_no_owner():
    job = obj("batch/v1", "Job", "j")
    result = walk(pod(ref("batch/v1", "Job", "j", controller=False)), job)
    assert result.outcome is Outcome.NO_OWNER
    assert result.chain == []


def test_scheduled_spark_application_reached_without_controller_flag():
    sched = obj(SPARK, "ScheduledSparkApplication", "nightly")
    app = obj(SPARK, "SparkApplication", "nightly-123",
              refs=[ref(SPARK, "ScheduledSparkApplication", "nightly", controller=False)])
    result = walk(pod(ref(SPARK, "SparkApplication", "nightly-123")), app, sched)
    assert result.outcome is Outcome.ROOT
    assert names(result) == ["nightly-123", "nightly"]
    assert isinstance(result.adapter, ScheduledSparkApplicationAdapter)


def test_spark_application_with_other_non_controller_owner_stops_there():
    wf = obj("argoproj.io/v1alpha1", "Workflow", "wf")
    app = obj(SPARK, "SparkApplication", "app", refs=[ref("argoproj.io/v1alpha1", "Workflow", "wf", controller=False)])
    result = walk(pod(ref(SPARK, "SparkApplication", "app")), app, wf)
    assert result.outcome is Outcome.ROOT
    assert names(result) == ["app"]
    assert isinstance(result.adapter, SparkApplicationAdapter)


def test_non_controller_scheduled_spark_reference_only_counts_from_a_spark_application():
    sched = obj(SPARK, "ScheduledSparkApplication", "nightly")
    job = obj("batch/v1", "Job", "j", refs=[ref(SPARK, "ScheduledSparkApplication", "nightly", controller=False)])
    result = walk(pod(ref("batch/v1", "Job", "j")), job, sched)
    assert result.outcome is Outcome.ROOT
    assert names(result) == ["j"]
    assert isinstance(result.adapter, JobAdapter)


def job_chain(length):
    """Jobs j1 -> j2 -> ... -> j<length>, each controlled by the next."""
    return [obj("batch/v1", "Job", f"j{i}", refs=[ref("batch/v1", "Job", f"j{i + 1}")] if i < length else [])
            for i in range(1, length + 1)]


def test_chain_of_max_hops_reaches_its_root():
    result = walk(pod(ref("batch/v1", "Job", "j1")), *job_chain(MAX_HOPS))
    assert MAX_HOPS == 10
    assert result.outcome is Outcome.ROOT
    assert len(result.chain) == 10


def test_chain_longer_than_max_hops_is_too_deep():
    result = walk(pod(ref("batch/v1", "Job", "j1")), *job_chain(MAX_HOPS + 1))
    assert result.outcome is Outcome.TOO_DEEP
    assert len(result.chain) == 10


def test_cycle_is_detected():
    a = obj("batch/v1", "Job", "a", refs=[ref("batch/v1", "Job", "b")])
    b = obj("batch/v1", "Job", "b", refs=[ref("batch/v1", "Job", "a")])
    result = walk(pod(ref("batch/v1", "Job", "a")), a, b)
    assert result.outcome is Outcome.CYCLE
    assert names(result) == ["a", "b"]


def test_self_owned_object_is_a_cycle():
    a = obj("batch/v1", "Job", "a", refs=[ref("batch/v1", "Job", "a")])
    assert walk(pod(ref("batch/v1", "Job", "a")), a).outcome is Outcome.CYCLE


@pytest.mark.parametrize(
    "bad_ref",
    [
        {"apiVersion": "batch/v1", "kind": "Job", "controller": True},
        {"apiVersion": "batch/v1", "kind": "Job", "name": "", "controller": True},
        {"apiVersion": "batch/v1", "name": "j", "controller": True},
        {"kind": "Job", "name": "j", "controller": True},
        {"apiVersion": "batch/v1", "kind": 5, "name": "j", "controller": True},
        {"apiVersion": ["batch/v1"], "kind": "Job", "name": "j", "controller": True},
    ],
)
def test_malformed_reference_is_invalid(bad_ref):
    result = walk(pod(bad_ref), obj("batch/v1", "Job", "j"))
    assert result.outcome is Outcome.INVALID_REF


def test_malformed_reference_further_up_keeps_the_chain_so_far():
    job = obj("batch/v1", "Job", "j", refs=[{"apiVersion": "batch/v1", "kind": "Job", "controller": True}])
    result = walk(pod(ref("batch/v1", "Job", "j")), job)
    assert result.outcome is Outcome.INVALID_REF
    assert names(result) == ["j"]


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [("apps/v1", "ReplicaSet"), ("apps/v1", "DaemonSet"), ("apps/v1", "Deployment"), ("v1", "ReplicationController")],
)
def test_long_running_owner_is_non_batch(api_version, kind):
    assert walk(pod(ref(api_version, kind, "x"))).outcome is Outcome.NON_BATCH


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [("example.com/v1", "Widget"), ("v1", "ReplicaSet"), ("apps/v1", "Job")],  # wrong group: not the known kind
)
def test_unregistered_owner_kind_is_unknown(api_version, kind):
    assert walk(pod(ref(api_version, kind, "x"))).outcome is Outcome.UNKNOWN_KIND


def test_absent_owner_is_missing():
    result = walk(pod(ref("batch/v1", "Job", "j")))
    assert result.outcome is Outcome.MISSING


def test_owner_with_other_uid_is_missing():
    recreated = obj("batch/v1", "Job", "j", uid="new-uid")
    result = walk(pod(ref("batch/v1", "Job", "j", uid="old-uid")), recreated)
    assert result.outcome is Outcome.MISSING
    assert result.chain == []


def test_intermediate_owner_without_root_is_no_root():
    sts = obj("apps/v1", "StatefulSet", "s")
    result = walk(pod(ref("apps/v1", "StatefulSet", "s")), sts)
    assert result.outcome is Outcome.NO_ROOT
    assert names(result) == ["s"]


def test_lookup_failure_is_failed():
    source = cached(FakeSource({"j": LookupFailed("HTTP 503")}))
    result = walk_owners(pod(ref("batch/v1", "Job", "j")), NS, source)
    assert result.outcome is Outcome.FAILED
    assert "503" in result.detail

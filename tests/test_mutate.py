"""The pure mutation: idempotent, never touches the original, and its cheap patch equals the full diff."""

from __future__ import annotations

import copy
import json

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gang import keys
from gang.adapters.base import ExpectedMember
from gang.config import Config
from gang.decide import Action, Decision
from gang.mutate import desired_pod, json_patch

pytestmark = pytest.mark.unit

GANG = Decision(Action.GANG, ("test",), group="g", size=3, owner="x/v1/K/n", owner_uid="u",
                expected=(ExpectedMember("executor", 2, {"cpu": "1"}),))
UNRESOLVED = Decision(Action.UNRESOLVED, ("test",), unresolved="GET /x: timeout")

text = st.text(min_size=1, max_size=8)
label_keys = st.sampled_from(keys.WRITTEN_LABELS) | text
annotation_keys = st.sampled_from(keys.WRITTEN_ANNOTATIONS) | text
json_values = st.recursive(st.none() | st.booleans() | st.integers() | text,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
                           max_leaves=8)
pods = st.fixed_dictionaries({}, optional={
    "metadata": st.fixed_dictionaries({}, optional={
        "labels": st.dictionaries(label_keys, text, max_size=3) | json_values,
        "annotations": st.dictionaries(annotation_keys, text, max_size=3),
        "name": text}),
    "spec": st.fixed_dictionaries({}, optional={
        "schedulingGates": st.lists(st.fixed_dictionaries({"name": text}), max_size=2),
        "schedulerName": text,
        "containers": st.lists(st.dictionaries(text, json_values, max_size=3), max_size=2)}),
})


@settings(max_examples=300, deadline=None)
@given(pod=pods, decision=st.sampled_from([GANG, UNRESOLVED]), keep=st.booleans())
def test_patch_equals_full_diff_and_is_idempotent(pod, decision, keep):
    config = Config(scheduler_name="keep" if keep else "kubenexus-scheduler")
    original = copy.deepcopy(pod)
    desired = desired_pod(pod, decision, config)
    assert pod == original, "the original pod must not be modified"
    patch = json_patch(pod, desired)
    def canonical(ops):
        return sorted(json.dumps(op, sort_keys=True) for op in ops)

    # without move detection, as json_patch: an "unresolved" removed and a key added with the same value is no move
    assert canonical(patch) == canonical(jsonpatch.JsonPatch.from_diff(pod, desired, optimization=False).patch)
    assert jsonpatch.apply_patch(pod, patch) == desired
    assert json_patch(desired, desired_pod(desired, decision, config)) == []


def test_user_values_are_kept_and_missing_ones_filled():
    pod = {"metadata": {"labels": {keys.POD_GROUP_LABEL: "mine"}}, "spec": {"schedulerName": "other"}}
    desired = desired_pod(pod, GANG, Config())
    assert desired["metadata"]["labels"] == {keys.POD_GROUP_LABEL: "mine", keys.POD_GROUP_MIN_LABEL: "3"}
    assert desired["metadata"]["annotations"][keys.COSCHED_GROUP_ANNOTATION] == "mine"
    assert json.loads(desired["metadata"]["annotations"][keys.EXPECTED_MEMBERS_ANNOTATION]) == [
        {"role": "executor", "count": 2, "requests": {"cpu": "1"}, "nodeSelector": {}, "tolerations": [],
         "affinity": None}]
    assert desired["spec"]["schedulerName"] == "kubenexus-scheduler"
    assert desired["spec"]["schedulingGates"] == [{"name": keys.GANG_GATE}]


def test_skip_returns_the_pod_itself():
    pod = {"metadata": {}, "spec": {}}
    assert desired_pod(pod, Decision(Action.SKIP, ("x",)), Config()) is pod

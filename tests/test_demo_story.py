"""The demo's ``Story``: each pod's line printed with the webhook's decision about it, whichever comes first, and what
came after kept after it; terms explained once; no line longer than ``WIDTH``."""

from __future__ import annotations

import pytest

from kubenexus import demo

pytestmark = pytest.mark.unit

REASONS = ["root kubeflow.org/v1/PyTorchJob/resnet opts in (kubenexus.io/gang-scheduling=true)",
           "PyTorchJob: all 4 pods are created together", "gang resnet of 4 member(s)"]


def printed(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.splitlines()


def test_a_pod_waits_for_its_decision_and_what_came_after_waits_with_it(capsys):
    story = demo.Story()
    story.pod("resnet-0", "pod resnet-0 (PyTorchJob/resnet): gated, gang resnet, min-available 4", "gang", "gate")
    story.say("controller: GangWaiting on PyTorchJob resnet: 1/4 members present")
    assert printed(capsys) == []
    story.decision("resnet-0", "gang", REASONS, ["a warning"])
    lines = printed(capsys)
    assert lines[0].endswith("pod resnet-0 (PyTorchJob/resnet): gated, gang resnet, min-available 4")
    assert lines[1].startswith(demo.INDENT + "webhook: gang: root kubeflow.org/v1/PyTorchJob/resnet opts in")
    warning = next(i for i, line in enumerate(lines) if line.startswith(demo.INDENT + "warning: a warning"))
    notes = [i for i, line in enumerate(lines) if line.startswith(demo.INDENT + "note: ")]
    assert len(notes) == 2 and warning < notes[0]
    assert lines[-1].endswith("controller: GangWaiting on PyTorchJob resnet: 1/4 members present")
    assert all(len(line) <= demo.WIDTH for line in lines)


def test_a_decision_read_before_its_pod_joins_it_and_the_same_reasons_are_not_repeated(capsys):
    story = demo.Story()
    story.decision("resnet-0", "gang", REASONS, [])
    story.decision("resnet-1", "gang", REASONS, [])
    assert printed(capsys) == []
    story.pod("resnet-1", "pod resnet-1: gated", "gang")
    story.pod("resnet-0", "pod resnet-0: gated", "gang")
    lines = printed(capsys)
    assert [line.split("] ")[-1].strip() for line in lines[:2]] == [
        "pod resnet-1: gated", "webhook: gang, for the same reasons as resnet-0"]
    assert lines[2].startswith(demo.INDENT + "note: a gang is")
    second = next(i for i, line in enumerate(lines) if line.endswith("] pod resnet-0: gated"))
    assert lines[second + 1].startswith(demo.INDENT + "webhook: gang: root kubeflow.org/v1/PyTorchJob/resnet")
    assert not any("note:" in line for line in lines[second:])  # explained once


def test_a_pod_without_a_decision_is_told_alone_after_a_while_and_nothing_after_the_end(capsys, monkeypatch):
    monkeypatch.setattr(demo, "PAIRING", 0.0)
    story = demo.Story()
    story.pod("lonely", "pod lonely: not gated")
    story.say("later")
    assert [line.split("] ")[-1] for line in printed(capsys)] == ["pod lonely: not gated", "later"]
    story.decision("refused", "gang", ["denied"], [])
    story.close()
    assert printed(capsys) == [demo.INDENT + "webhook: gang: denied"]
    story.say("too late")
    story.pod("late", "pod late")
    assert printed(capsys) == []

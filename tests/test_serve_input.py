"""``kubenexus cluster serve`` and ``demo`` refuse bad input before they start anything: one line on stderr, exit
status 2."""

from __future__ import annotations

import pytest

from kubenexus.cli import main

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("args", "wrong"), [
    (["--node-cpu", "abc"], "--node-cpu: 'abc' is not a quantity"),
    (["--node-memory=0"], "--node-memory: '0' is not a positive quantity"),
    (["--nodes", "0"], "--nodes: '0' is not a whole number of at least 1"),
    (["--kubeconfig-out", "/nonexistent/dir/kubeconfig"], "directory /nonexistent/dir does not exist"),
])
def test_bad_input_is_refused_before_starting(args: list[str], wrong: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["cluster", "serve", *args])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and wrong in err, err
    assert "Traceback" not in err and not out


@pytest.mark.parametrize("seconds", ["-3", "0", "soon", "nan", "inf"])
def test_demo_refuses_seconds_that_are_not_a_positive_number(seconds: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--seconds -3`` printed the canned story over 0 pods."""
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--seconds", seconds])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and not out
    assert err == (f"kubenexus demo: argument --seconds: {seconds!r} is not a positive number of seconds (see "
                   "kubenexus demo --help)\n")

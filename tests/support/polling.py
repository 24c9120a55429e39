"""Bounded polling: wait for a condition, fail with what was last seen."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(check: Callable[[], Any], timeout: float = 10.0, what: str | Callable[[], str] = "",
             interval: float = 0.02) -> Any:
    """Poll ``check`` every ``interval`` seconds until it returns something truthy; fail with ``what`` (text, or a
    callable for a message computed at the time of failure) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    described = what() if callable(what) else (what or check)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {described}: last value {value!r}")


SETTLE = 1.5  # something that has not happened after this long (several decision passes) is held back


def stays(check: Callable[[], bool], what: str | Callable[[], str], seconds: float = SETTLE,
          interval: float = 0.05) -> None:
    """``check`` holds throughout ``seconds`` (checked every ``interval``)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert check(), what() if callable(what) else what
        time.sleep(interval)

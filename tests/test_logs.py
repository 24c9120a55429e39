"""JSON log lines: formatted where they are logged, written in order by a writer thread, and across a fork."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import time

import pytest

from kube.logs import BackgroundJsonHandler

pytestmark = pytest.mark.unit


@pytest.fixture
def logger():
    handler = BackgroundJsonHandler()
    log = logging.getLogger(f"test.logs.{id(handler)}")
    log.propagate, log.level = False, logging.DEBUG
    log.addHandler(handler)
    yield log, handler
    log.removeHandler(handler)


def _lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_a_line_carries_the_message_and_the_structured_fields(logger, capsys):
    log, handler = logger
    log.info("pod %s", "admitted", extra={"uid": "u1", "reasons": ("a", "b"), "group": None})
    handler.flush()
    [line] = _lines(capsys.readouterr().err)
    assert line.pop("ts").endswith("Z")
    assert line == {"level": "info", "logger": log.name, "msg": "pod admitted", "uid": "u1", "reasons": ["a", "b"],
                    "group": None}


def test_the_writer_thread_writes_without_being_asked_and_keeps_the_order(logger, capsys):
    log, _ = logger
    for i in range(500):
        log.warning("line", extra={"i": i})
    deadline, seen = time.monotonic() + 10, []
    while len(seen) < 500 and time.monotonic() < deadline:
        time.sleep(BackgroundJsonHandler.FLUSH_SECONDS)
        seen += _lines(capsys.readouterr().err)
    assert [line["i"] for line in seen] == list(range(500))


def test_each_process_writes_its_own_lines_once_across_a_fork():
    script = textwrap.dedent("""
        import logging, os, sys
        from kube import logs
        logs.configure("INFO")
        log = logging.getLogger("forked")
        log.info("before the fork")
        logging.getLogger().handlers[0].flush()
        log.info("parent's, not yet written")
        pid = os.fork()
        if pid == 0:
            log.info("child")
            sys.exit(0)
        os.waitpid(pid, 0)
        log.info("parent")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    messages = [line["msg"] for line in _lines(done.stderr)]
    assert sorted(messages) == sorted(["before the fork", "parent's, not yet written", "child", "parent"])
    assert messages.index("parent's, not yet written") < messages.index("parent")


def test_configure_keeps_the_fields_without_looking_up_callers():
    script = textwrap.dedent("""
        import logging
        from kube import logs
        logs.configure("INFO")
        logging.getLogger("x").info("hello", extra={"k": 1})
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    [line] = _lines(done.stderr)
    assert set(line) == {"ts", "level", "logger", "msg", "k"} and line["msg"] == "hello"


def test_gunicorn_builds_no_access_log_fields_unless_an_access_log_is_set():
    """The shipped settings route gunicorn's error log through a ``logconfig_dict``, which gunicorn would otherwise
    take for an access log (and build every request's access-log fields for it)."""
    script = textwrap.dedent("""
        from gunicorn.config import Config
        from gang.config import Config as Settings
        from webhook.server import gunicorn_options
        cfg = Config()
        for name, value in gunicorn_options(Settings(), "127.0.0.1:0").items():
            cfg.set(name, value)
        assert cfg.logconfig_dict and cfg.accesslog is None
        logger = cfg.logger_class(cfg)
        print(logger.access_log_enabled)
        cfg.set("accesslog", "-")
        logger.setup(cfg)
        print(logger.access_log_enabled)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]

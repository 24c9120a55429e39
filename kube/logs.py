"""JSON log lines: one object per record, with the structured fields passed as ``extra``.

Records are formatted and written by a background thread, so a decision log line costs the
admission path only a deque append.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import threading
import time
import weakref
from collections import deque

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class BackgroundJsonHandler(logging.Handler):
    """Hands records to a writer thread that formats them as JSON lines to stderr, a batch at a time.

    The logging thread only appends the record to a deque: no lock, no thread to wake. (A queue whose
    writer woke for every record cost an admission more than its decision: on shared VMs a wake-up is
    tens of microseconds, and the woken writer then competes for the GIL.) The writer wakes every
    ``FLUSH_SECONDS``, writes what has accumulated in one call, and writes the rest when the process
    exits. It is (re)started lazily in each process, because gunicorn configures logging in the master
    and forks workers afterwards (threads do not survive a fork).
    """

    FLUSH_SECONDS = 0.05

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self._forked()
        _handlers.add(self)
        atexit.register(self.flush)

    def _forked(self) -> None:
        """A fresh start (also in a forked child: no writer thread, the locks possibly copied held, and the
        records the parent had not written yet are the parent's to write)."""
        self._records: deque[logging.LogRecord] = deque()
        self._writing = threading.Lock()  # the writer thread and the exit flush; never the logging threads
        self._starting = threading.Lock()
        self._started = False

    def handle(self, record: logging.LogRecord) -> bool:
        """As ``Handler.handle`` but without its lock: ``emit`` is a deque append, safe from any thread."""
        if not self.filter(record):
            return False
        self.emit(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        if not self._started:
            self._start()
        self._records.append(record)

    def flush(self) -> None:
        """Format and write everything logged so far, in order."""
        with self._writing:
            lines = []
            while self._records:
                record = self._records.popleft()
                try:
                    lines.append(self.format(record) + "\n")
                except Exception:
                    self.handleError(record)
            if lines:
                sys.stderr.write("".join(lines))
                sys.stderr.flush()

    def _start(self) -> None:
        with self._starting:
            if self._started:
                return
            threading.Thread(target=self._write_forever, name="log-writer", daemon=True).start()
            self._started = True

    def _write_forever(self) -> None:
        while True:
            time.sleep(self.FLUSH_SECONDS)
            self.flush()


_handlers: weakref.WeakSet[BackgroundJsonHandler] = weakref.WeakSet()


def _after_fork() -> None:
    for handler in _handlers:
        handler._forked()


os.register_at_fork(after_in_child=_after_fork)


def configure(level: str = "INFO") -> None:
    root = logging.getLogger()
    root.handlers[:] = [BackgroundJsonHandler()]
    root.setLevel(level)

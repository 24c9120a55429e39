"""JSON log lines: one object per record, with the structured fields passed as ``extra``.

Records are formatted where they are logged and written by a background thread, so a decision
log line costs the admission path its formatting and a deque append, never a wait on stderr.
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
    """Formats each record as a JSON line in the logging thread; a writer thread writes them to stderr in batches.

    The logging thread formats (microseconds) and appends the line to a deque: no lock, no thread to wake, and
    never a wait on stderr (a slow log reader stalls the writer, not admission). The writer wakes every
    ``FLUSH_SECONDS`` and writes what has accumulated in one call; the rest is written when the process exits.
    Measured under load in a webhook worker: a writer woken per record (a queue) cost an admission about half a
    decision's time more, and a writer that formatted the records itself a third more, than formatting here.
    The writer is (re)started lazily in each process, because gunicorn configures logging in the master and
    forks workers afterwards (threads do not survive a fork).
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
        lines the parent had not written yet are the parent's to write)."""
        self._lines: deque[str] = deque()
        self._writing = threading.Lock()  # the writer thread and the exit flush; never the logging threads
        self._starting = threading.Lock()
        self._started = False

    def handle(self, record: logging.LogRecord) -> bool:
        """As ``Handler.handle`` but without its lock: ``emit`` formats (no shared state) and appends to a deque."""
        if not self.filter(record):
            return False
        self.emit(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + "\n"
        except Exception:
            self.handleError(record)
            return
        if not self._started:
            self._start()
        self._lines.append(line)

    def flush(self) -> None:
        """Write everything logged so far, in order."""
        with self._writing:
            lines = []
            while self._lines:
                lines.append(self._lines.popleft())
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
    # A JSON line carries none of a record's standard attributes (JsonFormatter): spare every log call finding its
    # caller's frame, the process id (a system call) and the thread and process names (the logging HOWTO's
    # "Optimization" switches).
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    root = logging.getLogger()
    root.handlers[:] = [BackgroundJsonHandler()]
    root.setLevel(level)

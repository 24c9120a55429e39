"""JSON log lines: one object per record, with the structured fields passed as ``extra``.

Records are formatted and written by a background thread, so a decision log line costs the
admission path only a queue put.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import threading
import time
from logging.handlers import QueueHandler, QueueListener

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


class BackgroundJsonHandler(QueueHandler):
    """Queues records for a writer thread that formats them as JSON to stderr.

    The writer is (re)started lazily in each process, because gunicorn configures logging in
    the master and forks workers afterwards (threads do not survive a fork).
    """

    def __init__(self) -> None:
        super().__init__(queue.SimpleQueue())
        self._pid = 0
        self._lock = threading.Lock()

    def _start(self) -> None:
        with self._lock:
            if self._pid == os.getpid():
                return
            self.queue = queue.SimpleQueue()
            out = logging.StreamHandler()
            out.setFormatter(JsonFormatter())
            listener = QueueListener(self.queue, out)
            listener.start()
            atexit.register(listener.stop)  # drain what is queued when the process exits
            self._pid = os.getpid()

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record  # formatting happens on the writer thread

    def enqueue(self, record: logging.LogRecord) -> None:
        if self._pid != os.getpid():
            self._start()
        self.queue.put_nowait(record)


def configure(level: str = "INFO") -> None:
    root = logging.getLogger()
    root.handlers[:] = [BackgroundJsonHandler()]
    root.setLevel(level)

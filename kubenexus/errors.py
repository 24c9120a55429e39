"""The one way a ``kubenexus`` command reports what the user must fix: ``kubenexus <command>: <message>``.

Commands raise ``CommandError``; ``kubenexus.cli.main`` prints it as one line on stderr and exits with its code.
Exit codes: 2 for usage errors (arguments, input files, configuration, kubeconfig), 1 for a command that ran and
found what it reports (``simulate``: a gang that never fits; ``doctor``: a problem), 3 when the cluster cannot be
reached (``kubenexus/live.py``).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import IO

USAGE, FOUND, UNREACHABLE = 2, 1, 3


class CommandError(Exception):
    """An error the user can fix; the message names the fix."""

    def __init__(self, message: str, code: int = USAGE) -> None:
        super().__init__(message)
        self.code = code


@contextlib.contextmanager
def opened(path: str, what: str = "") -> Iterator[IO[str]]:
    """``path`` opened for reading as text, ``-`` being stdin; an unreadable file is a usage error naming it."""
    if path == "-":
        yield sys.stdin
        return
    try:
        handle = open(path, encoding="utf-8")  # noqa: SIM115 — closed below, after the caller's block
    except OSError as exc:
        raise CommandError(f"cannot read {what + ' ' if what else ''}{path}: {exc.strerror}") from None
    with handle:
        yield handle

"""The "Supported operators" table of the documentation (docs/reference/operators.md), generated from the records:
``python -m workloads.readme`` rewrites it in place (between the markers), ``tests/test_workloads.py`` checks it is
current. (The module keeps the name it had when the table lived in README.md.)"""

from __future__ import annotations

import sys
from pathlib import Path

from workloads import records

PAGE = Path(__file__).resolve().parent.parent / "docs" / "reference" / "operators.md"
BEGIN = "<!-- operators table: generated from workloads/<kind>/__init__.py by `python -m workloads.readme` -->"
END = "<!-- end of operators table -->"


def table() -> str:
    """The table, one row per ``Row`` of every registered kind, in registration order."""
    rows = [row for record in records().values() for row in record.readme]
    lines = ["| root kind | gang | staged (members created later) |", "|---|---|---|"]
    lines += [f"| {row.kinds} | {row.gang} | {row.staged} |" for row in rows]
    return "\n".join(lines)


def rendered(text: str) -> str:
    """``text`` (the page) with the table between the markers replaced by the current one."""
    head, begin, rest = text.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"{PAGE.name} lacks the markers {BEGIN!r} ... {END!r}")
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main() -> int:
    text = PAGE.read_text(encoding="utf-8")
    new = rendered(text)
    if new != text:
        PAGE.write_text(new, encoding="utf-8")
        print(f"{PAGE}: operators table updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())

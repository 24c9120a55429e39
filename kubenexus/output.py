"""The one output flag of the tools (``explain``, ``simulate``, ``doctor``): ``-o/--output text|json|yaml``."""

from __future__ import annotations

import argparse
import json
from typing import Any

import yaml

FORMATS = ("text", "json", "yaml")


def add_output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", choices=FORMATS, default="text",
                        help="text for people (default), json or yaml for programs")


def dump(result: Any, output: str) -> str:
    """``result`` (plain JSON data) as ``output`` (json or yaml), without a trailing newline."""
    if output == "json":
        return json.dumps(result, indent=2, sort_keys=True)
    return yaml.safe_dump(result, sort_keys=False).rstrip()

"""Request recording: every request the emulated apiserver serves, with the attributes RBAC authorizes on.

Each request is reduced to what the apiserver's ``RequestInfoFactory`` derives from the URL and the method
(apiserver/pkg/endpoints/request/requestinfo.go), which is exactly what the RBAC authorizer evaluates:
the verb (GET on a collection is ``list``, ``watch`` with ``?watch=true``, DELETE on a collection is
``deletecollection``), API group, resource, subresource, namespace and name, or the path and the lower-cased
HTTP method for a non-resource request (``/version``, ``/apis``). The user is the authenticated one.
"""

from __future__ import annotations

import threading
import urllib.parse
from collections import Counter
from dataclasses import dataclass

_API_PREFIXES = ("api", "apis")
_SPECIAL_VERBS = ("proxy", "watch")
_NAMESPACE_SUBRESOURCES = ("status", "finalize")
_METHOD_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_TRUE = ("1", "t", "T", "TRUE", "true", "True")  # strconv.ParseBool, as the query parameter codec reads ?watch=


@dataclass(frozen=True)
class RequestInfo:
    """The authorizer's view of one request (``authorizer.Attributes``)."""

    verb: str
    resource_request: bool
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""


def _bool(values: list[str] | None) -> bool:
    return bool(values and values[-1] in _TRUE)


def _exact_name(field_selector: str) -> str:
    """``metadata.name=x`` (or ``==``) in a field selector: a list or watch of one named object."""
    for term in field_selector.split(","):
        for op in ("==", "="):
            key, sep, value = term.partition(op)
            if sep and key.strip() == "metadata.name" and "!" not in key:
                value = value.strip()
                return value if value not in ("", ".", "..") and "/" not in value and "%" not in value else ""
    return ""


def request_info(method: str, raw_path: str) -> RequestInfo:
    """``RequestInfoFactory.NewRequestInfo`` for ``method`` and the request URI (path and query)."""
    parsed = urllib.parse.urlsplit(raw_path)
    path = parsed.path
    nonresource = RequestInfo(method.lower(), False, path=path)
    parts = path.strip("/").split("/") if path.strip("/") else []
    if len(parts) < 3 or parts[0] not in _API_PREFIXES:
        return nonresource
    prefix, parts = parts[0], parts[1:]
    group = ""
    if prefix != "api":
        if len(parts) < 3:
            return nonresource
        group, parts = parts[0], parts[1:]
    version, parts = parts[0], parts[1:]
    if parts[0] in _SPECIAL_VERBS:
        if len(parts) < 2:
            return nonresource  # the apiserver answers this with an error before authorizing it
        verb, parts = parts[0], parts[1:]
    else:
        verb = _METHOD_VERBS.get(method.upper(), "")
    namespace = ""
    if parts[0] == "namespaces" and len(parts) > 1:
        namespace = urllib.parse.unquote(parts[1])
        if len(parts) > 2 and parts[2] not in _NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    resource = parts[0]
    name = urllib.parse.unquote(parts[1]) if len(parts) >= 2 else ""
    subresource = parts[2] if len(parts) >= 3 and verb != "proxy" else ""
    if not name and verb == "get":
        query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
        verb = "watch" if _bool(query.get("watch")) else "list"
        name = _exact_name((query.get("fieldSelector") or [""])[-1])
    if not name and verb == "delete":
        verb = "deletecollection"
    return RequestInfo(verb, True, group, version, resource, subresource, namespace, name, path)


@dataclass(frozen=True)
class Record:
    """One served request: who made it, what RBAC sees of it, and the HTTP status it got."""

    user: str
    groups: tuple[str, ...]
    request: RequestInfo
    method: str
    status: int

    def describe(self) -> str:
        r = self.request
        if not r.resource_request:
            return f"{self.user}: {r.verb} {r.path} -> {self.status}"
        what = f"{r.resource}/{r.subresource}" if r.subresource else r.resource
        group = f".{r.api_group}" if r.api_group else ""
        where = f" in {r.namespace}" if r.namespace else ""
        name = f" {r.name}" if r.name else ""
        return f"{self.user}: {r.verb} {what}{group}{name}{where} -> {self.status}"


class AuditLog:
    """Thread-safe record of every request; keeps the newest ``limit`` and counts what it had to drop."""

    def __init__(self, limit: int = 1_000_000) -> None:
        self._lock = threading.Lock()
        self._records: list[Record] = []
        self._limit = limit
        self.dropped = 0

    def record(self, user: str, groups: tuple[str, ...], method: str, raw_path: str, status: int,
               info: RequestInfo | None = None) -> None:
        entry = Record(user, tuple(groups), info or request_info(method, raw_path), method.upper(), status)
        with self._lock:
            self._records.append(entry)
            if len(self._records) > self._limit:
                excess = len(self._records) - self._limit
                del self._records[:excess]
                self.dropped += excess

    def snapshot(self, user: str | None = None) -> list[Record]:
        """The records so far (only ``user``'s when given), oldest first."""
        with self._lock:
            records = list(self._records)
        return [r for r in records if user is None or r.user == user]

    def clear(self) -> list[Record]:
        """Forget every record; returns what was recorded."""
        with self._lock:
            records, self._records = self._records, []
            self.dropped = 0
        return records

    def counts(self, user: str | None = None) -> Counter[tuple[str, ...]]:
        """How often each (user, verb, group, resource, subresource, namespace, name or path) was requested."""
        counter: Counter[tuple[str, ...]] = Counter()
        for record in self.snapshot(user):
            r = record.request
            counter[(record.user, r.verb, r.api_group, r.resource, r.subresource, r.namespace, r.name or r.path)] += 1
        return counter

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

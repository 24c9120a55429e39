"""Label and field selectors with the apiserver's parsing and matching rules.

Why: list/watch filtering and webhook namespace/object selectors must behave exactly like
k8s.io/apimachinery (labels.Parse, metav1.LabelSelectorAsSelector, fields.ParseSelector), including
the corner cases clients rely on: ``!=``/``notin`` match an absent key, ``in ()`` means ``in ("")``,
field values use backslash escapes, and an unknown field is a 400 "field label not supported".
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FieldRequirement",
    "FieldSelector",
    "LabelSelector",
    "Requirement",
    "SelectorError",
    "parse_field_selector",
    "parse_label_selector",
    "selector_from_dict",
]


class SelectorError(ValueError):
    """A selector the apiserver would reject with 400 BadRequest; the message is the response text."""


# --- validation (k8s.io/apimachinery/pkg/util/validation) -------------------------------------------

_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_INT64 = re.compile(r"[+-]?[0-9]+")


def _label_key_errors(key: str) -> list[str]:
    parts = key.split("/")
    if len(parts) > 2:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.' with an optional "
            "DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    errs: list[str] = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errs.append("prefix part must be non-empty")
        elif len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix):
            errs.append(
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character"
            )
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if not _NAME.fullmatch(name):
        errs.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
            "end with an alphanumeric character"
        )
    return errs


def _label_value_errors(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if value and not _NAME.fullmatch(value):
        errs.append(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
            "'.', and must start and end with an alphanumeric character"
        )
    return errs


def _parse_int64(text: str) -> int | None:
    if not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


# --- label selectors ----------------------------------------------------------------------------------

_SET_OPS = ("in", "notin")
_EXACT_OPS = ("=", "==", "!=")
_INT_OPS = ("gt", "lt")


@dataclass(frozen=True)
class Requirement:
    """One ANDed term; ``operator`` uses apimachinery's selection.Operator spellings."""

    key: str
    operator: str  # "in", "notin", "=", "==", "!=", "exists", "!", "gt", "lt"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator in ("in", "=", "=="):
            return present and labels[self.key] in self.values
        if self.operator in ("notin", "!="):
            return not present or labels[self.key] not in self.values
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        if not present:  # gt / lt
            return False
        have, want = _parse_int64(labels[self.key]), _parse_int64(self.values[0])
        if have is None or want is None:
            return False
        return have > want if self.operator == "gt" else have < want


def _requirement(key: str, op: str, values: Collection[str]) -> Requirement:
    """labels.NewRequirement: validate and build."""
    errs = [f"key: Invalid value: {key!r}: {e}" for e in _label_key_errors(key)]
    vals = tuple(sorted(set(values)))
    if op in _SET_OPS and not vals:
        errs.append("values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty")
    if op in _EXACT_OPS and len(vals) != 1:
        errs.append("values: Invalid value: exact-match compatibility requires one single value")
    if op in ("exists", "!") and vals:
        errs.append("values: Invalid value: values set must be empty for exists and does not exist")
    if op in _INT_OPS and (len(vals) != 1 or _parse_int64(vals[0]) is None):
        errs.append("values: Invalid value: for 'Gt', 'Lt' operators, exactly one integer value is required")
    for v in vals:
        errs.extend(f"values[{key}]: Invalid value: {v!r}: {e}" for e in _label_value_errors(v))
    if errs:
        raise SelectorError("; ".join(errs))
    return Requirement(key, op, vals)


@dataclass(frozen=True)
class LabelSelector:
    """ANDed requirements; no requirements selects everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def empty(self) -> bool:
        return not self.requirements


# Lexer tokens (labels.Token).
_END, _IDENT, _OPEN, _CLOSE, _COMMA, _NOT, _EQ, _DEQ, _NEQ, _IN, _NOTIN, _GT, _LT = range(13)
_SYMBOLS = {")": _CLOSE, ",": _COMMA, "!": _NOT, "==": _DEQ, "=": _EQ, ">": _GT, "<": _LT, "!=": _NEQ, "(": _OPEN}
_KEYWORDS = {"in": _IN, "notin": _NOTIN}
_OPERATORS = {_IN: "in", _NOTIN: "notin", _EQ: "=", _DEQ: "==", _NEQ: "!=", _GT: "gt", _LT: "lt"}
_SPECIAL = set("=!(),><")
_SPACE = set(" \t\r\n")


def _lex(text: str) -> list[tuple[int, str]]:
    items: list[tuple[int, str]] = []
    pos, n = 0, len(text)
    while True:
        while pos < n and text[pos] in _SPACE:
            pos += 1
        if pos >= n:
            items.append((_END, ""))
            return items
        if text[pos] in _SPECIAL:  # longest operator made of special symbols
            buf, tok, lit = "", None, ""
            while pos < n and text[pos] in _SPECIAL:
                buf += text[pos]
                if buf in _SYMBOLS:
                    tok, lit = _SYMBOLS[buf], buf
                elif tok is not None:
                    break
                pos += 1
            if tok is None:
                raise SelectorError(f"unable to parse requirement: error expected: keyword found '{buf}'")
            items.append((tok, lit))
            continue
        start = pos
        while pos < n and text[pos] not in _SPECIAL and text[pos] not in _SPACE:
            pos += 1
        word = text[start:pos]
        items.append((_KEYWORDS.get(word, _IDENT), word))


class _Parser:
    """labels.Parser: recursive descent over the scanned tokens."""

    def __init__(self, text: str) -> None:
        self.items = _lex(text)
        self.pos = 0

    def peek(self, values: bool = True) -> tuple[int, str]:
        tok, lit = self.items[self.pos]
        return (_IDENT if values and tok in (_IN, _NOTIN) else tok), lit

    def take(self, values: bool = True) -> tuple[int, str]:
        item = self.peek(values)
        self.pos += 1
        return item

    def parse(self) -> list[Requirement]:
        reqs: list[Requirement] = []
        while True:
            tok, lit = self.peek()
            if tok == _END:
                return reqs
            if tok not in (_IDENT, _NOT):
                raise SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")
            reqs.append(self.requirement())
            tok, lit = self.take()
            if tok == _END:
                return reqs
            if tok != _COMMA:
                raise SelectorError(f"found '{lit}', expected: ',' or 'end of string'")
            tok, lit = self.peek()
            if tok not in (_IDENT, _NOT):
                raise SelectorError(f"found '{lit}', expected: identifier after ','")

    def requirement(self) -> Requirement:
        try:
            return self._requirement()
        except SelectorError as exc:
            raise SelectorError(f"unable to parse requirement: {exc}") from None

    def _requirement(self) -> Requirement:
        tok, key = self.take()
        negated = tok == _NOT
        if negated:
            tok, key = self.take()
        if tok != _IDENT:
            raise SelectorError(f"found '{key}', expected: identifier")
        if errs := _label_key_errors(key):
            raise SelectorError(f"Invalid value: {key!r}: {'; '.join(errs)}")
        if negated:
            return _requirement(key, "!", ())
        if self.peek()[0] in (_END, _COMMA):
            return _requirement(key, "exists", ())
        tok, lit = self.take(values=False)
        if tok not in _OPERATORS:
            raise SelectorError(f"found '{lit}', expected: in, notin, =, ==, !=, gt, lt")
        op = _OPERATORS[tok]
        return _requirement(key, op, self.set_values() if op in _SET_OPS else self.exact_value())

    def set_values(self) -> set[str]:
        tok, lit = self.take()
        if tok != _OPEN:
            raise SelectorError(f"found '{lit}' expected: '('")
        tok, lit = self.peek()
        if tok == _CLOSE:  # "()" is the set {""}
            self.take()
            return {""}
        if tok not in (_IDENT, _COMMA):
            raise SelectorError(f"found '{lit}', expected: ',', ')' or identifier")
        values = self.identifiers()
        if self.take()[0] != _CLOSE:
            raise SelectorError(f"found '{lit}', expected: ')'")
        return values

    def identifiers(self) -> set[str]:
        values: set[str] = set()
        while True:
            tok, lit = self.take()
            if tok == _IDENT:
                values.add(lit)
                tok2, lit2 = self.peek()
                if tok2 == _CLOSE:
                    return values
                if tok2 != _COMMA:
                    raise SelectorError(f"found '{lit2}', expected: ',' or ')'")
            elif tok == _COMMA:  # empty entries, as in "(,a)", "(a,,b)" or "(a,)"
                if not values:
                    values.add("")
                tok2 = self.peek()[0]
                if tok2 == _CLOSE:
                    values.add("")
                    return values
                if tok2 == _COMMA:
                    values.add("")
            else:
                raise SelectorError(f"found '{lit}', expected: ',', or identifier")

    def exact_value(self) -> set[str]:
        if self.peek()[0] in (_END, _COMMA):
            return {""}
        tok, lit = self.take()
        if tok != _IDENT:
            raise SelectorError(f"found '{lit}', expected: identifier")
        return {lit}


def parse_label_selector(text: str) -> LabelSelector:
    """Parse the ``labelSelector`` query parameter (labels.Parse); "" selects everything."""
    reqs = _Parser(text).parse()
    return LabelSelector(tuple(sorted(reqs, key=lambda r: r.key)))


_EXPRESSION_OPS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def selector_from_dict(sel: Mapping[str, Any] | None) -> LabelSelector:
    """metav1.LabelSelectorAsSelector for webhook namespaceSelector/objectSelector.

    ``None`` selects everything because admissionregistration/v1 defaults an unset selector to ``{}``;
    an empty selector selects everything too.
    """
    if not sel:
        return LabelSelector()
    reqs = [_requirement(k, "=", (v,)) for k, v in (sel.get("matchLabels") or {}).items()]
    for expr in sel.get("matchExpressions") or []:
        op = _EXPRESSION_OPS.get(expr.get("operator"))
        if op is None:
            raise SelectorError(f"{expr.get('operator')!r} is not a valid label selector operator")
        reqs.append(_requirement(expr.get("key", ""), op, expr.get("values") or ()))
    return LabelSelector(tuple(sorted(reqs, key=lambda r: r.key)))


# --- field selectors ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    operator: str  # "=" (also for "==") or "!="
    value: str

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (_field_value(obj, self.field) == self.value) == (self.operator == "=")


@dataclass(frozen=True)
class FieldSelector:
    """ANDed field terms; no terms selects everything."""

    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(r.matches(obj) for r in self.requirements)

    def empty(self) -> bool:
        return not self.requirements


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string a field set would hold: missing fields (e.g. an unscheduled pod's nodeName) are ""."""
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return ""
        value = value.get(part)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return ""


def _split_terms(text: str) -> list[str]:
    terms, start, escaped = [], 0, False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _unescape(value: str) -> str:
    out, escaped = [], False
    for ch in value:
        if escaped:
            if ch not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence: \\{ch}")
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in ",=":
            raise SelectorError(f"invalid field selector: unescaped character in value: {ch}")
        else:
            out.append(ch)
    if escaped:
        raise SelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def parse_field_selector(text: str, supported: Collection[str]) -> FieldSelector:
    """Parse ``fieldSelector`` (fields.ParseSelector), then reject fields the resource does not index."""
    reqs: list[FieldRequirement] = []
    for term in sorted(_split_terms(text) if text else []):
        if not term:
            continue
        for i in range(len(term)):
            op = next((o for o in ("!=", "==", "=") if term.startswith(o, i)), None)
            if op is not None:
                reqs.append(FieldRequirement(term[:i], "!=" if op == "!=" else "=", _unescape(term[i + len(op) :])))
                break
        else:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
    for req in reqs:
        if req.field not in supported:
            raise SelectorError(f"field label not supported: {req.field}")
    return FieldSelector(tuple(reqs))

"""CEL as the apiserver evaluates it, on cel-python: one environment for webhook matchConditions
(``cluster/admission.py``) and CRD validation rules (``cluster/validation/schema_cel.py``).

cel-python is dynamically typed where cel-go type-checks at compile time, so compilation here checks the parse and
the variables an expression reads (an undeclared one fails as cel-go's checker says it); what the checker would
refuse for types fails at evaluation instead. Added to cel-python's standard functions, as the apiserver's base
environment has them (k8s.io/apiserver/pkg/cel/environment/base.go):

- ``==``/``!=`` with heterogeneous equality (cel-go's default): values of different types are unequal instead of an
  error, numbers compare by value across int, uint and double;
- ``<list<string>>.join([separator])`` of cel-go's strings extension (ext/strings.go), which base.go adds.

Evaluation errors carry cel-go's words where cel-python's differ: ``no such key: <name>`` for a missing field or
map key, ``no such overload`` for operands of the wrong types, ``division by zero``.
"""

from __future__ import annotations

import fractions
import re
import threading
from dataclasses import dataclass
from typing import Any

TYPE_NAMES = frozenset({"int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type",
                        "dyn"})
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})


def celpy() -> Any:
    """cel-python, imported when an expression is first compiled."""
    import celpy

    return celpy


class CelError(Exception):
    """An expression that cannot be compiled or evaluated; the message is cel-go's."""


def _is_tree(node: Any) -> bool:
    """A node of the parse tree (a lark Tree), not a token."""
    return hasattr(node, "data") and hasattr(node, "children")


def _bare_ident(node: Any) -> str | None:
    """The identifier when ``node`` is nothing but one (a macro's loop variable)."""
    while _is_tree(node) and node.data != "ident" and len(node.children) == 1:
        node = node.children[0]
    if _is_tree(node) and node.data == "ident":
        return str(node.children[0])
    return None


def _free(node: Any, bound: frozenset[str]) -> list[str]:
    """Identifiers the expression reads that no macro binds (variables, type names, undeclared ones)."""
    if not _is_tree(node):
        return []
    if node.data == "ident":
        name = str(node.children[0])
        return [] if name in bound else [name]
    if node.data == "member_dot_arg" and len(node.children) == 3:
        target, method, args = node.children
        exprs = args.children if _is_tree(args) else []
        variable = _bare_ident(exprs[0]) if exprs else None
        if not _is_tree(method) and str(method) in _MACROS and variable and len(exprs) >= 2:
            return _free(target, bound) + [n for e in exprs[1:] for n in _free(e, bound | {variable})]
    return [n for child in node.children for n in _free(child, bound)]


def _functions() -> dict[str, Any]:
    """What the apiserver's environment has beyond cel-python's standard functions (module docstring)."""
    evaluation, types = celpy().evaluation, celpy().celtypes
    numbers = (types.IntType, types.UintType, types.DoubleType)

    def equal(a: Any, b: Any) -> Any:
        for value in (a, b):
            if isinstance(value, evaluation.CELEvalError):
                return value
        if isinstance(a, numbers) and isinstance(b, numbers) and type(a) is not type(b):
            try:
                return types.BoolType(fractions.Fraction(a) == fractions.Fraction(b))
            except (ValueError, OverflowError):  # NaN and infinities equal nothing but themselves
                return types.BoolType(float(a) == float(b))
        try:
            return evaluation.bool_eq(a, b)
        except TypeError:
            return types.BoolType(False)

    def not_equal(a: Any, b: Any) -> Any:
        result = equal(a, b)
        return result if isinstance(result, evaluation.CELEvalError) else types.BoolType(not result)

    def join(items: Any, separator: Any = "") -> Any:
        if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
            return evaluation.CELEvalError("no such overload: join", TypeError, None)
        return types.StringType(str(separator).join(items))

    return {"_==_": equal, "_!=_": not_equal, "join": join}


@dataclass(frozen=True)
class Compiled:
    program: Any
    reads: frozenset[str]  # the variables the expression reads


class Programs:
    """Compiled expressions over the ``declared`` variables, by text (a failed compilation is kept too)."""

    def __init__(self, declared: frozenset[str]) -> None:
        self._declared = declared
        self._lock = threading.Lock()
        self._compiled: dict[str, Compiled | CelError] = {}
        self._env: Any = None

    def compile(self, expression: str) -> Compiled:
        """The program of ``expression``; raises CelError with cel-go's compilation error."""
        with self._lock:
            compiled = self._compiled.get(expression)
        if compiled is None:
            compiled = self._compile(expression)
            with self._lock:
                self._compiled[expression] = compiled
        if isinstance(compiled, CelError):
            raise compiled
        return compiled

    def _compile(self, expression: str) -> Compiled | CelError:
        if self._env is None:
            self._env = celpy().Environment()
        try:
            tree = self._env.compile(expression)
        except Exception as exc:  # CELParseError and lark's errors: the text is no CEL expression
            return CelError(f"compilation failed: ERROR: <input>: {str(exc).strip()}")
        free = list(dict.fromkeys(_free(tree, frozenset())))
        undeclared = [name for name in free if name not in self._declared and name not in TYPE_NAMES]
        if undeclared:
            return CelError("compilation failed: " + "; ".join(
                f"ERROR: <input>: undeclared reference to '{name}' (in container '')" for name in undeclared))
        return Compiled(self._env.program(tree, functions=_functions()), frozenset(free) & self._declared)


def evaluate(compiled: Compiled, activation: dict[str, Any]) -> Any:
    """The value of the program; raises CelError with the evaluation error as cel-go words it."""
    try:
        result = compiled.program.evaluate(activation)
    except Exception as exc:  # CELEvalError, and whatever a runtime type mismatch raises
        raise CelError(_cel_go_words(str(exc.args[0] if exc.args else exc))) from None
    if isinstance(result, celpy().evaluation.CELEvalError):
        raise CelError(_cel_go_words(str(result.args[0] if result.args else result)))
    return result


def _cel_go_words(detail: str) -> str:
    detail = detail.split(" (in activation")[0]
    detail = re.sub(r"^no such member in mapping: '(.*)'$", r"no such key: \1", detail)
    detail = re.sub(r"^found no matching overload for .*", "no such overload", detail)
    return "division by zero" if detail == "modulus or divide by zero" else detail


def to_cel(value: Any) -> Any:
    """A JSON value as CEL sees it."""
    return celpy().json_to_cel(value)

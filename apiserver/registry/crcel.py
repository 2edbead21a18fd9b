"""`x-kubernetes-validations`: CEL rules of CRD schemas, checked when a CRD is written and evaluated
against every custom object, with upstream's variables (`self`, `oldSelf`), messages, reasons and paths.

Evaluation uses cel-python (`celpy`); the Kubernetes CEL libraries users write most (strings, lists,
regex, quantity, url, ip/cidr, optionals) are added as functions. cel-python has no type checker, so
a small one here rejects what upstream's checker rejects most often: syntax errors, unknown
identifiers and functions, fields the schema does not declare, and rules that cannot yield a bool.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

import celpy
import lark
from celpy import celtypes
from celpy.evaluation import CELEvalError

from services.api import errors
from services.api.quantity import parse_quantity

logging.getLogger("celpy").setLevel(logging.ERROR)

Cause = dict[str, str]
RULES = "x-kubernetes-validations"
REASONS = ("FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired")
# Upstream's per-request budget is in CEL cost units; ours charges each evaluation a fixed cost plus the
# size of `self`, and each value node converted, so one request cannot keep the apiserver busy for long.
COST_BUDGET = 1_000_000
EVALUATION_COST = 100
MAX_MESSAGE_BYTES = 5 * 1024
BLOCKING = ("FieldValueNotSupported", "FieldValueRequired", "FieldValueTooLong", "FieldValueTooMany",
            "FieldValueTypeInvalid")
_ENV = celpy.Environment()
_RESERVED = {"true", "false", "null", "in", "as", "break", "const", "continue", "else", "for", "function", "if",
             "import", "let", "loop", "package", "namespace", "return", "var", "void", "while"}
_ESCAPE = re.compile(r"__|[.\-/]")


# -- values the Kubernetes libraries add ---------------------------------------------------------------


class Optional:
    """`oldSelf` of a rule with optionalOldSelf: a value that may be absent."""

    def __init__(self, value: Any = None, present: bool = False) -> None:
        self.present = present
        self.val = value


class Quantity:
    def __init__(self, text: str) -> None:
        self.text = text
        self.amount: Decimal = parse_quantity(text)


class URL:
    def __init__(self, text: str) -> None:
        parts = urlsplit(text)
        if not parts.scheme and not text.startswith("/"):
            raise ValueError(f"URL is not absolute: {text}")
        self.parts = parts


def _err(message: str) -> CELEvalError:
    return CELEvalError(message)


def _quantity(text: Any) -> Any:
    try:
        return Quantity(str(text))
    except ValueError:
        return _err(f"invalid quantity: {text}")


def _is_quantity(text: Any) -> celtypes.BoolType:
    try:
        parse_quantity(str(text))
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _amount(value: Any) -> Decimal:
    return value.amount if isinstance(value, Quantity) else Decimal(int(value))


def _url(text: Any) -> Any:
    try:
        return URL(str(text))
    except ValueError as exc:
        return _err(str(exc))


def _is_url(text: Any) -> celtypes.BoolType:
    try:
        URL(str(text))
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _ip(text: Any) -> Any:
    try:
        return ipaddress.ip_address(str(text))
    except ValueError:
        return _err(f"IP Address {str(text)!r} parse error during conversion from string")


def _cidr(text: Any) -> Any:
    try:
        return ipaddress.ip_network(str(text), strict=False), ipaddress.ip_interface(str(text)).ip
    except ValueError:
        return _err(f"network address {str(text)!r} parse error during conversion from string")


def _contains_ip(cidr: Any, other: Any) -> celtypes.BoolType:
    addr = other if not isinstance(other, celtypes.StringType) else ipaddress.ip_address(str(other))
    return celtypes.BoolType(addr in cidr[0])


def _index_of(target: Any, item: Any, *start: Any) -> celtypes.IntType:
    if isinstance(target, celtypes.StringType):
        return celtypes.IntType(str(target).find(str(item), *(int(s) for s in start)))
    return celtypes.IntType(next((i for i, v in enumerate(target) if v == item), -1))


def _last_index_of(target: Any, item: Any) -> celtypes.IntType:
    if isinstance(target, celtypes.StringType):
        return celtypes.IntType(str(target).rfind(str(item)))
    return celtypes.IntType(next((i for i in range(len(target) - 1, -1, -1) if target[i] == item), -1))


def _substring(text: Any, start: Any, end: Any = None) -> Any:
    s = str(text)
    stop = len(s) if end is None else int(end)
    if not 0 <= int(start) <= stop <= len(s):
        return _err(f"index out of range: {int(start) if int(start) < 0 or int(start) > len(s) else stop}")
    return celtypes.StringType(s[int(start):stop])


def _split(text: Any, sep: Any, limit: Any = -1) -> celtypes.ListType:
    n = int(limit)
    if n == 0:
        return celtypes.ListType([])
    parts = str(text).split(str(sep), n - 1) if n > 0 else str(text).split(str(sep))
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def _find(text: Any, pattern: Any) -> celtypes.StringType:
    m = _regex(str(pattern)).search(str(text))
    return celtypes.StringType(m.group(0) if m else "")


def _find_all(text: Any, pattern: Any, limit: Any = -1) -> celtypes.ListType:
    found = [celtypes.StringType(m.group(0)) for m in _regex(str(pattern)).finditer(str(text))]
    return celtypes.ListType(found if int(limit) < 0 else found[:int(limit)])


@lru_cache(maxsize=512)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _matches(text: Any, pattern: Any) -> Any:
    try:
        return celtypes.BoolType(_regex(str(pattern)).search(str(text)) is not None)
    except re.error as exc:
        return _err(f"invalid regular expression: {exc}")


def _reduce(values: Any, pick: Callable[..., Any]) -> Any:
    if not values:
        return _err("no such overload")
    return pick(values)


def _sum(values: Any) -> Any:
    total: Any = celtypes.IntType(0)
    for v in values:
        total = v if total == 0 and not isinstance(v, celtypes.IntType) else total + v
    return total


def _or_value(opt: Any, default: Any) -> Any:
    return opt.val if isinstance(opt, Optional) and opt.present else default


def _value(opt: Any) -> Any:
    if isinstance(opt, Optional) and opt.present:
        return opt.val
    return _err("optional.none() dereference")


def _bool(value: bool) -> celtypes.BoolType:
    return celtypes.BoolType(value)


def _compare(a: Any, b: Any) -> celtypes.IntType:
    x, y = _amount(a), _amount(b)
    return celtypes.IntType((x > y) - (x < y))


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "matches": _matches,
    "lowerAscii": lambda s: celtypes.StringType("".join(c.lower() if c.isascii() else c for c in str(s))),
    "upperAscii": lambda s: celtypes.StringType("".join(c.upper() if c.isascii() else c for c in str(s))),
    "trim": lambda s: celtypes.StringType(str(s).strip()),
    "replace": lambda s, old, new, n=-1: celtypes.StringType(str(s).replace(str(old), str(new), int(n))),
    "split": _split,
    "join": lambda items, sep="": celtypes.StringType(str(sep).join(str(i) for i in items)),
    "substring": _substring,
    "charAt": lambda s, i: celtypes.StringType(str(s)[int(i)] if int(i) < len(str(s)) else ""),
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "find": _find,
    "findAll": _find_all,
    "isSorted": lambda items: _bool(all(items[i] <= items[i + 1] for i in range(len(items) - 1))),
    "sum": _sum,
    "min": lambda items: _reduce(items, min),
    "max": lambda items: _reduce(items, max),
    "dyn": lambda v: v,
    "hasValue": lambda opt: _bool(isinstance(opt, Optional) and opt.present),
    "value": _value,
    "orValue": _or_value,
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "compareTo": _compare,
    "isLessThan": lambda a, b: _bool(_amount(a) < _amount(b)),
    "isGreaterThan": lambda a, b: _bool(_amount(a) > _amount(b)),
    "asInteger": lambda q: celtypes.IntType(int(q.amount)),
    "asApproximateFloat": lambda q: celtypes.DoubleType(float(q.amount)),
    "isInteger": lambda q: _bool(q.amount == q.amount.to_integral_value()),
    "sign": lambda q: celtypes.IntType((q.amount > 0) - (q.amount < 0)),
    "url": _url,
    "isURL": _is_url,
    "getScheme": lambda u: celtypes.StringType(u.parts.scheme),
    "getHost": lambda u: celtypes.StringType(u.parts.netloc.rpartition("@")[2]),
    "getHostname": lambda u: celtypes.StringType(u.parts.hostname or ""),
    "getPort": lambda u: celtypes.StringType(str(u.parts.port) if u.parts.port else ""),
    "getEscapedPath": lambda u: celtypes.StringType(u.parts.path),
    "ip": _ip,
    "isIP": lambda s: _bool(not isinstance(_ip(s), CELEvalError)),
    "family": lambda a: celtypes.IntType(a.version),
    "isLoopback": lambda a: _bool(a.is_loopback),
    "isUnspecified": lambda a: _bool(a.is_unspecified),
    "isGlobalUnicast": lambda a: _bool(a.is_global and not a.is_multicast),
    "cidr": _cidr,
    "isCIDR": lambda s: _bool(not isinstance(_cidr(s), CELEvalError)),
    "containsIP": _contains_ip,
    "prefixLength": lambda c: celtypes.IntType(c[0].prefixlen),
}
# What each function or method yields, for the checker; None: depends on the arguments.
_RETURNS: dict[str, str | None] = {
    "size": "int", "has": "bool", "matches": "bool", "startsWith": "bool", "endsWith": "bool", "contains": "bool",
    "all": "bool", "exists": "bool", "exists_one": "bool", "map": "list", "filter": "list", "int": "int",
    "uint": "uint", "double": "double", "string": "string", "bool": "bool", "bytes": "bytes", "type": None,
    "duration": "duration", "timestamp": "timestamp", "lowerAscii": "string", "upperAscii": "string",
    "trim": "string", "replace": "string", "split": "list", "join": "string", "substring": "string",
    "charAt": "string", "indexOf": "int", "lastIndexOf": "int", "find": "string", "findAll": "list",
    "isSorted": "bool", "sum": None, "min": None, "max": None, "dyn": None, "hasValue": "bool", "value": None,
    "orValue": None, "quantity": "quantity", "isQuantity": "bool", "compareTo": "int", "isLessThan": "bool",
    "isGreaterThan": "bool", "asInteger": "int", "asApproximateFloat": "double", "isInteger": "bool",
    "sign": "int", "url": "url", "isURL": "bool", "getScheme": "string", "getHost": "string",
    "getHostname": "string", "getPort": "string", "getEscapedPath": "string", "ip": "ip", "isIP": "bool",
    "family": "int", "isLoopback": "bool", "isUnspecified": "bool", "isGlobalUnicast": "bool", "cidr": "cidr",
    "isCIDR": "bool", "containsIP": "bool", "prefixLength": "int", "getFullYear": "int", "getMonth": "int",
    "getDate": "int", "getDayOfMonth": "int", "getDayOfWeek": "int", "getDayOfYear": "int", "getHours": "int",
    "getMinutes": "int", "getSeconds": "int", "getMilliseconds": "int",
}
_MACROS = ("all", "exists", "exists_one", "map", "filter")
_TYPE_NAMES = {"int", "uint", "double", "string", "bool", "bytes", "list", "map", "null_type", "type",
               "duration", "timestamp", "google"}


# -- compiling -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Program:
    """A parsed rule, compiled once per rule text and shared by every schema that uses it."""

    runner: Any
    tree: lark.Tree
    uses_old_self: bool


class CompileError(Exception):
    pass


@lru_cache(maxsize=4096)
def _parse(text: str) -> Program:
    try:
        tree = _ENV.compile(text)
    except celpy.CELParseError as exc:
        raise CompileError(_syntax_error(text, exc)) from None
    except (lark.exceptions.LarkError, RecursionError) as exc:
        raise CompileError(f"ERROR: <input>:1:1: Syntax error: {exc}") from None
    uses_old = any(t.data == "ident" and str(t.children[0]) == "oldSelf" for t in tree.iter_subtrees())
    return Program(_ENV.program(tree, functions=FUNCTIONS), tree, uses_old)


def _syntax_error(text: str, exc: celpy.CELParseError) -> str:
    line = getattr(exc, "line", None) or 1
    column = getattr(exc, "column", None) or 1
    detail = str(exc.args[0]).splitlines()[0] if exc.args else "syntax error"
    return _located(text, line, column, f"Syntax error: {detail}" if detail != text.splitlines()[0] else
                    "Syntax error: mismatched input")


def _located(text: str, line: int, column: int, message: str) -> str:
    """cel-go's issue format: position, message, the source line and a caret."""
    source = text.splitlines()[line - 1] if text.splitlines() else ""
    return f"ERROR: <input>:{line}:{column}: {message}\n | {source}\n | {'.' * (column - 1)}^"


def escape(name: str) -> str:
    """A property name as CEL sees it (upstream's escaping of reserved words and odd characters)."""
    if name in _RESERVED:
        return f"__{name}__"
    table = {"__": "__underscores__", ".": "__dot__", "-": "__dash__", "/": "__slash__"}
    return _ESCAPE.sub(lambda m: table[m.group(0)], name)


def _root_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The root as rules see it: apiVersion, kind, and only metadata.name and generateName."""
    props = dict(schema.get("properties") or {})
    props["apiVersion"] = {"type": "string"}
    props["kind"] = {"type": "string"}
    props["metadata"] = {"type": "object", "properties": {"name": {"type": "string"},
                                                          "generateName": {"type": "string"}}}
    return {**schema, "properties": props}


class _Checker:
    """Type-checks a parsed rule against the schema of the node it sits on, as far as upstream would."""

    def __init__(self, text: str, node: dict[str, Any]) -> None:
        self.text = text
        self.node = node
        self.problems: list[str] = []

    def fail(self, item: lark.Tree | lark.Token, message: str, shift: int = 0) -> None:
        line = getattr(item, "line", None) or getattr(getattr(item, "meta", None), "line", 1) or 1
        column = getattr(item, "column", None) or getattr(getattr(item, "meta", None), "column", 1) or 1
        if not self.problems:
            self.problems.append(_located(self.text, line, max(1, column + shift), message))

    def check(self, tree: lark.Tree, scope: frozenset[str]) -> tuple[str | None, dict[str, Any] | None]:
        """The expression's type ("bool", "int", ... or None when dynamic) and schema, when known."""
        kind = tree.data
        kids = tree.children
        if kind in ("expr",):
            if len(kids) == 3 and kids[1] is not None:
                self.check(kids[0], scope)
                a, _ = self.check(kids[1], scope)
                b, _ = self.check(kids[2], scope)
                return (a if a == b else None), None
            return self.check(kids[0], scope)
        if kind in ("conditionalor", "conditionaland", "relation", "addition", "multiplication"):
            if len(kids) == 1:
                return self.check(kids[0], scope)
            left, _ = self.check(kids[0].children[0], scope)
            right, _ = self.check(kids[1], scope)
            op = kids[0].data
            if kind in ("conditionalor", "conditionaland"):
                return "bool", None
            if kind == "relation":
                self._operands(kids[0], op, left, right)
                return "bool", None
            return (left if left == right else None), None
        if kind == "unary":
            if len(kids) == 1:
                return self.check(kids[0], scope)
            t, _ = self.check(kids[1], scope)
            return ("bool" if kids[0].data == "unary_not" else t), None
        if kind in ("member", "primary"):
            return self.check(kids[0], scope)
        if kind == "paren_expr":
            return self.check(kids[0], scope)
        if kind == "literal":
            return self._literal(kids[0]), None
        if kind == "ident":
            return self._ident(kids[0], scope)
        if kind == "dot_ident":
            return self._ident(kids[0], scope)
        if kind == "member_dot":
            t, node = self.check(kids[0], scope)
            return self._select(kids[1], t, node)
        if kind == "member_index":
            _, node = self.check(kids[0], scope)
            self.check(kids[1], scope)
            return self._element(node)
        if kind == "member_dot_arg":
            return self._method(kids[0], kids[1], kids[2] if len(kids) > 2 else None, scope)
        if kind in ("ident_arg", "dot_ident_arg"):
            return self._function(kids[0], kids[1] if len(kids) > 1 else None, scope)
        if kind == "list_lit":
            for child in kids:
                if isinstance(child, lark.Tree):
                    self.check(child, scope)
            return "list", None
        if kind == "map_lit":
            for child in kids:
                if isinstance(child, lark.Tree):
                    self.check(child, scope)
            return "map", None
        for child in kids:
            if isinstance(child, lark.Tree):
                self.check(child, scope)
        return None, None

    def _operands(self, op_tree: lark.Tree, op: str, left: str | None, right: str | None) -> None:
        numbers = {"int", "uint", "double"}
        if left is None or right is None or op == "relation_in" or left == right:
            return
        if left in numbers and right in numbers:
            return
        if op in ("relation_eq", "relation_ne") and "null" in (left, right):
            return
        names = {"relation_eq": "_==_", "relation_ne": "_!=_", "relation_lt": "_<_", "relation_le": "_<=_",
                 "relation_gt": "_>_", "relation_ge": "_>=_"}
        self.fail(op_tree, f"found no matching overload for '{names.get(op, op)}' applied to '({left}, {right})'")

    @staticmethod
    def _literal(token: lark.Token) -> str | None:
        return {"INT_LIT": "int", "UINT_LIT": "uint", "FLOAT_LIT": "double", "STRING_LIT": "string",
                "MLSTRING_LIT": "string", "BYTES_LIT": "bytes", "BOOL_LIT": "bool", "NULL_LIT": "null"}.get(
            token.type)

    def _ident(self, token: lark.Token, scope: frozenset[str]) -> tuple[str | None, dict[str, Any] | None]:
        name = str(token)
        if name == "self":
            return _schema_type(self.node), self.node
        if name == "oldSelf":
            return _schema_type(self.node), self.node
        if name in scope or name in _TYPE_NAMES:
            return None, None
        self.fail(token, f"undeclared reference to '{name}' (in container '')")
        return None, None

    def _select(self, token: lark.Token, t: str | None, node: dict[str, Any] | None
                ) -> tuple[str | None, dict[str, Any] | None]:
        name = str(token)
        if node is None or node.get("x-kubernetes-preserve-unknown-fields") or node.get(
                "x-kubernetes-int-or-string"):
            return None, None
        if t not in ("map", None):
            self.fail(token, f"type '{_cel_type_name(t)}' does not support field selection", -1)
            return None, None
        props = node.get("properties") or {}
        by_cel = {escape(k): v for k, v in props.items()}
        if name in by_cel and isinstance(by_cel[name], dict):
            return _schema_type(by_cel[name]), by_cel[name]
        additional = node.get("additionalProperties")
        if isinstance(additional, dict):
            return _schema_type(additional), additional
        if additional is True or (not props and node.get("type") != "object"):
            return None, None
        self.fail(token, f"undefined field '{name}'", -1)
        return None, None

    @staticmethod
    def _element(node: dict[str, Any] | None) -> tuple[str | None, dict[str, Any] | None]:
        if node is None:
            return None, None
        sub = node.get("items") if node.get("type") == "array" else node.get("additionalProperties")
        if isinstance(sub, dict) and not node.get("properties"):
            return _schema_type(sub), sub
        return None, None

    def _args(self, exprlist: lark.Tree | None) -> list[lark.Tree]:
        return [c for c in (exprlist.children if exprlist is not None else []) if isinstance(c, lark.Tree)]

    def _method(self, target: lark.Tree, token: lark.Token, exprlist: lark.Tree | None, scope: frozenset[str]
                ) -> tuple[str | None, dict[str, Any] | None]:
        name = str(token)
        self.check(target, scope)
        args = self._args(exprlist)
        if name in _MACROS:
            if len(args) != 2 or _simple_name(args[0]) is None:
                self.fail(token, f"{name}() variable name must be a simple identifier")
                return None, None
            var = _simple_name(args[0]) or ""
            inner = scope | {var}
            body_type, _ = self.check(args[1], inner)
            if name in ("all", "exists", "exists_one") and body_type not in (None, "bool"):
                self.fail(token, f"found no matching overload for '{name}' applied to '({body_type})'")
            return _RETURNS[name], None
        for arg in args:
            self.check(arg, scope)
        if name not in _RETURNS and name not in FUNCTIONS:
            self.fail(token, f"undeclared reference to '{name}' (in container '')")
            return None, None
        if name == "matches" and args:
            self._constant_regex(args[0])
        return _RETURNS.get(name), None

    def _function(self, token: lark.Token, exprlist: lark.Tree | None, scope: frozenset[str]
                  ) -> tuple[str | None, dict[str, Any] | None]:
        name = str(token)
        args = self._args(exprlist)
        if name == "has":
            if len(args) != 1 or not _is_selection(args[0]):
                self.fail(token, "invalid argument to has() macro")
                return "bool", None
            self.check(args[0], scope)
            return "bool", None
        for arg in args:
            self.check(arg, scope)
        if name not in _RETURNS and name not in FUNCTIONS:
            self.fail(token, f"undeclared reference to '{name}' (in container '')")
            return None, None
        if name == "matches" and len(args) == 2:
            self._constant_regex(args[1])
        return _RETURNS.get(name), None

    def _constant_regex(self, arg: lark.Tree) -> None:
        literal = next((t for t in arg.scan_values(lambda v: isinstance(v, lark.Token))), None)
        if literal is None or literal.type != "STRING_LIT" or len(list(arg.iter_subtrees())) > 12:
            return
        try:
            value = celtypes.StringType(_ENV.program(_ENV.compile(str(literal))).evaluate({}))
            re.compile(str(value))
        except (re.error, CELEvalError, celpy.CELParseError, TypeError):
            self.fail(literal, "compilation failed: invalid matches argument")


def _simple_name(tree: lark.Tree) -> str | None:
    while isinstance(tree, lark.Tree) and len(tree.children) == 1 and tree.data != "ident":
        tree = tree.children[0]
    if isinstance(tree, lark.Tree) and tree.data == "ident":
        return str(tree.children[0])
    return None


def _is_selection(tree: lark.Tree) -> bool:
    while isinstance(tree, lark.Tree) and len(tree.children) == 1 and tree.data != "member_dot":
        tree = tree.children[0]
    return isinstance(tree, lark.Tree) and tree.data == "member_dot"


def _schema_type(node: dict[str, Any] | None) -> str | None:
    if not node or node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields") \
            and not node.get("type"):
        return None
    t = node.get("type")
    if t == "string":
        return {"duration": "duration", "date": "timestamp", "date-time": "timestamp", "byte": "bytes"}.get(
            node.get("format") or "", "string")
    return {"object": "map", "array": "list", "integer": "int", "number": "double", "boolean": "bool"}.get(t or "")


def _cel_type_name(t: str | None) -> str:
    return {"map": "map(string, dyn)", "list": "list(dyn)"}.get(t or "", t or "dyn")


def check_rule(text: str, node: dict[str, Any], want: str = "bool") -> tuple[Program | None, str | None]:
    """The compiled rule, or upstream's compile error detail for it."""
    try:
        program = _parse(text)
    except CompileError as exc:
        return None, str(exc)
    checker = _Checker(text, node)
    try:
        result, _ = checker.check(program.tree, frozenset())
    except RecursionError:
        return None, "ERROR: <input>:1:1: expression recursion limit exceeded"
    if checker.problems:
        return None, checker.problems[0]
    if result is not None and want != "any" and result != want:
        return None, f"cel expression must evaluate to a {want}" if want == "bool" else \
            "must evaluate to string"
    return program, None


def compile_errors(schema: Any, path: str) -> list[Cause]:
    """Upstream's CRD-time checks of every `x-kubernetes-validations` rule in a schema."""
    causes: list[Cause] = []
    if isinstance(schema, dict):
        _compile_node(schema, path, _root_schema(schema), causes, None)
    return causes


def _rule_value(rule: dict[str, Any]) -> str:
    """A ValidationRule printed as Go's %#v prints it in upstream's messages."""
    reason = rule.get("reason")
    optional = rule.get("optionalOldSelf")
    return ('apiextensions.ValidationRule{Rule:' + _go(rule.get("rule", "")) + ", Message:" + _go(
        rule.get("message", "")) + ", MessageExpression:" + _go(rule.get("messageExpression", ""))
        + ", Reason:" + (f"(*apiextensions.FieldValueErrorReason)({_go(reason)})" if reason is not None
                         else "(*apiextensions.FieldValueErrorReason)(nil)")
        + ", FieldPath:" + _go(rule.get("fieldPath", "")) + ", OptionalOldSelf:"
        + (f"(*bool)({str(bool(optional)).lower()})" if optional is not None else "(*bool)(nil)") + "}")


def _go(value: Any) -> str:
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{text}"'


def _compile_node(node: dict[str, Any], path: str, typed: dict[str, Any], causes: list[Cause],
                  uncorrelatable: str | None) -> None:
    rules = node.get(RULES)
    if rules is not None:
        if not isinstance(rules, list):
            causes.append(errors.cause(f"{path}.{RULES}", "Invalid value: must be a list", "FieldValueTypeInvalid"))
        else:
            for i, rule in enumerate(rules):
                _compile_rule(rule, typed, f"{path}.{RULES}[{i}]", causes, uncorrelatable)
    for key, sub in (node.get("properties") or {}).items() if isinstance(node.get("properties"), dict) else ():
        if isinstance(sub, dict):
            _compile_node(sub, f"{path}.properties[{key}]", sub, causes, uncorrelatable)
    items = node.get("items")
    if isinstance(items, dict):
        inner = uncorrelatable
        if inner is None and node.get("x-kubernetes-list-type") != "map":
            inner = f"{path}.items"
        _compile_node(items, f"{path}.items", items, causes, inner)
    additional = node.get("additionalProperties")
    if isinstance(additional, dict):
        inner = uncorrelatable
        if inner is None and node.get("x-kubernetes-map-type") == "atomic":
            inner = f"{path}.additionalProperties"
        _compile_node(additional, f"{path}.additionalProperties", additional, causes, inner)


def _compile_rule(rule: Any, typed: dict[str, Any], path: str, causes: list[Cause],
                  uncorrelatable: str | None) -> None:
    if not isinstance(rule, dict):
        causes.append(errors.cause(path, "Invalid value: must be an object", "FieldValueTypeInvalid"))
        return
    text = rule.get("rule")
    message = rule.get("message")
    message_expr = rule.get("messageExpression")
    field_path = rule.get("fieldPath")
    reason = rule.get("reason")
    for key, value in (("rule", text), ("message", message), ("messageExpression", message_expr),
                       ("fieldPath", field_path), ("reason", reason)):
        if value is not None and not isinstance(value, str):
            causes.append(errors.cause(f"{path}.{key}", "Invalid value: must be a string", "FieldValueTypeInvalid"))
            return
    trimmed = (text or "").strip()
    if not trimmed:
        causes.append(errors.cause(f"{path}.rule", "Required value: rule is not specified", "FieldValueRequired"))
        return
    if message is not None and message and not message.strip():
        causes.append(errors.cause(f"{path}.message", f"Invalid value: {_go(message)}: message must be non-empty if "
                                   "specified"))
    elif message and "\n" in message.strip():
        causes.append(errors.cause(f"{path}.message", f"Invalid value: {_go(message)}: message must not contain "
                                   "line breaks"))
    elif "\n" in trimmed and not (message or "").strip():
        causes.append(errors.cause(f"{path}.message", "Required value: message must be specified if rule contains "
                                   "line breaks", "FieldValueRequired"))
    if message_expr is not None and message_expr and not message_expr.strip():
        causes.append(errors.cause(f"{path}.messageExpression", "Required value: messageExpression must be "
                                   "non-empty if specified", "FieldValueRequired"))
    if reason is not None and reason not in REASONS:
        allowed = ", ".join(f'"{r}"' for r in REASONS)
        causes.append(errors.cause(f"{path}.reason", f"Unsupported value: {_go(reason)}: supported values: "
                                   f"{allowed}", "FieldValueNotSupported"))
    if field_path:
        if not field_path.strip():
            causes.append(errors.cause(f"{path}.fieldPath", f"Invalid value: {_go(field_path)}: fieldPath must be "
                                       "non-empty if specified"))
        elif "\n" in field_path:
            causes.append(errors.cause(f"{path}.fieldPath", f"Invalid value: {_go(field_path)}: fieldPath must not "
                                       "contain line breaks"))
        elif resolve_field_path(field_path, typed) is None:
            causes.append(errors.cause(f"{path}.fieldPath", f"Invalid value: {_go(field_path)}: fieldPath must be "
                                       "a valid path"))
    program, problem = check_rule(text or "", typed)
    if problem is not None:
        causes.append(errors.cause(f"{path}.rule", f"Invalid value: {_rule_value(rule)}: compilation failed: "
                                   f"{problem}"))
    elif program is not None and program.uses_old_self and uncorrelatable is not None:
        causes.append(errors.cause(f"{path}.rule", f"Invalid value: {_go(text)}: oldSelf cannot be used on the "
                                   f"uncorrelatable portion of the schema within {uncorrelatable}"))
    elif program is not None and not program.uses_old_self and rule.get("optionalOldSelf"):
        causes.append(errors.cause(f"{path}.optionalOldSelf", "Invalid value: true: may not be set if oldSelf is "
                                   "not used in rule"))
    if message_expr and message_expr.strip():
        _, problem = check_rule(message_expr, typed, want="string")
        if problem is not None:
            detail = problem if problem == "must evaluate to string" else f"messageExpression compilation " \
                f"failed: {problem}"
            causes.append(errors.cause(f"{path}.messageExpression", f"Invalid value: {_rule_value(rule)}: {detail}"))


_FIELD_TOKEN = re.compile(r"\.([^.\[\]]+)|\['((?:[^'\\]|\\.)*)'\]")


def resolve_field_path(field_path: str, node: dict[str, Any]) -> list[tuple[str, bool]] | None:
    """The steps of a rule's fieldPath (name, is-a-map-key), or None when the schema has no such field."""
    steps: list[tuple[str, bool]] = []
    pos = 0
    cur: Any = node
    while pos < len(field_path):
        m = _FIELD_TOKEN.match(field_path, pos)
        if m is None or not isinstance(cur, dict):
            return None
        name = m.group(1) if m.group(1) is not None else re.sub(r"\\(.)", r"\1", m.group(2))
        props = cur.get("properties")
        if props:
            if name not in props:
                return None
            steps.append((name, False))
            cur = props[name]
        elif isinstance(cur.get("additionalProperties"), dict):
            steps.append((name, True))
            cur = cur["additionalProperties"]
        else:
            return None
        pos = m.end()
    return steps


# -- evaluating ------------------------------------------------------------------------------------------


class _Budget:
    def __init__(self) -> None:
        self.left = COST_BUDGET


class _OutOfBudget(Exception):
    pass


def to_cel(node: Any, value: Any, budget: _Budget) -> Any:
    """A JSON value as CEL sees it through its schema: integers vs doubles, formats, escaped field names."""
    budget.left -= 1
    if budget.left < 0:
        raise _OutOfBudget
    if value is None:
        return None
    node = node if isinstance(node, dict) else {}
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    t = node.get("type")
    if isinstance(value, int | float):
        if t == "number" or (isinstance(value, float) and not (t == "integer" and value.is_integer())):
            return celtypes.DoubleType(float(value))
        return celtypes.IntType(int(value))
    if isinstance(value, str):
        return _string(node, value)
    if isinstance(value, list):
        items = node.get("items")
        return celtypes.ListType([to_cel(items, v, budget) for v in value])
    if isinstance(value, dict):
        props = node.get("properties") or {}
        additional = node.get("additionalProperties")
        out = {}
        for k, v in value.items():
            if k in props:
                out[celtypes.StringType(escape(k))] = to_cel(props[k], v, budget)
            else:
                out[celtypes.StringType(k)] = to_cel(additional if isinstance(additional, dict) else {}, v, budget)
        return celtypes.MapType(out)
    return None


def _string(node: dict[str, Any], value: str) -> Any:
    fmt = node.get("format")
    try:
        if fmt == "duration":
            return celtypes.DurationType(value)
        if fmt in ("date-time", "datetime"):
            return celtypes.TimestampType(datetime.fromisoformat(value.replace("Z", "+00:00")))
        if fmt == "date":
            return celtypes.TimestampType(datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=UTC))
    except (ValueError, TypeError):
        return celtypes.StringType(value)
    return celtypes.StringType(value)


def _root_value(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    root = dict(obj)
    root["metadata"] = {k: meta[k] for k in ("name", "generateName") if k in meta}
    return root


def has_rules(node: Any) -> bool:
    """Whether any rule sits at or below this schema node (most schemas have none: skip the walk)."""
    if not isinstance(node, dict):
        return False
    if node.get(RULES):
        return True
    props = node.get("properties")
    if isinstance(props, dict) and any(has_rules(s) for s in props.values()):
        return True
    return has_rules(node.get("items")) or has_rules(node.get("additionalProperties"))


def validate(schema: dict[str, Any], obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[Cause]:
    """Evaluate every rule of the schema against the object (and its previous version on updates)."""
    if not has_rules(schema):
        return []
    causes: list[Cause] = []
    budget = _Budget()
    try:
        _walk(_root_schema(schema), _root_value(obj), _root_value(old) if isinstance(old, dict) else None, "",
              causes, budget)
    except _OutOfBudget:
        causes.append(errors.cause(_show(""), 'Invalid value: "object": validation failed due to running out of '
                                   "cost budget, no further validation rules will be run"))
    return causes


def _show(path: str) -> str:
    return path or "<nil>"


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _walk(node: dict[str, Any], value: Any, old: Any, path: str, causes: list[Cause], budget: _Budget) -> None:
    if value is None or not has_rules(node):
        return
    rules = node.get(RULES)
    if isinstance(rules, list) and rules:
        _evaluate(node, rules, value, old, path, causes, budget)
    if isinstance(value, dict):
        props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
        additional = node.get("additionalProperties")
        correlate = isinstance(old, dict) and node.get("x-kubernetes-map-type") != "atomic"
        for key, item in value.items():
            sub = props.get(key)
            if isinstance(sub, dict):
                _walk(sub, item, old.get(key) if correlate else None, _child(path, key), causes, budget)
            elif isinstance(additional, dict):
                _walk(additional, item, old.get(key) if correlate else None, f"{path}[{key}]", causes, budget)
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        keys = node.get("x-kubernetes-list-map-keys") or []
        olds: dict[Any, Any] = {}
        if isinstance(old, list) and node.get("x-kubernetes-list-type") == "map" and keys:
            olds = {_map_key(o, keys): o for o in old if isinstance(o, dict)}
        for i, item in enumerate(value):
            prior = olds.get(_map_key(item, keys)) if olds and isinstance(item, dict) else None
            _walk(node["items"], item, prior, f"{path}[{i}]", causes, budget)


def _map_key(item: dict[str, Any], keys: list[str]) -> tuple[str, ...]:
    return tuple(repr(item.get(k)) for k in keys)


def _evaluate(node: dict[str, Any], rules: list[Any], value: Any, old: Any, path: str, causes: list[Cause],
              budget: _Budget) -> None:
    type_name = node.get("type") or ""
    self_val = to_cel(node, value, budget)
    old_val = to_cel(node, old, budget) if old is not None else None
    for rule in rules:
        if not isinstance(rule, dict) or not isinstance(rule.get("rule"), str):
            continue
        text = rule["rule"]
        try:
            program = _parse(text)
        except CompileError as exc:
            causes.append(errors.cause(_show(path), f'Invalid value: "{type_name}": rule compile error: {exc}'))
            continue
        optional = bool(rule.get("optionalOldSelf"))
        if program.uses_old_self and old is None and not optional:
            continue
        activation: dict[str, Any] = {"self": self_val}
        if program.uses_old_self:
            activation["oldSelf"] = Optional(old_val, old is not None) if optional else old_val
        budget.left -= EVALUATION_COST + (len(value) if isinstance(value, list | dict | str) else 0)
        if budget.left < 0:
            raise _OutOfBudget
        result, failure = _run(program, activation)
        shown = _show(path)
        if failure is not None:
            if failure.startswith("no such overload"):
                detail = f"'{failure}': call arguments did not match a supported operator, function or macro " \
                         f"signature for rule: {_rule_text(rule)}"
            else:
                detail = f"{failure} evaluating rule: {_rule_text(rule)}"
            causes.append(errors.cause(shown, f'Invalid value: "{type_name}": {detail}'))
            continue
        if result is True:
            continue
        target = path
        steps = resolve_field_path(rule["fieldPath"], node) if rule.get("fieldPath") else None
        for name, is_key in steps or ():
            target = f"{target}[{name}]" if is_key else _child(target, name)
        detail = _message(rule, {"self": self_val, "oldSelf": old_val} if program.uses_old_self else
                          {"self": self_val})
        causes.append(_cause_for(rule.get("reason"), _show(target), type_name, detail))


def _run(program: Program, activation: dict[str, Any]) -> tuple[Any, str | None]:
    """The rule's value or the error text upstream would report; never raises."""
    try:
        out = program.runner.evaluate(activation)
    except CELEvalError as exc:
        return None, _eval_error(exc)
    except (RecursionError, MemoryError, OverflowError):
        return None, "operation cancelled: actual cost limit exceeded"
    except Exception as exc:  # noqa: BLE001 - user-written expressions reach library corners
        return None, f"internal error: {type(exc).__name__}"
    if isinstance(out, CELEvalError):
        return None, _eval_error(out)
    if isinstance(out, celtypes.BoolType) or isinstance(out, bool):
        return bool(out), None
    return out, None


def _eval_error(exc: CELEvalError) -> str:
    text = str(exc.args[0]) if exc.args else "evaluation error"
    cause = exc.args[1] if len(exc.args) > 1 else None
    if text.startswith("no such member") or cause is KeyError:
        key = re.search(r"'([^']*)'", text)
        return f"no such key: {key.group(1) if key else text}"
    if cause is ZeroDivisionError:
        return "division by zero" if "divide" in text else "modulus by zero"
    if cause is IndexError:
        return "index out of bounds"
    if "overload" in text or cause is TypeError:
        return "no such overload"
    return text


def _rule_text(rule: dict[str, Any]) -> str:
    message = (rule.get("message") or "").strip()
    return message or str(rule.get("rule", "")).strip()


def _message(rule: dict[str, Any], activation: dict[str, Any]) -> str:
    expr = rule.get("messageExpression")
    if isinstance(expr, str) and expr.strip():
        try:
            program = _parse(expr)
        except CompileError:
            program = None
        if program is not None:
            out, failure = _run(program, activation)
            if failure is None and isinstance(out, str):
                text = out.strip()
                if text and "\n" not in text and len(text.encode()) <= MAX_MESSAGE_BYTES:
                    return text
    message = (rule.get("message") or "").strip()
    return message or f"failed rule: {str(rule.get('rule', '')).strip()}"


def _cause_for(reason: Any, path: str, type_name: str, detail: str) -> Cause:
    if reason == "FieldValueForbidden":
        return errors.cause(path, f"Forbidden: {detail}", "FieldValueForbidden")
    if reason == "FieldValueRequired":
        return errors.cause(path, f"Required value: {detail}", "FieldValueRequired")
    if reason == "FieldValueDuplicate":
        return errors.cause(path, f'Duplicate value: "{type_name}"', "FieldValueDuplicate")
    return errors.cause(path, f'Invalid value: "{type_name}": {detail}', "FieldValueInvalid")


# -- admission expressions (webhook matchConditions) ----------------------------------------------------

_UNTYPED: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}


def check_expression(text: str, variables: frozenset[str], want: str = "bool") -> tuple[Program | None, str | None]:
    """An admission expression over untyped `variables` (object, oldObject, request): the compiled
    program, or upstream's compile error detail for it."""
    try:
        program = _parse(text)
    except CompileError as exc:
        return None, str(exc)
    checker = _Checker(text, _UNTYPED)
    try:
        result, _ = checker.check(program.tree, variables)
    except RecursionError:
        return None, "ERROR: <input>:1:1: expression recursion limit exceeded"
    if checker.problems:
        return None, checker.problems[0]
    if result is not None and want != "any" and result != want and not (want == "string" and result == "null"):
        return None, f"cel expression must evaluate to a {want}"
    return program, None


def admission_value(value: Any) -> Any:
    """A JSON value (an object, a request) as an admission expression sees it: no schema to consult,
    so a direct walk (several times cheaper than `to_cel`, on every admitted write)."""
    if isinstance(value, str):
        return celtypes.StringType(value)
    if isinstance(value, dict):
        return celtypes.MapType({celtypes.StringType(k): admission_value(v) for k, v in value.items()})
    if isinstance(value, list):
        return celtypes.ListType([admission_value(v) for v in value])
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value) if -(2**63) <= value < 2**63 else celtypes.DoubleType(float(value))
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    return None


def evaluate(program: Program, activation: dict[str, Any]) -> tuple[Any, str | None]:
    """The expression's value, or the error text upstream would report; never raises."""
    return _run(program, activation)


class _TypedChecker(_Checker):
    """The checker with admission variables bound to schemas (object to its kind's, params to the
    paramKind's); the others, and the ones without a schema, stay dynamic."""

    def __init__(self, text: str, variables: dict[str, dict[str, Any] | None]) -> None:
        super().__init__(text, _UNTYPED)
        self.variables = variables

    def _ident(self, token: lark.Token, scope: frozenset[str]) -> tuple[str | None, dict[str, Any] | None]:
        name = str(token)
        if name in scope or name not in self.variables:
            if name in ("self", "oldSelf"):
                self.fail(token, f"undeclared reference to '{name}' (in container '')")
                return None, None
            return super()._ident(token, scope)
        node = self.variables[name]
        return (_schema_type(node), node) if node is not None else (None, None)


def type_check(text: str, variables: dict[str, dict[str, Any] | None], want: str = "bool") -> str | None:
    """Upstream's type-checking of a policy expression against the schemas its variables have, as
    the status controller reports it: the error, or None."""
    try:
        program = _parse(text)
    except CompileError as exc:
        return str(exc)
    checker = _TypedChecker(text, variables)
    try:
        result, _ = checker.check(program.tree, frozenset())
    except RecursionError:
        return "ERROR: <input>:1:1: expression recursion limit exceeded"
    if checker.problems:
        return checker.problems[0]
    if result is not None and want != "any" and result != want:
        return f"cel expression must evaluate to a {want}"
    return None

"""Label and field selectors with the grammar, validation, messages and matching of upstream apimachinery.

Parsing happens once per request; matching runs once per object in a list or watch, so each
requirement is compiled to a small closure and `matches` only walks those.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from services.api.validation import is_label_value, is_qualified_name

# selection.Operator values, spelled as upstream spells them.
IN = "in"
NOT_IN = "notin"
EQUALS = "="
DOUBLE_EQUALS = "=="
NOT_EQUALS = "!="
EXISTS = "exists"
DOES_NOT_EXIST = "!"
GREATER_THAN = "gt"
LESS_THAN = "lt"

_BINARY_OPERATORS = (IN, NOT_IN, EQUALS, DOUBLE_EQUALS, NOT_EQUALS, GREATER_THAN, LESS_THAN)
_ALL_OPERATORS = _BINARY_OPERATORS + (EXISTS, DOES_NOT_EXIST)

_INT64_RE = re.compile(r"[+-]?[0-9]+")
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def _quote(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _go_string_list(values: list[str] | None) -> str:
    """A value list the way Go's %#v prints a []string, as upstream's field errors show it."""
    if values is None:
        return "[]string(nil)"
    return "[]string{" + ", ".join(_quote(v) for v in values) + "}"


def _aggregate(errors: list[str]) -> str:
    unique = list(dict.fromkeys(errors))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


def _parse_int64(text: str) -> int | None:
    if not _INT64_RE.fullmatch(text):
        return None
    number = int(text)
    return number if _INT64_MIN <= number <= _INT64_MAX else None


# ---------------------------------------------------------------------------------------------
# Label selectors (k8s.io/apimachinery/pkg/labels).

_Labels = Mapping[str, str]
_Test = Callable[[_Labels], bool]


def _compile_requirement(key: str, op: str, values: tuple[str, ...]) -> _Test:
    if op in (EQUALS, DOUBLE_EQUALS) or (op == IN and len(values) == 1):
        value = values[0]
        return lambda ls: ls.get(key) == value
    if op == NOT_EQUALS or (op == NOT_IN and len(values) == 1):
        value = values[0]
        return lambda ls: ls.get(key) != value
    if op == IN:
        allowed = frozenset(values)
        return lambda ls: ls.get(key) in allowed
    if op == NOT_IN:
        denied = frozenset(values)
        return lambda ls: ls.get(key) not in denied
    if op == EXISTS:
        return lambda ls: key in ls
    if op == DOES_NOT_EXIST:
        return lambda ls: key not in ls
    if op not in (GREATER_THAN, LESS_THAN):
        return _never
    bound = _parse_int64(values[0]) if len(values) == 1 else None
    if bound is None:
        return lambda ls: False
    greater = op == GREATER_THAN

    def compare(ls: _Labels) -> bool:
        raw = ls.get(key)
        if raw is None:
            return False
        number = _parse_int64(raw)
        if number is None:
            return False
        return number > bound if greater else number < bound

    return compare


class Requirement:
    """One `key op values` term; values keep upstream's order (sorted and unique when parsed)."""

    __slots__ = ("key", "operator", "values", "_test")

    def __init__(self, key: str, operator: str, values: Iterable[str] = ()) -> None:
        self.key = key
        self.operator = operator
        self.values = tuple(values)
        self._test = _compile_requirement(key, operator, self.values)

    @classmethod
    def create(cls, key: str, operator: str, values: list[str] | None) -> Requirement:
        """Validate like upstream's NewRequirement; raise ValueError with its aggregated message."""
        errs: list[str] = []
        key_errs = is_qualified_name(key)
        if key_errs:
            errs.append(f"key: Invalid value: {_quote(key)}: {'; '.join(key_errs)}")
        vals = values or []
        if operator in (IN, NOT_IN):
            if not vals:
                errs.append(
                    f"values: Invalid value: {_go_string_list(values)}: "
                    "for 'in', 'notin' operators, values set can't be empty"
                )
        elif operator in (EQUALS, DOUBLE_EQUALS, NOT_EQUALS):
            if len(vals) != 1:
                errs.append(
                    f"values: Invalid value: {_go_string_list(values)}: "
                    "exact-match compatibility requires one single value"
                )
        elif operator in (EXISTS, DOES_NOT_EXIST):
            if vals:
                errs.append(
                    f"values: Invalid value: {_go_string_list(values)}: "
                    "values set must be empty for exists and does not exist"
                )
        elif operator in (GREATER_THAN, LESS_THAN):
            if len(vals) != 1:
                errs.append(
                    f"values: Invalid value: {_go_string_list(values)}: "
                    "for 'Gt', 'Lt' operators, exactly one value is required"
                )
            for i, v in enumerate(vals):
                if _parse_int64(v) is None:
                    errs.append(
                        f"values[{i}]: Invalid value: {_quote(v)}: "
                        "for 'Gt', 'Lt' operators, the value must be an integer"
                    )
        else:
            supported = ", ".join(_quote(o) for o in _ALL_OPERATORS)
            errs.append(f"operator: Unsupported value: {_quote(operator)}: supported values: {supported}")
        for i, v in enumerate(vals):
            value_errs = is_label_value(v)
            if value_errs:
                errs.append(f"values[{i}][{key}]: Invalid value: {_quote(v)}: {'; '.join(value_errs)}")
        if errs:
            raise ValueError(_aggregate(errs))
        return cls(key, operator, vals)

    def matches(self, labels: _Labels) -> bool:
        return self._test(labels)

    def __str__(self) -> str:
        op = self.operator
        if op == EXISTS:
            return self.key
        if op == DOES_NOT_EXIST:
            return "!" + self.key
        joined = ",".join(sorted(self.values))
        if op in (IN, NOT_IN):
            return f"{self.key} {op} ({joined})"
        symbol = {GREATER_THAN: ">", LESS_THAN: "<"}.get(op, op)
        return f"{self.key}{symbol}{joined}"

    def __repr__(self) -> str:
        return f"Requirement({self.key!r}, {self.operator!r}, {list(self.values)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Requirement):
            return NotImplemented
        return (self.key, self.operator, self.values) == (other.key, other.operator, other.values)

    def __hash__(self) -> int:
        return hash((self.key, self.operator, self.values))


# Lexer tokens.
_T_END = "end"
_T_ID = "identifier"
_T_IN = "in"
_T_NOTIN = "notin"
_T_OPEN = "("
_T_CLOSE = ")"
_T_COMMA = ","
_T_NOT = "!"
_T_EQ = "="
_T_DEQ = "=="
_T_NEQ = "!="
_T_GT = ">"
_T_LT = "<"

_SPECIAL = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")
_KEYWORDS = {"in": _T_IN, "notin": _T_NOTIN}
_SYMBOL_OPERATORS = {
    _T_EQ: EQUALS,
    _T_DEQ: DOUBLE_EQUALS,
    _T_NEQ: NOT_EQUALS,
    _T_GT: GREATER_THAN,
    _T_LT: LESS_THAN,
}
_WORD_OPERATORS = {_T_IN: IN, _T_NOTIN: NOT_IN}


def _lex(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos] in _WHITESPACE:
            pos += 1
        if pos >= end:
            tokens.append((_T_END, ""))
            return tokens
        ch = text[pos]
        if ch in _SPECIAL:
            pair = text[pos : pos + 2]
            if pair in (_T_DEQ, _T_NEQ):
                tokens.append((pair, pair))
                pos += 2
            else:
                tokens.append((ch, ch))
                pos += 1
            continue
        start = pos
        while pos < end and text[pos] not in _SPECIAL and text[pos] not in _WHITESPACE:
            pos += 1
        word = text[start:pos]
        tokens.append((_KEYWORDS.get(word, _T_ID), word))


class _Parser:
    """Recursive descent over the token list; `in`/`notin` are identifiers except where an operator goes."""

    def __init__(self, text: str) -> None:
        self.tokens = _lex(text)
        self.pos = 0

    def peek(self, as_value: bool = True) -> tuple[str, str]:
        tok, lit = self.tokens[self.pos]
        if as_value and tok in _WORD_OPERATORS:
            tok = _T_ID
        return tok, lit

    def take(self, as_value: bool = True) -> tuple[str, str]:
        item = self.peek(as_value)
        self.pos += 1
        return item

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while True:
            tok, lit = self.peek()
            if tok == _T_END:
                return requirements
            if tok not in (_T_ID, _T_NOT):
                raise ValueError(f"found '{lit}', expected: !, identifier, or 'end of string'")
            try:
                requirements.append(self.requirement())
            except ValueError as exc:
                raise ValueError(f"unable to parse requirement: {exc}") from None
            tok, lit = self.take()
            if tok == _T_END:
                return requirements
            if tok != _T_COMMA:
                raise ValueError(f"found '{lit}', expected: ',' or 'end of string'")
            tok, lit = self.peek()
            if tok not in (_T_ID, _T_NOT):
                raise ValueError(f"found '{lit}', expected: identifier after ','")

    def requirement(self) -> Requirement:
        negated = False
        tok, lit = self.take()
        if tok == _T_NOT:
            negated = True
            tok, lit = self.take()
        if tok != _T_ID:
            raise ValueError(f"found '{lit}', expected: identifier")
        key = lit
        key_errs = is_qualified_name(key)
        if key_errs:
            raise ValueError(f"<nil>: Invalid value: {_quote(key)}: {'; '.join(key_errs)}")
        if negated:
            return Requirement.create(key, DOES_NOT_EXIST, [])
        if self.peek()[0] in (_T_END, _T_COMMA):
            return Requirement.create(key, EXISTS, [])
        tok, lit = self.take(as_value=False)
        operator = _WORD_OPERATORS.get(tok) or _SYMBOL_OPERATORS.get(tok)
        if operator is None:
            raise ValueError(f"found '{lit}', expected: {', '.join(_BINARY_OPERATORS)}")
        values = self.value_set() if operator in (IN, NOT_IN) else self.exact_value()
        return Requirement.create(key, operator, sorted(values))

    def value_set(self) -> set[str]:
        tok, lit = self.take()
        if tok != _T_OPEN:
            raise ValueError(f"found '{lit}' expected: '('")
        tok, lit = self.peek()
        if tok == _T_CLOSE:
            self.take()
            return {""}
        if tok not in (_T_ID, _T_COMMA):
            raise ValueError(f"found '{lit}', expected: ',', ')' or identifier")
        values: set[str] = set()
        while True:
            tok, lit = self.take()
            if tok == _T_ID:
                values.add(lit)
                nxt, nlit = self.peek()
                if nxt == _T_CLOSE:
                    self.take()
                    return values
                if nxt != _T_COMMA:
                    raise ValueError(f"found '{nlit}', expected: ',' or ')'")
            elif tok == _T_COMMA:
                if not values:
                    values.add("")
                nxt = self.peek()[0]
                if nxt == _T_CLOSE:
                    values.add("")
                    self.take()
                    return values
                if nxt == _T_COMMA:
                    values.add("")
            else:
                raise ValueError(f"found '{lit}', expected: ',', or identifier")

    def exact_value(self) -> set[str]:
        tok, lit = self.peek()
        if tok in (_T_END, _T_COMMA):
            return {""}
        self.take()
        if tok == _T_ID:
            return {lit}
        raise ValueError(f"found '{lit}', expected: identifier")


def _always(_: Any) -> bool:
    return True


def _never(_: Any) -> bool:
    return False


def _match_all(tests: tuple[Callable[[Any], bool], ...]) -> Callable[[Any], bool]:
    def match(obj: Any) -> bool:
        for test in tests:
            if not test(obj):
                return False
        return True

    return match


def _match_pairs(pairs: tuple[tuple[str, str], ...]) -> Callable[[_Labels], bool]:
    def match(labels: _Labels) -> bool:
        get = labels.get
        for key, value in pairs:
            if get(key) != value:
                return False
        return True

    return match


_NO_LABELS: dict[str, str] = {}


class LabelSelector:
    """A parsed label selector: the AND of its requirements, sorted by key as upstream sorts them.

    `LabelSelector.nothing()` (what `from_dict(None)` returns) matches no object, which is what
    upstream's LabelSelectorAsSelector gives for a nil selector (e.g. a PodDisruptionBudget or a
    Service without one); an empty selector matches every object.
    """

    __slots__ = ("requirements", "_nothing", "_match")

    def __init__(self, requirements: Iterable[Requirement] = (), nothing: bool = False) -> None:
        self.requirements: tuple[Requirement, ...] = tuple(sorted(requirements, key=lambda r: r.key))
        self._nothing = nothing
        self._match = self._compile()

    def _compile(self) -> Callable[[_Labels], bool]:
        if self._nothing:
            return _never
        tests = [r._test for r in self.requirements]
        if not tests:
            return _always
        if len(tests) == 1:
            return tests[0]
        if all(r.operator in (EQUALS, DOUBLE_EQUALS) for r in self.requirements):
            return _match_pairs(tuple((r.key, r.values[0]) for r in self.requirements))
        return _match_all(tuple(tests))

    @classmethod
    def parse(cls, text: str) -> LabelSelector:
        """Parse the `labelSelector` query syntax; raise ValueError with upstream's message."""
        if not text:
            return cls()
        return cls(_Parser(text).parse())

    @classmethod
    def nothing(cls) -> LabelSelector:
        return cls(nothing=True)

    @classmethod
    def from_set(cls, labels: Mapping[str, str] | None) -> LabelSelector:
        """Equality on every pair, unvalidated, like upstream's SelectorFromSet (a Service's selector)."""
        return cls(Requirement(k, EQUALS, (v,)) for k, v in (labels or {}).items())

    @classmethod
    def from_dict(cls, sel: Mapping[str, Any] | None) -> LabelSelector:
        """Convert a metav1.LabelSelector like upstream's LabelSelectorAsSelector.

        None matches nothing; `{}` (no matchLabels, no matchExpressions) matches everything.
        """
        if sel is None:
            return cls.nothing()
        if not isinstance(sel, Mapping):
            raise ValueError("label selector must be an object")
        match_labels = sel.get("matchLabels") or {}
        expressions = sel.get("matchExpressions") or []
        if not isinstance(match_labels, Mapping):
            raise ValueError("matchLabels must be an object")
        if not isinstance(expressions, list):
            raise ValueError("matchExpressions must be a list")
        requirements: list[Requirement] = []
        for key, value in match_labels.items():
            if not isinstance(value, str):
                raise ValueError(f"matchLabels[{key}] must be a string")
            requirements.append(Requirement.create(key, EQUALS, [value]))
        ops = {"In": IN, "NotIn": NOT_IN, "Exists": EXISTS, "DoesNotExist": DOES_NOT_EXIST}
        for expr in expressions:
            if not isinstance(expr, Mapping):
                raise ValueError("matchExpressions entries must be objects")
            raw_op = expr.get("operator") or ""
            op = ops.get(raw_op) if isinstance(raw_op, str) else None
            if op is None:
                raise ValueError(f"{_quote(str(raw_op))} is not a valid label selector operator")
            values = expr.get("values")
            if values is not None and (
                not isinstance(values, list) or not all(isinstance(v, str) for v in values)
            ):
                raise ValueError("matchExpressions values must be a list of strings")
            key = expr.get("key") or ""
            if not isinstance(key, str):
                raise ValueError("matchExpressions key must be a string")
            requirements.append(Requirement.create(key, op, list(values) if values else None))
        return cls(requirements)

    @property
    def empty(self) -> bool:
        """True when the selector does not restrict anything (never true for `nothing()`)."""
        return not self._nothing and not self.requirements

    @property
    def matches_nothing(self) -> bool:
        return self._nothing

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        return self._match(_NO_LABELS if labels is None else labels)

    def requires_exact_match(self, key: str) -> str | None:
        """The single value `key` must have, if the selector pins one (lets callers use an index)."""
        for r in self.requirements:
            if r.key == key:
                if r.operator in (EQUALS, DOUBLE_EQUALS, IN) and len(r.values) == 1:
                    return r.values[0]
                return None
        return None

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)

    def __repr__(self) -> str:
        if self._nothing:
            return "LabelSelector.nothing()"
        return f"LabelSelector.parse({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LabelSelector):
            return NotImplemented
        return (self._nothing, self.requirements) == (other._nothing, other.requirements)

    def __hash__(self) -> int:
        return hash((self._nothing, self.requirements))


# ---------------------------------------------------------------------------------------------
# Field selectors (k8s.io/apimachinery/pkg/fields).

_FIELD_OPERATORS = (NOT_EQUALS, DOUBLE_EQUALS, EQUALS)
_ESCAPABLE = frozenset("\\,=")


def escape_field_value(value: str) -> str:
    """Escape `\\`, `,` and `=` so the value survives a round trip through a field selector string."""
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def unescape_field_value(value: str) -> str:
    if "\\" not in value and "," not in value and "=" not in value:
        return value
    out: list[str] = []
    escaped = False
    for ch in value:
        if escaped:
            if ch not in _ESCAPABLE:
                raise ValueError(f"invalid field selector: invalid escape sequence: \\{ch}")
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in (",", "="):
            raise ValueError(f"invalid field selector: unescaped character in value: {ord(ch)}")
        else:
            out.append(ch)
    if escaped:
        raise ValueError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def _split_terms(text: str) -> list[str]:
    terms: list[str] = []
    start = 0
    escaped = False
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


def _split_term(term: str) -> tuple[str, str, str] | None:
    for i in range(len(term)):
        for op in _FIELD_OPERATORS:
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :]
    return None


_Fields = Mapping[str, str]


class FieldSelector:
    """A parsed field selector: the AND of `field=value` / `field!=value` terms.

    Field names are not checked here: which fields a resource supports is the registry's business
    (upstream answers "field label not supported" there).
    """

    __slots__ = ("requirements", "_match")

    def __init__(self, requirements: Iterable[tuple[str, str, str]] = ()) -> None:
        self.requirements: tuple[tuple[str, str, str], ...] = tuple(requirements)
        self._match = self._compile()

    def _compile(self) -> Callable[[_Fields], bool]:
        tests: list[Callable[[_Fields], bool]] = []
        for field, op, value in self.requirements:
            if op == EQUALS:
                tests.append(lambda fs, f=field, v=value: fs.get(f, "") == v)
            else:
                tests.append(lambda fs, f=field, v=value: fs.get(f, "") != v)
        if not tests:
            return _always
        if len(tests) == 1:
            return tests[0]
        return _match_all(tuple(tests))

    @classmethod
    def parse(cls, text: str) -> FieldSelector:
        """Parse the `fieldSelector` query syntax; raise ValueError with upstream's message."""
        if not text:
            return cls()
        requirements: list[tuple[str, str, str]] = []
        for part in sorted(_split_terms(text)):
            if not part:
                continue
            split = _split_term(part)
            if split is None:
                raise ValueError(f"invalid selector: '{text}'; can't understand '{part}'")
            field, op, raw = split
            value = unescape_field_value(raw)
            if not field and not value:
                continue
            requirements.append((field, NOT_EQUALS if op == NOT_EQUALS else EQUALS, value))
        return cls(requirements)

    @classmethod
    def from_set(cls, fields: Mapping[str, str]) -> FieldSelector:
        return cls((f, EQUALS, v) for f, v in fields.items())

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, fields: Mapping[str, str]) -> bool:
        """True when every term holds; a field absent from `fields` compares as ""."""
        return self._match(fields)

    def requires_exact_match(self, field: str) -> str | None:
        """The value `field` must equal, if a term pins it (e.g. metadata.name or spec.nodeName)."""
        for f, op, value in self.requirements:
            if f == field and op == EQUALS:
                return value
        return None

    def __str__(self) -> str:
        return ",".join(f"{f}{op}{escape_field_value(v)}" for f, op, v in self.requirements)

    def __repr__(self) -> str:
        return f"FieldSelector.parse({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FieldSelector):
            return NotImplemented
        return self.requirements == other.requirements

    def __hash__(self) -> int:
        return hash(self.requirements)

"""`predicateHints`: the protocol's SQL subset, parsed into the shared predicate tree.

Accepted: comparisons (`=`, `==`, `<>`, `!=`, `<`, `<=`, `>`, `>=`, `<=>`) between a
column and a literal on either side, `IS [NOT] NULL`, `[NOT] IN (...)`,
`[NOT] BETWEEN ... AND ...`, `NOT`, `AND`, `OR` and parentheses. Columns are plain or
`backticked` names, dotted for nested fields. Literals: numbers (with Spark's `L`, `S`,
`Y`, `D`, `F`, `BD` suffixes), `'strings'` or `"strings"` with Spark's backslash escapes,
`TRUE`/`FALSE`/`NULL`, `DATE '...'` and `TIMESTAMP '...'`; a plain string compared with
a date, timestamp, number or boolean column is read as that type.

A hint that does not parse is skipped (logged), as the protocol allows. Two quoted
strings in a row (`'it''s'`) are rejected rather than guessed at: Spark concatenates
them, ANSI SQL reads an escaped quote, and guessing wrong would drop files.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from sharing.skipping.expr import (
    BOOL,
    DATE,
    EQ,
    FLOAT,
    GE,
    GT,
    INT,
    LE,
    LT,
    NULL,
    PROPERTY,
    STRING,
    TIMESTAMP,
    And,
    Column,
    Compare,
    Expr,
    IsNull,
    Literal,
    Not,
    Or,
    parse_date,
    parse_float,
    parse_timestamp_micros,
)

log = logging.getLogger(__name__)

MAX_SQL_CHARS = 64 * 1024
MAX_NESTING = 100

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<number>(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)(?:BD|[LSYDF])?(?![\w]))
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<quoted>`(?:[^`]|``)*`)
  | (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<op><=>|<=|>=|<>|!=|==|=|<|>)
  | (?P<punct>[(),.+-])
    """,
    re.VERBOSE | re.IGNORECASE | re.DOTALL,
)
_COMPARISON = {"=": EQ, "==": EQ, "<": LT, "<=": LE, ">": GT, ">=": GE}
_KEYWORDS = frozenset(
    {"and", "or", "not", "is", "null", "true", "false", "in", "between", "like", "case"}
)
_ESCAPES = {
    "0": "\0",
    "b": "\b",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "Z": "\x1a",
    "%": "\\%",
    "_": "\\_",
}


class SqlHintError(ValueError):
    """The hint is outside the supported SQL subset."""


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # number | ident | quoted | string | op | punct | end
    text: str
    value: object = None


def parse_filter_predicate(text: str) -> Expr:
    """A provider's partition filter: the same SQL, plus `current_recipient('key')` as an
    operand (a PROPERTY placeholder literal). Raises SqlHintError when it does not parse:
    unlike a hint, a filter is never skipped."""
    if len(text) > MAX_SQL_CHARS:
        raise SqlHintError(f"longer than {MAX_SQL_CHARS} characters")
    return _Parser(_tokenize(text), recipient_properties=True).parse()


def parse_sql_predicate(text: str) -> Expr | None:
    """The predicate tree of one SQL hint; None (and a log line) when it does not parse."""
    if not isinstance(text, str) or not text.strip():
        return None
    if len(text) > MAX_SQL_CHARS:
        log.info("predicateHints entry ignored: longer than %d characters", MAX_SQL_CHARS)
        return None
    try:
        return _Parser(_tokenize(text)).parse()
    except SqlHintError as exc:
        log.info("predicateHints entry ignored: %s", exc)
        return None


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise SqlHintError(f"unexpected character {text[pos]!r} at {pos}")
        pos = match.end()
        kind = match.lastgroup or ""
        raw = match.group()
        if kind == "ws":
            continue
        if kind == "quoted":
            tokens.append(_Token("quoted", raw, raw[1:-1].replace("``", "`")))
        elif kind == "string":
            if tokens and tokens[-1].kind == "string":
                raise SqlHintError("adjacent string literals are ambiguous")
            tokens.append(_Token("string", raw, _unescape(raw[1:-1])))
        else:
            tokens.append(_Token(kind, raw))
    tokens.append(_Token("end", ""))
    return tokens


def _unescape(body: str) -> str:
    """Spark's string literal escapes."""
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\" or i + 1 >= len(body):
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", body[i + 2 : i + 6]):
            out.append(chr(int(body[i + 2 : i + 6], 16)))
            i += 6
        elif re.fullmatch(r"[0-3][0-7][0-7]", body[i + 1 : i + 4]):
            out.append(chr(int(body[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


class _Parser:
    """Recursive descent over the token list: or > and > not > predicate."""

    def __init__(self, tokens: list[_Token], *, recipient_properties: bool = False) -> None:
        self.recipient_properties = recipient_properties
        self.tokens = tokens
        self.pos = 0
        self.depth = 0

    def parse(self) -> Expr:
        expr = self.disjunction()
        if self.peek().kind != "end":
            raise SqlHintError(f"unexpected {self.peek().text!r}")
        return expr

    # helpers ---------------------------------------------------------------------------

    def peek(self, ahead: int = 0) -> _Token:
        return self.tokens[min(self.pos + ahead, len(self.tokens) - 1)]

    def take(self) -> _Token:
        token = self.peek()
        self.pos += 1
        return token

    def keyword(self, word: str, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token.kind == "ident" and token.text.lower() == word

    def accept_keyword(self, word: str) -> bool:
        if self.keyword(word):
            self.pos += 1
            return True
        return False

    def expect(self, kind: str, text: str | None = None) -> _Token:
        token = self.take()
        if token.kind != kind or (text is not None and token.text.lower() != text):
            raise SqlHintError(f"expected {text or kind}, found {token.text or 'the end'!r}")
        return token

    def nested(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise SqlHintError(f"nested deeper than {MAX_NESTING} levels")

    # grammar ---------------------------------------------------------------------------

    def disjunction(self) -> Expr:
        children = [self.conjunction()]
        while self.accept_keyword("or"):
            children.append(self.conjunction())
        return children[0] if len(children) == 1 else Or(tuple(children))

    def conjunction(self) -> Expr:
        children = [self.negation()]
        while self.accept_keyword("and"):
            children.append(self.negation())
        return children[0] if len(children) == 1 else And(tuple(children))

    def negation(self) -> Expr:
        if self.accept_keyword("not"):
            self.nested()
            inner = self.negation()
            self.depth -= 1
            return Not(inner)
        return self.predicate()

    def predicate(self) -> Expr:
        if self.peek().kind == "punct" and self.peek().text == "(":
            self.take()
            self.nested()
            inner = self.disjunction()
            self.depth -= 1
            self.expect("punct", ")")
            return inner
        left = self.operand()
        token = self.peek()
        if token.kind == "op":
            self.take()
            right = self.operand()
            if token.text == "<=>" and PROPERTY in (_kind(left), _kind(right)):
                raise SqlHintError("<=> with current_recipient() is not supported")
            return _comparison(token.text, left, right)
        if self.accept_keyword("is"):
            negated = self.accept_keyword("not")
            self.expect("ident", "null")
            test: Expr = IsNull(left)
            return Not(test) if negated else test
        negated = self.accept_keyword("not")
        if self.accept_keyword("in"):
            self.expect("punct", "(")
            items = [self.operand()]
            while self.peek().kind == "punct" and self.peek().text == ",":
                self.take()
                items.append(self.operand())
            self.expect("punct", ")")
            equals = [Compare(EQ, left, item) for item in items]
            test = equals[0] if len(equals) == 1 else Or(tuple(equals))
            return Not(test) if negated else test
        if self.accept_keyword("between"):
            low = self.operand()
            self.expect("ident", "and")
            high = self.operand()
            test = And((Compare(GE, left, low), Compare(LE, left, high)))
            return Not(test) if negated else test
        if negated:
            raise SqlHintError("NOT must be followed by IN or BETWEEN here")
        # A bare operand: a boolean column or literal.
        return Compare(EQ, left, Literal(BOOL, True))

    def operand(self) -> Column | Literal:
        token = self.take()
        if token.kind == "number":
            return _number(token.text)
        if token.kind == "punct" and token.text in "+-":
            number = self.expect("number")
            literal = _number(number.text)
            if token.text == "-":
                return Literal(literal.kind, -literal.value)  # type: ignore[operator]
            return literal
        if token.kind == "string":
            return Literal(STRING, token.value)
        if token.kind == "ident":
            word = token.text.lower()
            if word in ("date", "timestamp", "timestamp_ltz", "timestamp_ntz") and (
                self.peek().kind == "string"
            ):
                return _typed(word, str(self.take().value))
            if word == "null":
                return Literal(NULL, None)
            if word == "current_recipient" and self.peek().text == "(":
                return self.recipient_property()
            if word in ("true", "false"):
                return Literal(BOOL, word == "true")
            if word in _KEYWORDS:
                raise SqlHintError(f"unexpected keyword {token.text!r}")
            return self.name(token.text)
        if token.kind == "quoted":
            return self.name(str(token.value))
        raise SqlHintError(f"expected a column or a literal, found {token.text or 'the end'!r}")

    def recipient_property(self) -> Literal:
        """`current_recipient('key')` (after the name): a property of the recipient."""
        if not self.recipient_properties:
            raise SqlHintError("current_recipient() is allowed in partition filters only")
        self.expect("punct", "(")
        key = self.take()
        if key.kind != "string":
            raise SqlHintError("current_recipient() takes a property name in quotes")
        self.expect("punct", ")")
        return Literal(PROPERTY, str(key.value))

    def name(self, first: str) -> Column:
        parts = [first]
        while self.peek().kind == "punct" and self.peek().text == ".":
            self.take()
            token = self.take()
            if token.kind == "ident":
                parts.append(token.text)
            elif token.kind == "quoted":
                parts.append(str(token.value))
            else:
                raise SqlHintError("expected a field name after '.'")
        return Column(tuple(parts))


def _kind(operand: Column | Literal) -> str | None:
    return operand.kind if isinstance(operand, Literal) else None


def _comparison(op: str, left: Column | Literal, right: Column | Literal) -> Expr:
    if op in _COMPARISON:
        return Compare(_COMPARISON[op], left, right)
    if op in ("<>", "!="):
        return Not(Compare(EQ, left, right))
    # <=>: null-safe equality.
    column, other = (left, right) if isinstance(left, Column) else (right, left)
    if isinstance(other, Literal) and other.kind == NULL:
        return IsNull(column)
    if isinstance(column, Column) and isinstance(other, Literal):
        return And((Compare(EQ, column, other), Not(IsNull(column))))
    if isinstance(left, Literal) and isinstance(right, Literal):
        if left.kind == NULL or right.kind == NULL:
            return Compare(EQ, Literal(BOOL, left.kind == right.kind), Literal(BOOL, True))
        return Compare(EQ, left, right)
    raise SqlHintError("<=> between two columns is not supported")


def _number(text: str) -> Literal:
    upper = text.upper()
    suffix = ""
    if upper.endswith("BD"):
        suffix, text = "BD", text[:-2]
    elif upper[-1] in "LSYDF":
        suffix, text = upper[-1], text[:-1]
    integral = re.fullmatch(r"\d+", text) is not None
    if integral and suffix in ("", "L", "S", "Y"):
        return Literal(INT, int(text))
    if suffix in ("L", "S", "Y"):
        raise SqlHintError(f"invalid integer literal {text!r}")
    return Literal(FLOAT, parse_float(text, single=suffix == "F"))


def _typed(word: str, text: str) -> Literal:
    try:
        if word == "date":
            return Literal(DATE, parse_date(text))
        return Literal(TIMESTAMP, parse_timestamp_micros(text))
    except (ValueError, OverflowError) as exc:
        raise SqlHintError(f"invalid {word} literal {text!r}") from exc

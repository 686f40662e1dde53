"""A view's SQL, checked without a JVM and rewritten for the refresher's Spark.

A view is one Spark SQL query over configured tables (`share.schema.table`, backquoted
where needed) or Delta tables by location (``delta.`s3://bucket/path` ``), with
`current_recipient('key')` for the recipient's property `key`. It is parsed once (sqlglot's
Spark dialect, pure Python: the server's bare install has no PySpark) and refused, with the
line and column of the problem, when it is anything but one query, reads anything but
tables, calls a function that is not one of Spark's deterministic built-ins (a UDF, `rand`,
`now`...), or leaves a computed column unnamed (its name would depend on how the query is
printed back).

For the refresher, `ViewQuery.spark_sql` prints the parsed tree back with each table
reference replaced by a temporary view's name and each `current_recipient('key')` by a
named parameter marker (`:r0`): the values are bound by `spark.sql(sql, args=...)`, never
pasted into the text.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokenizer_core import Token, TokenType

from sharing.views.functions import NONDETERMINISTIC, SPARK_BUILTINS

__all__ = ["SourceRef", "ViewQuery", "ViewSqlError", "parse_view"]

CURRENT_RECIPIENT = "current_recipient"
DELTA_PREFIX = "delta"
PARAMETER_PREFIX = "r"
_TOKEN_REPR = re.compile(r"<Token token_type: [^,]*, text: ([^,]*),[^>]*>")


class ViewSqlError(ValueError):
    """A view's SQL that cannot be shared, located in the SQL text (1-based)."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"line {line}, column {column}: {message}")
        self.message = message
        self.line = line
        self.column = column


@dataclass(frozen=True)
class SourceRef:
    """A table a view reads: a configured table (`share.schema.table`, compared without
    regard to case, as the catalog does) or a Delta table by location (`uri`)."""

    share: str = ""
    schema: str = ""
    table: str = ""
    uri: str = ""

    @property
    def key(self) -> tuple[str, ...]:
        if self.uri:
            return (DELTA_PREFIX, self.uri)
        return (self.share.lower(), self.schema.lower(), self.table.lower())

    def __str__(self) -> str:
        if self.uri:
            return f"delta.`{self.uri}`"
        return f"{self.share}.{self.schema}.{self.table}"


@dataclass(frozen=True)
class SourceUse:
    """Where the SQL names a source (for messages)."""

    ref: SourceRef
    line: int
    column: int


@dataclass(frozen=True)
class ViewQuery:
    """A checked view: the property keys it reads (sorted), the sources it reads (first
    use first) and where, and the parsed tree."""

    text: str
    keys: tuple[str, ...]
    sources: tuple[SourceRef, ...]
    uses: tuple[SourceUse, ...]
    tree: exp.Expr

    def spark_sql(
        self, names: Mapping[SourceRef, str], *, carry: str | None = None
    ) -> tuple[str, dict[str, str]]:
        """The query as Spark runs it with each source read from the temporary view
        `names[source]`, and the parameters it takes: marker name -> property key.
        `carry`: a column of the (one) source to pass through to the result as well (a
        query of one SELECT; `SELECT *` carries it already)."""
        by_key = {ref.key: name for ref, name in names.items()}
        parameters = {key: f"{PARAMETER_PREFIX}{i}" for i, key in enumerate(self.keys)}
        ctes = _cte_names(self.tree)

        def rewrite(node: exp.Expr) -> exp.Expr:
            if isinstance(node, exp.Table) and not _is_cte(node, ctes):
                ref = _source_of(node)
                if ref is not None:
                    # Columns qualified by the table's own name still resolve.
                    alias = node.args.get("alias") or (
                        None if ref.uri else exp.TableAlias(this=exp.to_identifier(node.name))
                    )
                    return exp.Table(
                        this=exp.to_identifier(by_key[ref.key], quoted=True), alias=alias
                    )
            key = _recipient_key(node)
            if key is not None:
                return exp.Placeholder(this=parameters[key])
            return node

        tree = self.tree.copy().transform(rewrite)
        carried = isinstance(tree, exp.Select) and any(
            isinstance(c, exp.Star) for c in tree.expressions
        )
        if carry is not None and isinstance(tree, exp.Select) and not carried:
            tree = tree.select(exp.column(carry, quoted=True), copy=False)
        sql = tree.sql(dialect="spark")
        return sql, {marker: key for key, marker in parameters.items()}


@lru_cache(maxsize=256)
def parse_view(text: str) -> ViewQuery:
    """The checked view, or ViewSqlError at the first problem found."""
    try:
        return _parse_view(text)
    except RecursionError:  # the parser and the checks recurse once per nesting level
        raise ViewSqlError("the query is nested too deeply", 1, 1) from None


def _parse_view(text: str) -> ViewQuery:
    try:
        statements = [s for s in sqlglot.parse(text, read="spark") if s is not None]
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        description = _TOKEN_REPR.sub(r"'\1'", str(first.get("description") or exc))
        raise ViewSqlError(
            f"not valid Spark SQL: {description}",
            int(first.get("line") or 1),
            int(first.get("col") or 1),
        ) from None
    except TokenError as exc:
        raise ViewSqlError(f"not valid Spark SQL: {exc}", 1, 1) from None
    if not statements:
        raise ViewSqlError("the view holds no query", 1, 1)
    if len(statements) > 1:
        raise ViewSqlError(
            "a view is one SELECT query; this holds several statements",
            *_second_statement(text),
        )
    tree = statements[0]
    if not isinstance(tree, exp.Query):
        kind = type(tree).__name__.upper()
        raise ViewSqlError(f"a view is one SELECT query, not {kind}", *_first_token(text))
    keys: set[str] = set()
    uses: list[SourceUse] = []
    ctes = _cte_names(tree)
    for node in tree.walk():
        _check_node(node, text, keys, uses, ctes)
    _check_named_columns(tree, text)
    sources: list[SourceRef] = []
    for use in uses:
        if use.ref.key not in {s.key for s in sources}:
            sources.append(use.ref)
    return ViewQuery(text, tuple(sorted(keys)), tuple(sources), tuple(uses), tree)


def _check_node(
    node: exp.Expr,
    text: str,
    keys: set[str],
    uses: list[SourceUse],
    ctes: set[str],
) -> None:
    if isinstance(node, exp.Placeholder | exp.Parameter):
        raise ViewSqlError(
            "parameter markers are not allowed in a view: use current_recipient('key')",
            *_position(node, text),
        )
    if isinstance(node, exp.TableSample):
        raise ViewSqlError(
            "TABLESAMPLE is not deterministic: a view must give the same rows on every refresh",
            *_position(node, text),
        )
    if isinstance(node, exp.Table):
        _check_table(node, text, uses, ctes)
        return
    if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Func):
        raise ViewSqlError(
            f"'{node.sql(dialect='spark')}' calls a function of a catalog (a UDF): a view "
            "may call Spark's deterministic built-in functions only",
            *_position(node, text),
        )
    if isinstance(node, exp.Func) and not isinstance(node, exp.Binary | exp.Unary):
        if _is_current_recipient(node):
            key = _recipient_key(node)
            if key is None:
                raise ViewSqlError(
                    "current_recipient takes one string literal, the property's name",
                    *_position(node, text),
                )
            keys.add(key)
            return
        _check_function(node, text)


def _check_table(node: exp.Table, text: str, uses: list[SourceUse], ctes: set[str]) -> None:
    if isinstance(node.this, exp.Func) or not isinstance(node.this, exp.Identifier):
        raise ViewSqlError(
            "a view reads tables only (share.schema.table or delta.`<uri>`), not a "
            "table-valued function",
            *_position(node, text),
        )
    if _is_cte(node, ctes):
        return
    ref = _source_of(node)
    if ref is None:
        raise ViewSqlError(
            f"'{node.sql(dialect='spark')}' is not a table a view can read: name a "
            "configured table as share.schema.table, or a Delta table as delta.`<uri>`",
            *_position(node, text),
        )
    uses.append(SourceUse(ref, *_position(node, text)))


def _check_function(node: exp.Func, text: str) -> None:
    written = _written_name(node, text)
    name = written if written is not None else node.sql_name().lower()
    if name in NONDETERMINISTIC or (name == "unix_timestamp" and not _arguments(node)):
        raise ViewSqlError(
            f"{name}() is not deterministic: a view must give the same rows on every refresh",
            *_position(node, text),
        )
    if written is not None and name not in SPARK_BUILTINS:
        raise ViewSqlError(
            f"unknown function {name}(): a view may call Spark's deterministic built-in "
            "functions only (no UDFs)",
            *_position(node, text),
        )


def _check_named_columns(tree: exp.Expr, text: str) -> None:
    """Every computed column of the result is named (AS name)."""
    select: exp.Expr | None = tree
    while isinstance(select, exp.SetOperation):
        select = select.this
    if isinstance(select, exp.Subquery):
        select = select.unnest()
    if not isinstance(select, exp.Select):
        return
    for index, column in enumerate(select.expressions, start=1):
        if isinstance(column, exp.Alias | exp.Column | exp.Star):
            continue
        if isinstance(column, exp.Dot) and isinstance(column.expression, exp.Identifier):
            continue  # a struct field: named after the field
        raise ViewSqlError(
            f"column {index} ({column.sql(dialect='spark')}) needs a name: add AS <name>",
            *_position(column, text),
        )


def _source_of(node: exp.Table) -> SourceRef | None:
    parts = [p for p in (node.catalog, node.db, node.name) if p]
    if len(parts) == 3:
        return SourceRef(share=parts[0], schema=parts[1], table=parts[2])
    if len(parts) == 2 and parts[0].lower() == DELTA_PREFIX:
        return SourceRef(uri=parts[1])
    return None


def _cte_names(tree: exp.Expr) -> set[str]:
    return {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}


def _is_cte(node: exp.Table, ctes: set[str]) -> bool:
    return not node.db and not node.catalog and node.name.lower() in ctes


def _recipient_key(node: exp.Expr) -> str | None:
    """The key of `current_recipient('key')`; None for any other node."""
    if not _is_current_recipient(node):
        return None
    assert isinstance(node, exp.Anonymous)
    arguments = node.expressions
    if len(arguments) != 1 or not (
        isinstance(arguments[0], exp.Literal) and arguments[0].is_string
    ):
        return None
    return str(arguments[0].this)


def _is_current_recipient(node: exp.Expr) -> bool:
    return isinstance(node, exp.Anonymous) and node.name.lower() == CURRENT_RECIPIENT


def _written_name(node: exp.Func, text: str) -> str | None:
    """The function's name as the SQL spells it (sqlglot normalizes `nvl` to COALESCE;
    Spark knows the spelling), or None for keyword syntax (CAST, CASE, CURRENT_DATE)."""
    start, end = node.meta.get("start"), node.meta.get("end")
    if start is None or end is None:
        return None
    return text[start : end + 1].strip("`").lower()


def _arguments(node: exp.Func) -> list[exp.Expr]:
    return [v for v in node.args.values() if isinstance(v, exp.Expr)] + [
        e for v in node.args.values() if isinstance(v, list) for e in v
    ]


def _position(node: exp.Expr, text: str) -> tuple[int, int]:
    """The line and column of the first token of `node` that the parser placed (or of the
    nearest enclosing one)."""
    starts = [n.meta["start"] for n in node.walk() if "start" in n.meta]
    if starts:
        return _line_column(text, min(starts))
    parent = node.parent
    while parent is not None:
        starts = [n.meta["start"] for n in parent.walk() if "start" in n.meta]
        if starts:
            return _line_column(text, min(starts))
        parent = parent.parent
    return 1, 1


def _tokens(text: str) -> list[Token]:
    return list(Dialect.get_or_raise("spark").tokenize(text))


def _first_token(text: str) -> tuple[int, int]:
    tokens = _tokens(text)
    return _line_column(text, tokens[0].start) if tokens else (1, 1)


def _second_statement(text: str) -> tuple[int, int]:
    """Where the statement after the first `;` starts."""
    tokens = _tokens(text)
    for before, token in itertools.pairwise(tokens):
        if before.token_type is TokenType.SEMICOLON and token.token_type is not TokenType.SEMICOLON:
            return _line_column(text, token.start)
    return 1, 1


def _line_column(text: str, offset: int) -> tuple[int, int]:
    before = text[:offset]
    line = before.count("\n") + 1
    column = offset - (before.rfind("\n") + 1) + 1
    return line, column

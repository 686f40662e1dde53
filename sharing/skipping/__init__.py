"""Data skipping for `POST …/query`: `jsonPredicateHints`, `predicateHints` and `limitHint`.

`filter_files` keeps the files of a snapshot that may hold rows matching the hints
(partition values and per-file statistics, three-valued logic, never dropping a file
that could match), and `select_files` says which, as row indices, without copying them;
`apply_limit` (`limit_length` on a selection) cuts a file list once enough rows are
known to be returned. All work on the snapshot's files table (ADD_SCHEMA) column-wise,
and share a process-wide cache of parsed statistics (`DEFAULT_CACHE`) keyed by the stats
buffers, so pass the snapshot's own files table (or a slice of it) to benefit from it.
"""

from sharing.skipping.evaluate import (
    apply_limit,
    file_mask,
    filter_files,
    limit_length,
    partition_filter_mask,
    select_files,
)
from sharing.skipping.json_predicate import PredicateTooLarge, parse_json_predicate
from sharing.skipping.sql_predicate import parse_sql_predicate
from sharing.skipping.stats import DEFAULT_CACHE, StatsCache

__all__ = [
    "DEFAULT_CACHE",
    "PredicateTooLarge",
    "StatsCache",
    "apply_limit",
    "file_mask",
    "filter_files",
    "limit_length",
    "parse_json_predicate",
    "parse_sql_predicate",
    "partition_filter_mask",
    "select_files",
]

"""Hive-style partition folder names, escaped as Spark and Hive escape them.

A partition value is free text: a `/` would nest folders, `..` would climb out of the
table folder, and `%` or `=` would be read back as something else. Every writer here
(the Delta writer and the copy job) names its folders through this module, so the files
land inside the table folder and other engines parse the folder names back.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"

# The characters Hive's escapePathName (and Spark's, which follows it) writes as %XX,
# besides control characters and DEL.
_SPECIAL = frozenset("\"#%'*/:=?\\{[]^")


def escape_path_name(text: str) -> str:
    """`text` with path-unsafe characters as `%XX` (uppercase hex)."""
    return "".join(
        f"%{ord(c):02X}" if c in _SPECIAL or ord(c) < 0x20 or ord(c) == 0x7F else c for c in text
    )


def partition_folders(values: Iterable[tuple[str, str | None]]) -> str:
    """The relative folder of a file with these partition values (`""` for none)."""
    folders = [
        f"{escape_path_name(name)}={NULL_PARTITION if value is None else escape_path_name(value)}"
        for name, value in values
    ]
    return posixpath.join(*folders) if folders else ""

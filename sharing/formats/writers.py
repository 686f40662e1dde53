"""The writer of each response format, one shared instance apiece (writers hold no state).

Its own module so imports flow one way: `delta` and `parquet` build on the package's line
machinery (`sharing.formats`), and only this module imports them.
"""

from __future__ import annotations

from sharing.formats import FormatWriter
from sharing.formats.delta import DeltaWriter
from sharing.formats.parquet import ParquetWriter

__all__ = ["writer_for"]

_WRITERS: dict[str, FormatWriter] = {"delta": DeltaWriter(), "parquet": ParquetWriter()}


def writer_for(response_format: str) -> FormatWriter:
    """The writer of a response format: delta, else parquet (the protocol's default)."""
    return _WRITERS["delta" if response_format == "delta" else "parquet"]

"""DuckDB 1.5.5 with its iceberg extension (and avro, httpfs) loaded from the installed PyPI
packages: the tests never let DuckDB download an extension at run time."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tests.support.requirements import require

VERSION = "1.5.5"


def duckdb_with_iceberg(more: tuple[str, ...] = ()) -> Any:
    """A new DuckDB connection with the extensions loaded (and those of `more`, e.g.
    `azure`); skips (fails under LAKESHARE_REQUIRE_ALL) when the packages are missing."""
    try:
        import duckdb
    except ImportError:
        require(False, f"duckdb=={VERSION} (the dev extra)")
    site = next(Path(p) for p in sys.path if p.endswith("site-packages"))
    con = duckdb.connect(
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    con.execute("SET enable_progress_bar = false")  # no bar drawn on a slow (loaded) run
    for name in ("avro", "httpfs", *more, "iceberg"):
        path = site / f"duckdb_extension_{name}/extensions/v{VERSION}/{name}.duckdb_extension"
        require(path.exists(), f"duckdb-extension-{name}=={VERSION} (the dev extra)")
        con.execute(f"LOAD '{path}'")
    return con

"""Write the sample Delta table that deploy/config.yaml shares: deploy/data/orders.

    .venv/bin/python deploy/make_sample_table.py [--force]

The table is committed to the repository so that `docker compose up` serves something real
without any step before it; this script is how it was made, and how to make it again
(--force replaces it). Two appends, so the history APIs (historyShared: true) have more
than one version to show; partitioned by order date; change data feed enabled, so
`table_changes` works on it. Written with deltalake (delta-rs), a dependency of Lakeshare.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

TABLE = Path(__file__).resolve().parent / "data" / "orders"

SCHEMA = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        pa.field("customer", pa.string()),
        pa.field("amount", pa.decimal128(10, 2)),
        pa.field("order_date", pa.date32()),
    ]
)

# (order_id, customer, amount in cents, day of November 2026)
BATCHES = [
    [
        (1, "Ada", 1250, 2),
        (2, "Grace", 9900, 2),
        (3, "Linus", 420, 3),
        (4, "Ada", 15000, 3),
    ],
    [
        (5, "Barbara", 3100, 4),
        (6, "Grace", 780, 4),
    ],
]


def _batch(rows: list[tuple[int, str, int, int]]) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "order_id": order_id,
                "customer": customer,
                "amount": Decimal(cents) / 100,
                "order_date": dt.date(2026, 11, day),
            }
            for order_id, customer, cents, day in rows
        ],
        schema=SCHEMA,
    )


def write(table: Path = TABLE) -> None:
    """Create the table: version 0 holds the first batch, version 1 appends the second."""
    first, *rest = BATCHES
    write_deltalake(
        str(table),
        _batch(first),
        partition_by=["order_date"],
        name="orders",
        description="Sample orders shared by the Lakeshare deployment examples",
        configuration={"delta.enableChangeDataFeed": "true"},
    )
    for rows in rest:
        write_deltalake(str(table), _batch(rows), mode="append")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="replace an existing table")
    args = parser.parse_args(argv)
    if TABLE.exists():
        if not args.force:
            print(f"{TABLE} exists; --force replaces it", file=sys.stderr)
            return 1
        shutil.rmtree(TABLE)
    write()
    print(f"wrote {TABLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

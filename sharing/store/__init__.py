"""The state store: what outlives a request (recipients, credentials, grants, audit, async
queries), in one schema on embedded SQLite (default) or PostgreSQL (by URL), through
SQLAlchemy Core so one set of tables and migrations serves both dialects.

- `engine`: an Engine for a URL (SQLite in WAL mode with a busy timeout; PostgreSQL through
  psycopg 3).
- `schema`: the tables (one MetaData).
- `migrations`: the ordered, named migrations applied at start, under a lock.
- `store`: `Store`, the handle the rest of the server holds (transactions, change counter).

Adding tables (e.g. for another feature): declare them in `schema` and append a
`Migration("NNNN_name", apply)` to `migrations.MIGRATIONS` whose `apply(connection)` creates
them (`schema.my_table.create(connection)`); the feature's module imports its tables from
`schema`. The store never imports a feature's module (imports flow one way).
"""

from sharing.store.store import Store, StoreError, open_store

__all__ = ["Store", "StoreError", "open_store"]

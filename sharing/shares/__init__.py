"""Shares created at run time: the store's half of the catalog.

- `entries`: a table entry (the configuration's `TableConfig`) from a store row or a request,
  validated exactly as the configuration file's tables are.
- `repository`: `ShareRepository`, the store's shares and tables; each write is one
  transaction that bumps the `catalog` change counter.
- `live`: `LiveCatalog`, the file's shares and the store's as one `sharing.catalog.Catalog`,
  rebuilt when the counter moves (checked every `store.cacheSeconds`), with the caches of
  removed tables dropped.
- `admin`: `ShareAdmin`, the checked operations the CLI, the admin API and a console call.
"""

"""Shared views: a table entry with `view:` (Spark SQL) instead of `location:`, materialized
per tuple of recipient properties by `lakeshare views refresh` (pipeline.views) and served
like a table (sharing.catalog). `sql` checks and rewrites the SQL; `materializations`
says where each tuple's table lives and what its commits carry."""

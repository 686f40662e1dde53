"""An S3-compatible endpoint of the server itself for local tables (`{endpoint}/s3`).

`keys` mints and reads the short-lived, table- and recipient-scoped access keys that
`temporary-table-credentials` and the Iceberg catalog vend for local tables; `scope`
decides whether a key opens a table's folder or only a recipient's slice of it; `sigv4`
checks AWS Signature Version 4 (header and presigned) against them; `access` decides whom
and which table a verified key serves now, `objects` which files of it; `errors` holds
S3's XML error replies; `listing` answers ListObjectsV2 within a table.
"""

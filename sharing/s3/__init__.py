"""An S3-compatible endpoint of the server itself for local tables (`{endpoint}/s3`).

`keys` mints and reads the short-lived, table- and recipient-scoped access keys that
`temporary-table-credentials` vends for local tables; `sigv4` checks AWS Signature Version 4
(header and presigned) against them; `access` decides what a verified key may read now;
`errors` holds S3's XML error replies; `listing` answers ListObjectsV2 within a table.
"""

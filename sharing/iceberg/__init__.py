"""Iceberg v3 views of shared Delta tables: metadata generated from the Delta log.

`generator.IcebergMetadata` writes, per table version, the table metadata JSON, manifest
lists and manifests (Avro, through fastavro) and Puffin deletion vectors into a cache
directory; `schema` maps Delta schemas and field ids, `values` partition values and column
bounds, `puffin` the deletion-vector blobs; `named` the objects a recipient's metadata
names (what a slice's key of the S3 endpoint opens); `catalog` the REST catalog's answers.
"""

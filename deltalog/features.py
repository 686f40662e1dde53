"""Reader protocol checks: may this reader read a table with this protocol?

Reader versions: 1 needs nothing; 2 means column mapping; 3 means "see readerFeatures",
which must then be present. Versions above 3 do not exist in the protocol, so any table
that asks for one is refused, as is any reader feature not listed below.

Decisions on features this reader deliberately does not support:

- `catalogManaged` / `catalogOwned(-preview)`: the table's latest commits are ratified by a
  catalog and may exist only there (`_staged_commits/`, or not on storage at all), so a
  reader that lists `_delta_log/` alone could serve a stale or wrong snapshot.
- `geospatial`: the log replays fine, but the schema then holds `geometry`/`geography`
  types, which the Delta Sharing protocol and its clients do not define, and their
  statistics are bounding boxes that min/max file skipping would misread. Refusing is
  what the protocol asks of a reader that does not implement a feature.
- `variantShredding(-preview)`: reading shredded variants means reassembling values from
  typed sub-columns, which the data reader does not do.
"""

from __future__ import annotations

from deltalog.actions import Protocol
from deltalog.errors import CorruptLogError, UnsupportedFeatureError

MAX_READER_VERSION = 3

# Reader features whose reader-side requirements this package meets (some are writer-only
# features that writers nevertheless list in readerFeatures; they need nothing of a reader).
SUPPORTED_READER_FEATURES: frozenset[str] = frozenset(
    {
        "appendOnly",
        "allowColumnDefaults",
        "changeDataFeed",
        "checkConstraints",
        "clustering",
        "columnMapping",
        "deletionVectors",
        "domainMetadata",
        "generatedColumns",
        "icebergCompatV1",
        "icebergCompatV2",
        "icebergWriterCompatV1",
        "identityColumns",
        "inCommitTimestamp",
        "invariants",
        "rowTracking",
        "timestampNtz",
        "typeWidening",
        "typeWidening-preview",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "variantType",
        "variantType-preview",
    }
)

# Features implied by a legacy reader version (before table features existed).
_LEGACY_READER_FEATURES = {1: frozenset(), 2: frozenset({"columnMapping"})}


def reader_features(protocol: Protocol) -> frozenset[str]:
    """The reader features a table's protocol requires, legacy versions included."""
    if protocol.min_reader_version >= 3:
        return frozenset(protocol.reader_features or ())
    return _LEGACY_READER_FEATURES.get(protocol.min_reader_version, frozenset())


def is_reader_feature_enabled(protocol: Protocol, feature: str) -> bool:
    return feature in reader_features(protocol)


def check_reader_protocol(protocol: Protocol) -> None:
    """Raise unless this reader can read a table with `protocol`.

    UnsupportedFeatureError for a reader version above 3 or a reader feature not in
    SUPPORTED_READER_FEATURES; CorruptLogError for a protocol the spec does not allow
    (reader features listed under a legacy reader version, or version 3 without them).
    """
    version = protocol.min_reader_version
    listed = protocol.reader_features
    if version < 1:
        raise CorruptLogError(f"invalid protocol: minReaderVersion {version}")
    if version > MAX_READER_VERSION:
        unknown = sorted(set(listed or ()) - SUPPORTED_READER_FEATURES)
        raise UnsupportedFeatureError(
            f"table requires reader version {version}; this reader supports up to "
            f"{MAX_READER_VERSION}"
            + (
                f" (and it lists unsupported reader features: {', '.join(unknown)})"
                if unknown
                else ""
            ),
            features=[f"minReaderVersion={version}", *unknown],
        )
    if version < 3:
        if listed:
            raise CorruptLogError(
                f"invalid protocol: readerFeatures {list(listed)} present with reader version "
                f"{version} (only reader version 3 may list reader features)"
            )
        return
    if listed is None:
        raise CorruptLogError("invalid protocol: reader version 3 without readerFeatures")
    unsupported = sorted(set(listed) - SUPPORTED_READER_FEATURES)
    if unsupported:
        raise UnsupportedFeatureError(
            "table requires reader features this reader does not support: "
            + ", ".join(unsupported),
            features=unsupported,
        )

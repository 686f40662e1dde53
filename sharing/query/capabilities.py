"""The `delta-sharing-capabilities` header: what the client can read, and what we answer.

The header is `key=v1,v2;key2=v3`, case-insensitive; unknown keys are ignored. The
response format decides how file actions are written; tables whose features the parquet
format cannot express (deletion vectors, column mapping) are only served in delta format
to clients that declare they can read those features.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from deltalog.actions import Metadata, Protocol
from sharing.errors import InvalidParameter, UnsupportedOperation

HEADER = "delta-sharing-capabilities"


class ResponseFormat(StrEnum):
    """How file actions are written: the reference's parquet lines, or Delta actions."""

    PARQUET = "parquet"
    DELTA = "delta"


PARQUET, DELTA = ResponseFormat.PARQUET, ResponseFormat.DELTA
FORMATS = tuple(ResponseFormat)

DELETION_VECTORS = "deletionvectors"
COLUMN_MAPPING = "columnmapping"
_FEATURE_NAMES = {DELETION_VECTORS: "deletion vectors", COLUMN_MAPPING: "column mapping"}


@dataclass(frozen=True)
class Capabilities:
    """A parsed request header. `response_formats` is empty when the client named none."""

    response_formats: tuple[ResponseFormat, ...] = ()
    reader_features: frozenset[str] = frozenset()
    include_end_stream_action: bool = False
    async_query: bool = False


def parse(header: str | None) -> Capabilities:
    """Parse the request header; a missing or empty header means plain parquet."""
    if not header:
        return Capabilities()
    values: dict[str, list[str]] = {}
    for part in header.lower().split(";"):
        key, sep, raw = part.partition("=")
        key = key.strip()
        if not key or not sep:
            continue
        values.setdefault(key, []).extend(v.strip() for v in raw.split(",") if v.strip())
    formats: list[ResponseFormat] = []
    if "responseformat" in values:
        requested = values["responseformat"]
        unknown = [f for f in requested if f not in FORMATS]
        if unknown or not requested:
            raise InvalidParameter(
                f"Unsupported responseformat: '{','.join(requested)}'. Supported: parquet, delta"
            )
        formats = [ResponseFormat(f) for f in dict.fromkeys(requested)]
    return Capabilities(
        response_formats=tuple(formats),
        reader_features=frozenset(values.get("readerfeatures", ())),
        include_end_stream_action=_flag(values.get("includeendstreamaction")),
        async_query=_flag(values.get("asyncquery")),
    )


def _flag(values: list[str] | None) -> bool:
    return values is not None and bool(values) and values[-1] == "true"


def required_features(protocol: Protocol, metadata: Metadata) -> list[str]:
    """The client-side reader features (header names) a table needs, in a stable order."""
    needed: list[str] = []
    dv_property = metadata.configuration.get("delta.enableDeletionVectors", "false").lower()
    if dv_property == "true" or protocol.has_reader_feature("deletionVectors"):
        needed.append(DELETION_VECTORS)
    if metadata.column_mapping_mode != "none":
        needed.append(COLUMN_MAPPING)
    return needed


def choose_format(caps: Capabilities, protocol: Protocol, metadata: Metadata) -> ResponseFormat:
    """The response format for this table and request, or UnsupportedOperation when the
    client cannot read the table in any format it asked for."""
    requested = caps.response_formats or (PARQUET,)
    if len(requested) == 1:
        chosen = requested[0]
    else:
        chosen = PARQUET if protocol.min_reader_version == 1 else DELTA
    needed = required_features(protocol, metadata)
    if chosen == PARQUET and needed:
        raise UnsupportedOperation(
            f"Unsupported Delta Table Properties: the table uses {_describe(needed)}, which "
            "the parquet response format cannot express. Ask for responseformat=delta with "
            f"readerfeatures={','.join(needed)} in the {HEADER} header."
        )
    missing = [f for f in needed if f not in caps.reader_features]
    if chosen == DELTA and missing:
        raise UnsupportedOperation(
            f"Unsupported Delta Table Properties: the table uses {_describe(missing)}; add "
            f"readerfeatures={','.join(missing)} to the {HEADER} header if the client "
            "can read it."
        )
    return chosen


def _describe(features: list[str]) -> str:
    return " and ".join(_FEATURE_NAMES[f] for f in features)


def response_header(response_format: str, *, include_end_stream_action: bool = False) -> str:
    """The response's capabilities header value."""
    value = f"responseformat={response_format}"
    if include_end_stream_action:
        value += ";includeendstreamaction=true"
    return value

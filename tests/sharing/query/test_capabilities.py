"""The capabilities header: parsing, format choice and the feature gate."""

from __future__ import annotations

import pytest

from deltalog.actions import Metadata, Protocol
from sharing.errors import InvalidParameter, UnsupportedOperation
from sharing.query import capabilities
from sharing.query.capabilities import Capabilities, choose_format, parse, response_header

V1 = Protocol(1, 2)
DV_PROTOCOL = Protocol(3, 7, ("deletionVectors",), ("deletionVectors",))
CM_PROTOCOL = Protocol(2, 5)
NTZ_PROTOCOL = Protocol(3, 7, ("timestampNtz",), ("timestampNtz",))


def _metadata(**configuration: str) -> Metadata:
    return Metadata(
        id="id",
        schema_string='{"type":"struct","fields":[]}',
        partition_columns=(),
        configuration=dict(configuration),
    )


PLAIN = _metadata()
DV_META = _metadata(**{"delta.enableDeletionVectors": "true"})
CM_META = _metadata(**{"delta.columnMapping.mode": "name"})


def test_missing_or_empty_header_means_parquet() -> None:
    assert parse(None) == Capabilities()
    assert parse("") == Capabilities()
    assert choose_format(parse(None), V1, PLAIN) == "parquet"


def test_parsing_is_case_insensitive_and_ignores_unknown_keys() -> None:
    caps = parse(
        "ResponseFormat=Delta,Parquet; readerFeatures=DeletionVectors,columnMapping;"
        "IncludeEndStreamAction=TRUE;asyncQuery=true;somethingNew=1;novalue"
    )
    assert caps.response_formats == ("delta", "parquet")
    assert caps.reader_features == {"deletionvectors", "columnmapping"}
    assert caps.include_end_stream_action and caps.async_query


def test_unknown_response_format_is_rejected() -> None:
    with pytest.raises(InvalidParameter, match="Unsupported responseformat"):
        parse("responseformat=json")


@pytest.mark.parametrize(
    ("header", "protocol", "metadata", "expected"),
    [
        ("responseformat=parquet", V1, PLAIN, "parquet"),
        ("responseformat=delta", V1, PLAIN, "delta"),
        ("responseformat=delta,parquet", V1, PLAIN, "parquet"),
        ("responseformat=parquet,delta", V1, PLAIN, "parquet"),
        ("responseformat=delta,parquet", NTZ_PROTOCOL, PLAIN, "delta"),
        (
            "responseformat=delta,parquet;readerfeatures=deletionvectors",
            DV_PROTOCOL,
            DV_META,
            "delta",
        ),
        ("responseformat=delta;readerfeatures=columnmapping", CM_PROTOCOL, CM_META, "delta"),
        ("responseformat=parquet", NTZ_PROTOCOL, PLAIN, "parquet"),
    ],
)
def test_format_choice(header: str, protocol: Protocol, metadata: Metadata, expected: str) -> None:
    assert choose_format(parse(header), protocol, metadata) == expected


@pytest.mark.parametrize(
    ("header", "protocol", "metadata", "named"),
    [
        ("responseformat=parquet", DV_PROTOCOL, DV_META, "deletion vectors"),
        (None, CM_PROTOCOL, CM_META, "column mapping"),
        (
            "responseformat=parquet;readerfeatures=deletionvectors",
            DV_PROTOCOL,
            DV_META,
            "deletion vectors",
        ),
        ("responseformat=delta", DV_PROTOCOL, DV_META, "deletion vectors"),
        (
            "responseformat=delta;readerfeatures=deletionvectors",
            CM_PROTOCOL,
            CM_META,
            "column mapping",
        ),
        ("responseformat=delta,parquet", CM_PROTOCOL, CM_META, "column mapping"),
    ],
)
def test_feature_gate(
    header: str | None, protocol: Protocol, metadata: Metadata, named: str
) -> None:
    with pytest.raises(UnsupportedOperation) as info:
        choose_format(parse(header), protocol, metadata)
    assert info.value.message.startswith("Unsupported Delta Table Properties")
    assert named in info.value.message
    assert info.value.status == 400 and info.value.error_code == "UNSUPPORTED_OPERATION"


def test_parquet_refusal_points_to_delta_format() -> None:
    with pytest.raises(UnsupportedOperation, match="responseformat=delta"):
        choose_format(parse("responseformat=parquet"), DV_PROTOCOL, DV_META)


def test_required_features() -> None:
    assert capabilities.required_features(V1, PLAIN) == []
    assert capabilities.required_features(DV_PROTOCOL, PLAIN) == ["deletionvectors"]
    assert capabilities.required_features(V1, DV_META) == ["deletionvectors"]
    off = _metadata(**{"delta.enableDeletionVectors": "false", "delta.columnMapping.mode": "none"})
    assert capabilities.required_features(Protocol(3, 7, (), ()), off) == []
    both = _metadata(**{"delta.enableDeletionVectors": "true", "delta.columnMapping.mode": "id"})
    assert capabilities.required_features(DV_PROTOCOL, both) == ["deletionvectors", "columnmapping"]


def test_response_header() -> None:
    assert response_header("parquet") == "responseformat=parquet"
    assert (
        response_header("parquet", include_end_stream_action=True)
        == "responseformat=parquet;includeendstreamaction=true"
    )

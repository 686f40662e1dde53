"""What vended credentials reach: the S3 session policy, the GCS access boundary and the
Azure SAS, each compared with the cloud SDK's own construction where one exists.

Azure: no emulator has a hierarchical namespace (Azurite refuses directory SAS tokens
outright), so the choice between a directory and a container SAS is tested here with the
account's answer already known to the storage (its cache filled in place of the service's
reply); tests/cloud/test_temp_credentials.py runs the flat-namespace path against Azurite.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from typing import Any
from urllib.parse import parse_qsl

import pytest

from deltalog.storage.azure import AzureStorage
from sharing.credentials import azure as vend_azure
from sharing.credentials import gcs as vend_gcs
from sharing.credentials.base import NotVendable
from sharing.credentials.location import parse_location
from sharing.credentials.s3 import session_policy
from sharing.presign.azure import DelegationKey
from tests.support.emulators import AZURITE_ACCOUNT, AZURITE_KEY

EXPIRY = 1_900_000_000


# -- S3 ---------------------------------------------------------------------------------------


def test_s3_session_policy() -> None:
    policy = json.loads(session_policy("bucket", "warehouse/table1", "eu-west-1"))
    get, listing = policy["Statement"]
    assert get == {
        "Effect": "Allow",
        "Action": ["s3:GetObject"],
        "Resource": ["arn:aws:s3:::bucket/warehouse/table1/*"],
    }
    # listing "warehouse/table1" without the slash would name a sibling "table10/"'s files
    assert listing == {
        "Effect": "Allow",
        "Action": ["s3:ListBucket"],
        "Resource": ["arn:aws:s3:::bucket"],
        "Condition": {"StringLike": {"s3:prefix": ["warehouse/table1/*"]}},
    }
    china = json.loads(session_policy("b", "t", "cn-north-1", with_list=False))
    assert china["Statement"] == [
        {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": ["arn:aws-cn:s3:::b/t/*"]}
    ]
    whole = json.loads(session_policy("b", "", "us-east-1"))["Statement"]
    assert whole[0]["Resource"] == ["arn:aws:s3:::b/*"]
    assert whole[1]["Condition"] == {"StringLike": {"s3:prefix": ["*"]}}


def test_s3_session_policy_names_wildcard_characters_literally() -> None:
    # Failed before the fix: a table under `data*/t` got `b/data*/t/*`, which IAM matches
    # as a wildcard (`b/data-other/t/...` too); `${x}` would be a policy variable.
    policy = json.loads(session_policy("b", "data*/t?/a${x}", "us-east-1"))
    get, listing = policy["Statement"]
    assert get["Resource"] == ["arn:aws:s3:::b/data${*}/t${?}/a${$}{x}/*"]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["data${*}/t${?}/a${$}{x}/*"]}}


def test_s3_session_policy_with_the_tables_generated_metadata() -> None:
    """The Iceberg catalog's credential: the table and its metadata folder, nothing else."""
    policy = json.loads(
        session_policy(
            "bucket", "warehouse/t1", "us-east-1", also=[("meta", "iceberg/abc"), ("bucket", "m")]
        )
    )
    get, *listings = policy["Statement"]
    assert get["Resource"] == [
        "arn:aws:s3:::bucket/warehouse/t1/*",
        "arn:aws:s3:::meta/iceberg/abc/*",
        "arn:aws:s3:::bucket/m/*",
    ]
    assert [(s["Resource"], s["Condition"]["StringLike"]["s3:prefix"]) for s in listings] == [
        (["arn:aws:s3:::bucket"], ["warehouse/t1/*", "m/*"]),
        (["arn:aws:s3:::meta"], ["iceberg/abc/*"]),
    ]


# -- GCS --------------------------------------------------------------------------------------


def test_gcs_access_boundary() -> None:
    boundary = vend_gcs.access_boundary("lake", "tables/it's")
    (rule,) = boundary["accessBoundary"]["accessBoundaryRules"]
    assert rule["availablePermissions"] == ["inRole:roles/storage.objectViewer"]
    assert rule["availableResource"] == "//storage.googleapis.com/projects/_/buckets/lake"
    assert rule["availabilityCondition"]["expression"] == (
        "resource.name.startsWith('projects/_/buckets/lake/objects/tables/it\\'s/') || "
        "api.getAttribute('storage.googleapis.com/objectListPrefix', '')"
        ".startsWith('tables/it\\'s/')"
    )
    whole = vend_gcs.access_boundary("lake", "")["accessBoundary"]["accessBoundaryRules"][0]
    assert "availabilityCondition" not in whole
    both = vend_gcs.access_boundary("lake", "t1", [("meta", "iceberg/abc")])
    table, metadata = both["accessBoundary"]["accessBoundaryRules"]
    assert (
        table == vend_gcs.access_boundary("lake", "t1")["accessBoundary"]["accessBoundaryRules"][0]
    )
    assert metadata["availableResource"] == "//storage.googleapis.com/projects/_/buckets/meta"
    assert (
        "'projects/_/buckets/meta/objects/iceberg/abc/'"
        in (metadata["availabilityCondition"]["expression"])
    )


# -- Azure: the SAS strings -------------------------------------------------------------------


def _expiry() -> dt.datetime:
    return dt.datetime.fromtimestamp(EXPIRY, dt.UTC)


def _sdk_delegation_key() -> Any:
    from azure.storage.blob import UserDelegationKey

    sdk_key = UserDelegationKey()
    sdk_key.signed_oid, sdk_key.signed_tid = "oid-1", "tid-1"
    sdk_key.signed_start, sdk_key.signed_expiry = "2030-01-01T00:00:00Z", "2030-03-01T00:00:00Z"
    sdk_key.signed_service, sdk_key.signed_version = "b", "2026-10-06"
    sdk_key.value = base64.b64encode(b"k" * 32).decode()
    return sdk_key


def _sdk_container_sas(**kwargs: Any) -> dict[str, str]:
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    token = generate_container_sas(
        AZURITE_ACCOUNT,
        "lake",
        permission=ContainerSasPermissions(read=True, list=True),
        expiry=_expiry(),
        protocol="https",
        **kwargs,
    )
    return dict(parse_qsl(token))


def _sdk_directory_sas(credential: Any) -> dict[str, str]:
    from azure.storage.filedatalake import DirectorySasPermissions, generate_directory_sas

    token = generate_directory_sas(
        AZURITE_ACCOUNT,
        "lake",
        "tables/t 1/x",
        credential=credential,
        permission=DirectorySasPermissions(read=True, list=True),
        expiry=_expiry(),
        protocol="https",
    )
    return dict(parse_qsl(token))


def _ours(key: str | DelegationKey, directory: str = "") -> dict[str, str]:
    token = vend_azure.sas_token(AZURITE_ACCOUNT, "lake", key, expiry=EXPIRY, directory=directory)
    return dict(parse_qsl(token))


def test_container_sas_is_the_sdks() -> None:
    assert _ours(AZURITE_KEY) == _sdk_container_sas(account_key=AZURITE_KEY)


def test_user_delegation_container_sas_is_the_sdks() -> None:
    sdk_key = _sdk_delegation_key()
    ours = _ours(DelegationKey.from_sdk(sdk_key))
    assert ours == _sdk_container_sas(user_delegation_key=sdk_key)


def test_directory_sas_is_the_sdks() -> None:
    ours = _ours(AZURITE_KEY, "tables/t 1/x")
    assert ours["sr"] == "d" and ours["sdd"] == "3" and ours["sp"] == "rl"
    assert ours == _sdk_directory_sas(AZURITE_KEY)


def test_user_delegation_directory_sas_is_the_sdks() -> None:
    sdk_key = _sdk_delegation_key()
    ours = _ours(DelegationKey.from_sdk(sdk_key), "tables/t 1/x")
    assert ours == _sdk_directory_sas(sdk_key)


# -- Azure: which scope a table gets ----------------------------------------------------------


def _storage(hierarchical: bool) -> AzureStorage:
    """A storage that never reaches a service (a closed port): the namespace kind is set."""
    endpoint = f"http://127.0.0.1:9/{AZURITE_ACCOUNT}"
    storage = AzureStorage(AZURITE_ACCOUNT, {"account_key": AZURITE_KEY, "endpoint": endpoint})
    vend_azure._HNS[storage] = hierarchical
    return storage


def _vend(storage: AzureStorage, table: str, requested: str) -> dict[str, str]:
    root, wanted = parse_location(table), parse_location(requested)
    assert root is not None and wanted is not None
    credentials = vend_azure.vend(storage, root, requested, wanted, 600)
    return dict(parse_qsl(credentials.values["sasToken"]))


BASE = f"abfss://lake@{AZURITE_ACCOUNT}.dfs.core.windows.net"


def test_hierarchical_namespace_scopes_to_the_requested_directory() -> None:
    storage = _storage(hierarchical=True)
    token = _vend(storage, f"{BASE}/tables/t1", f"{BASE}/tables/t1/part=1")
    assert (token["sr"], token["sdd"]) == ("d", "3")
    assert token["spr"] == "https,http"  # the endpoint is plain http
    root = _vend(storage, f"{BASE}/", f"{BASE}/tables")
    assert (root["sr"], root["sdd"]) == ("d", "1")


def test_flat_namespace_gives_a_container_sas_only_to_a_container_table() -> None:
    storage = _storage(hierarchical=False)
    token = _vend(storage, f"{BASE}/", f"{BASE}/tables/t1")
    assert token["sr"] == "c" and "sdd" not in token
    with pytest.raises(NotVendable) as info:
        _vend(storage, f"{BASE}/tables/t1", f"{BASE}/tables/t1")
    assert info.value.reason == vend_azure.FLAT_NAMESPACE
    assert "hierarchical namespace" in info.value.detail
    table = parse_location(f"{BASE}/tables/t1")
    assert table is not None
    with pytest.raises(NotVendable):
        vend_azure.check(storage, table)


def test_one_sas_is_not_stretched_over_a_second_directory() -> None:
    storage = _storage(hierarchical=True)
    table, metadata = parse_location(f"{BASE}/tables/t1"), parse_location(f"{BASE}/iceberg")
    assert table is not None and metadata is not None
    with pytest.raises(NotVendable) as info:
        vend_azure.vend(storage, table, f"{BASE}/tables/t1", table, 600, [metadata])
    assert info.value.reason == vend_azure.ONE_DIRECTORY


def test_iceberg_metadata_in_the_table_folder_shares_its_directory_sas() -> None:
    """The Iceberg catalog's Azure metadata lies in the table's folder
    (`_lakeshare_iceberg/`): one SAS of the table's directory reaches both, and nothing
    wider is signed. Azurite has no directories, so this is the SAS as signed: a
    directory SAS (`sr=d`) of the table's depth, for read and list only."""
    storage = _storage(hierarchical=True)
    table = parse_location(f"{BASE}/tables/t1")
    metadata = parse_location(f"{BASE}/tables/t1/_lakeshare_iceberg/abc")
    assert table is not None and metadata is not None
    credentials = vend_azure.vend(storage, table, f"{BASE}/tables/t1", table, 600, [metadata])
    token = dict(parse_qsl(credentials.values["sasToken"]))
    assert (token["sr"], token["sdd"], token["sp"]) == ("d", "2", "rl")
    expected = vend_azure.sas_token(
        AZURITE_ACCOUNT,
        "lake",
        AZURITE_KEY,
        expiry=credentials.expiration_ms // 1000,
        directory="tables/t1",
        protocol=token["spr"],
    )
    assert credentials.values["sasToken"] == expected  # signed for tables/t1, nothing more
    # Flat namespace: the container SAS of a table that is the whole container.
    flat = _storage(hierarchical=False)
    own = parse_location(f"{BASE}/")
    inside = parse_location(f"{BASE}/_lakeshare_iceberg/abc")
    assert own is not None and inside is not None
    vended = vend_azure.vend(flat, own, f"{BASE}/", own, 600, [inside])
    assert dict(parse_qsl(vended.values["sasToken"]))["sr"] == "c"

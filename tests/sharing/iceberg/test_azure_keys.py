"""The FileIO properties `loadTable` gives for a vended Azure SAS, as PyIceberg 0.12's
fsspec FileIO (adlfs) turns them into a filesystem: on Azure's public endpoint the
account-qualified key alone names the account and the SAS; on any other endpoint the
connection string names it. No request is made (adlfs builds its client offline); the
reading itself is tests/cloud/test_iceberg_cloud_azure.py against Azurite."""

from __future__ import annotations

from typing import Any

from deltalog.storage.azure import AzureStorage
from sharing.credentials import TemporaryCredentials
from sharing.iceberg.catalog import _cloud_config
from tests.support.requirements import require

SAS = "se=2030-01-01T00%3A00%3A00Z&sp=rl&sv=2026-10-06&sr=c&sig=abc%3D"
KEY = "a2V5"  # any base64 account key: nothing is signed here


def _config(storage: AzureStorage) -> dict[str, str]:
    credentials = TemporaryCredentials(
        location="abfss://c@acct.dfs.core.windows.net/t",
        field="azureUserDelegationSas",
        values={"sasToken": SAS},
        expiration_ms=1_900_000_000_000,
    )
    return _cloud_config(storage, credentials)


def _filesystem(config: dict[str, str]) -> Any:
    try:
        import adlfs  # noqa: F401
    except ImportError:
        require(False, "adlfs (the dev extra)")
    from pyiceberg.io.fsspec import FsspecFileIO

    io = FsspecFileIO(dict(config))
    return io.new_input("abfss://c@acct.dfs.core.windows.net/t/x.parquet")._fs


def test_public_endpoint_needs_the_account_qualified_key_only() -> None:
    config = _config(AzureStorage("acct", {"account_key": KEY}))
    assert config == {
        "adls.account-name": "acct",
        "adls.sas-token.acct.dfs.core.windows.net": SAS,
        "adls.sas-token-expires-at-ms.acct.dfs.core.windows.net": "1900000000000",
    }
    fs = _filesystem(config)
    assert fs.account_name == "acct"
    assert fs.account_url == "https://acct.blob.core.windows.net"
    assert fs.sas_token == "?" + SAS
    assert fs.account_key is None and fs.connection_string is None


def test_another_endpoint_goes_in_a_connection_string() -> None:
    endpoint = "https://acct.privatelink.blob.core.windows.net"
    storage = AzureStorage("acct", {"account_key": KEY, "endpoint": endpoint})
    config = _config(storage)
    expected = f"BlobEndpoint={endpoint};SharedAccessSignature={SAS}"
    assert config["adls.connection-string"] == expected
    fs = _filesystem(config)
    assert fs.connection_string == expected
    client = fs.service_client
    assert client.url.startswith(endpoint)
    # A national cloud's default endpoint is not adlfs's default either.
    china = AzureStorage("acct", {"account_key": KEY}, endpoint_suffix="core.chinacloudapi.cn")
    assert _config(china)["adls.connection-string"].startswith(
        "BlobEndpoint=https://acct.blob.core.chinacloudapi.cn;"
    )
    assert "adls.sas-token.acct.dfs.core.chinacloudapi.cn" in _config(china)

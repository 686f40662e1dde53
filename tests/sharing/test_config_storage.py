"""Per-table storage options in the YAML: profiles, overrides, environment references and
the key checks (against the backend of the table's cloud)."""

from __future__ import annotations

from typing import Any

import pytest

from sharing.config import ConfigError, parse_config
from sharing.tables import TableService

SECRET = "0123456789abcdef0123"


def _config(table: dict[str, Any], env: dict[str, str] | None = None, **top: Any) -> Any:
    document = {
        "version": 1,
        "signingSecret": SECRET,
        "shares": [{"name": "s", "schemas": [{"name": "x", "tables": [table]}]}],
        **top,
    }
    return parse_config(document, environ=env or {})


def _table(config: Any) -> Any:
    return config.shares[0].schemas[0].tables[0]


def test_profile_and_table_options_merge_with_the_table_winning() -> None:
    config = _config(
        {
            "name": "t",
            "location": "s3a://b/t",
            "storageProfile": "lake",
            "storage": {"region": "us-west-2", "pathStyle": "${PATH_STYLE}"},
        },
        {"AK": "key-id", "SK": "secret", "PATH_STYLE": "true"},
        storageProfiles={
            "lake": {
                "region": "eu-west-1",
                "accessKeyId": "${AK}",
                "secretAccessKey": "${SK}",
                "roleArn": "${ROLE:-}",
            }
        },
    )
    assert _table(config).storage_options() == {
        "access_key_id": "key-id",
        "secret_access_key": "secret",
        "region": "us-west-2",
        "path_style": "true",
    }
    assert config.warnings == ()
    assert "secret" not in repr(_table(config))


def test_unknown_keys_name_their_path() -> None:
    with pytest.raises(ConfigError) as info:
        _config({"name": "t", "location": "gs://b/t", "storage": {"endpointUrl": "http://x"}})
    assert info.value.path == "shares[0].schemas[0].tables[0].storage.endpointUrl"
    assert "unknown GCS storage option" in info.value.message
    with pytest.raises(ConfigError) as info:
        _config(
            {"name": "t", "location": "s3://b/t", "storageProfile": "p"},
            storageProfiles={"p": {"regoin": "x"}},
        )
    assert info.value.path == "storageProfiles.p.regoin"
    assert "did you mean 'region'" in info.value.message


def test_backend_validation_and_profile_errors() -> None:
    with pytest.raises(ConfigError) as info:
        _config(
            {"name": "t", "location": "s3://b/t", "storage": {"accessKeyId": "${AK}"}}, {"AK": "a"}
        )
    assert "secret_access_key" in info.value.message
    with pytest.raises(ConfigError) as info:
        _config({"name": "t", "location": "s3://b/t", "storageProfile": "nope"})
    assert info.value.path.endswith("storageProfile")
    with pytest.raises(ConfigError) as info:
        _config({"name": "t", "location": "/local/t", "storage": {"region": "x"}})
    assert "s3://" in info.value.message
    with pytest.raises(ConfigError) as info:
        _config({"name": "t", "location": "s3://b/t", "storage": {"region": ["x"]}})
    assert info.value.path.endswith("storage.region")


def test_inline_secrets_and_unused_profiles_are_warnings() -> None:
    config = _config(
        {
            "name": "t",
            "location": "abfss://c@acct.dfs.core.windows.net/t",
            "storage": {"accountKey": "aW5saW5l"},
        },
        storageProfiles={"spare": {"region": "x"}},
    )
    assert any("storage.accountKey" in w and "inline" in w for w in config.warnings)
    assert any("storageProfiles.spare" in w for w in config.warnings)
    assert "aW5saW5l" not in " ".join(config.warnings)
    with pytest.raises(ConfigError):
        _config(
            {
                "name": "t",
                "location": "gs://b/t",
                "storage": {"hmacAccessId": "a", "hmacSecret": "s"},
            },
            strict=True,
        )


def test_table_service_opens_tables_with_their_options() -> None:
    from sharing.catalog import Catalog
    from sharing.tokens import TokenCodec

    config = _config(
        {
            "name": "t",
            "location": "s3a://b/warehouse/t/",
            "storage": {"endpointUrl": "http://127.0.0.1:9", "pathStyle": True, "region": "x"},
        }
    )
    shared = Catalog(config, TokenCodec(SECRET.encode())).get_table("s", "x", "t")
    table = TableService(config).delta_table(shared)
    assert table.table_root == "b/warehouse/t"
    assert table.storage.options.endpoint_url == "http://127.0.0.1:9"  # type: ignore[attr-defined]

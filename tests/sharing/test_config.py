"""Configuration loading: the reference format unchanged, its defaults and messages, and our
additions (env references, unknown-key warnings, strict mode, signing secret)."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

import pytest

from sharing.config import (
    NO_AUTHORIZATION_WARNING,
    SIGNING_SECRET_ENV,
    AuthorizationConfig,
    ConfigError,
    SchemaConfig,
    ServerConfig,
    ShareConfig,
    SslConfig,
    TableConfig,
    default_table_id,
    load_config,
    parse_config,
)
from tests.support import REPO_ROOT

SECRET = "0123456789abcdef0123"

# The reference server's delta-sharing-server.yaml.template, as a provider would have it.
REFERENCE_TEMPLATE = """\
# The format version of this config file
version: 1
# Config shares/schemas/tables to share
shares:
- name: "share1"
  schemas:
  - name: "schema1"
    tables:
    - name: "table1"
      # S3. See https://github.com/delta-io/delta-sharing#s3 for how to config the credentials
      location: "s3a://<bucket-name>/<the-table-path>"
      id: "00000000-0000-0000-0000-000000000000"
    - name: "table2"
      # Azure Blob Storage. See https://github.com/delta-io/delta-sharing#azure-blob-storage
      location: "wasbs://<container-name>@<account-name}.blob.core.windows.net/<the-table-path>"
      id: "00000000-0000-0000-0000-000000000001"
- name: "share2"
  schemas:
  - name: "schema2"
    tables:
    - name: "table3"
      # Azure Data Lake Storage Gen2.
      location: "abfss://<container-name>@<account-name}.dfs.core.windows.net/<the-table-path>"
      historyShared: true
      id: "00000000-0000-0000-0000-000000000002"
- name: "share3"
  schemas:
  - name: "schema3"
    tables:
    - name: "table4"
      # Google Cloud Storage (GCS).
      location: "gs://<bucket-name>/<the-table-path>"
      id: "00000000-0000-0000-0000-000000000003"
- name: "share4"
  schemas:
  - name: "schema4"
    tables:
    - name: "table5"
      # Cloudflare R2.
      location: "s3a://<bucket-name>/<the-table-path>"
      id: "00000000-0000-0000-0000-000000000004"
# Set the host name that the server will use
host: "localhost"
# Set the port that the server will listen on. Note: using ports below 1024
# may require a privileged user in some operating systems.
port: 8080
# Set the url prefix for the REST APIs
endpoint: "/delta-sharing"
# Set the timeout of S3 presigned url in seconds
preSignedUrlTimeoutSeconds: 3600
# Set the timeout of temporary credentials in seconds
temporaryCredentialValiditySeconds: 3600
# How many tables to cache in the server
deltaTableCacheSize: 10
# Whether we can accept working with a stale version of the table.
stalenessAcceptable: false
# Whether to evaluate user provided `predicateHints`
evaluatePredicateHints: false
# Whether to evaluate user provided `jsonPredicateHints`
evaluateJsonPredicateHints: true
# Whether to evaluate user provided `jsonPredicateHints` with V2 evaluator
evaluateJsonPredicateHintsV2: true
# The maximum page size permitted by queryTable/queryTableChanges API.
queryTablePageSizeLimit: 10000
# The TTL of the page token generated in queryTable/queryTableChanges API (in milliseconds).
queryTablePageTokenTtlMs: 259200000
# The TTL of the refresh token generated in queryTable API (in milliseconds).
refreshTokenTtlMs: 3600000
"""


def parse(raw: dict[str, Any], **env: str) -> ServerConfig:
    return parse_config(raw, environ=env)


def minimal(**extra: Any) -> dict[str, Any]:
    return {"version": 1, **extra}


def table_doc(**fields: Any) -> dict[str, Any]:
    """`shares` holding one table with `fields` (spread into `minimal(...)` or used alone)."""
    return {
        "version": 1,
        "shares": [{"name": "s", "schemas": [{"name": "d", "tables": [fields]}]}],
    }


def error_of(raw: Any, **env: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(raw, environ=env)
    return info.value


# --- the reference format -------------------------------------------------------------------


def test_version_alone_is_a_valid_config_with_all_defaults() -> None:
    config = parse({"version": 1})
    assert config.version == 1
    assert config.shares == ()
    assert config.authorization is None
    assert config.ssl is None
    assert config.host == "localhost"
    assert config.port == 80
    assert config.endpoint == "/delta-sharing"
    assert config.pre_signed_url_timeout_seconds == 3600
    assert config.temporary_credential_validity_seconds == 3600
    assert config.delta_table_cache_size == 10
    assert config.staleness_acceptable is False
    assert config.evaluate_predicate_hints is False
    assert config.evaluate_json_predicate_hints is True
    assert config.evaluate_json_predicate_hints_v2 is True
    assert config.request_timeout_seconds == 30
    assert config.query_table_page_size_limit == 10_000
    assert config.query_table_page_token_ttl_ms == 259_200_000
    assert config.refresh_token_ttl_ms == 3_600_000
    assert config.public_url is None
    assert config.log_level == "INFO"
    assert config.strict is False


def test_reference_template_loads_to_the_expected_objects(tmp_path: Path) -> None:
    path = tmp_path / "delta-sharing-server.yaml"
    path.write_text(REFERENCE_TEMPLATE)
    config = load_config(path, environ={SIGNING_SECRET_ENV: SECRET})
    assert config.warnings == ()
    assert [share.name for share in config.shares] == ["share1", "share2", "share3", "share4"]
    assert config.shares[0] == ShareConfig(
        name="share1",
        schemas=(
            SchemaConfig(
                name="schema1",
                tables=(
                    TableConfig(
                        name="table1",
                        location="s3a://<bucket-name>/<the-table-path>",
                        id="00000000-0000-0000-0000-000000000000",
                    ),
                    TableConfig(
                        name="table2",
                        location="wasbs://<container-name>@<account-name}.blob.core.windows.net"
                        "/<the-table-path>",
                        id="00000000-0000-0000-0000-000000000001",
                    ),
                ),
            ),
        ),
    )
    table3 = config.shares[1].schemas[0].tables[0]
    assert table3.history_shared is True
    assert table3.start_version == 0
    assert config.host == "localhost"
    assert config.port == 8080
    assert config.endpoint == "/delta-sharing"
    assert config.query_table_page_size_limit == 10_000


def test_authorization_and_ssl_blocks_are_parsed() -> None:
    config = parse(
        minimal(
            authorization={"bearerToken": "dapi0123456789abcdef"},
            ssl={
                "selfSigned": False,
                "certificateFile": "/c.pem",
                "certificateKeyFile": "/k.pem",
                "certificatePasswordFile": "/p.txt",
            },
        )
    )
    assert config.authorization == AuthorizationConfig(bearer_token="dapi0123456789abcdef")
    assert config.ssl == SslConfig(
        self_signed=False,
        certificate_file="/c.pem",
        certificate_key_file="/k.pem",
        certificate_password_file="/p.txt",
    )
    assert parse(minimal(ssl={"selfSigned": True})).ssl == SslConfig(self_signed=True)


def test_secrets_are_not_in_reprs() -> None:
    config = parse(minimal(authorization={"bearerToken": "dapi-very-secret"}))
    assert "dapi-very-secret" not in repr(config)
    assert SECRET not in repr(parse(minimal(signingSecret=SECRET)))


def test_table_fields_and_defaults() -> None:
    config = parse(
        table_doc(name="t", location="/data/t", id="abc", historyShared=True, startVersion=3)
    )
    assert config.shares[0].schemas[0].tables[0] == TableConfig(
        name="t", location="/data/t", id="abc", history_shared=True, start_version=3
    )


def test_missing_table_id_is_a_stable_uuid5_of_the_lowercased_name() -> None:
    config = parse(
        {
            "version": 1,
            "shares": [
                {
                    "name": "Share1",
                    "schemas": [{"name": "Default", "tables": [{"name": "T", "location": "/x"}]}],
                }
            ],
        }
    )
    table_id = config.shares[0].schemas[0].tables[0].id
    assert table_id == str(uuid.uuid5(uuid.NAMESPACE_URL, "share1.default.t"))
    assert table_id == default_table_id("SHARE1", "default", "t")
    assert uuid.UUID(table_id).version == 5


# --- reference validation messages ----------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({}, "'version' must be provided"),
        ({"shares": []}, "'version' must be provided"),
        ({"version": 0}, "'version' must be greater than 0"),
        ({"version": -1}, "'version' must be greater than 0"),
        (
            {"version": 100},
            "The 'version' in the server config is 100 which is too new. The current release "
            "supports version 1 and below. Please upgrade to a newer release.",
        ),
    ],
)
def test_version_messages(raw: dict[str, Any], message: str) -> None:
    assert str(error_of(raw)) == message


def test_share_schema_table_required_fields() -> None:
    err = error_of(minimal(shares=[{"schemas": []}]))
    assert (err.message, err.path) == ("'name' in a share must be provided", "shares[0]")
    err = error_of(minimal(shares=[{"name": "a"}, {"name": "b", "schemas": [{"tables": []}]}]))
    assert (err.message, err.path) == (
        "'name' in a schema must be provided",
        "shares[1].schemas[0]",
    )
    err = error_of(table_doc(location="/x"))
    assert err.message == "'name' in a table must be provided"
    assert err.path == "shares[0].schemas[0].tables[0]"
    assert str(err) == "shares[0].schemas[0].tables[0]: 'name' in a table must be provided"
    err = error_of(table_doc(name="t"))
    assert err.message == "'location' in a table must be provided"


def test_authorization_requires_a_bearer_token() -> None:
    for auth in ({}, {"bearerToken": ""}, {"bearerToken": None}):
        err = error_of(minimal(authorization=auth))
        assert err.message == "'bearerToken' in 'authorization' must be provided"
        assert err.path == "authorization"


def test_ssl_requires_certificate_files_unless_self_signed() -> None:
    err = error_of(minimal(ssl={"certificateKeyFile": "/k"}))
    assert err.message == "'certificateFile' in a SSL config must be provided"
    err = error_of(minimal(ssl={"selfSigned": False, "certificateFile": "/c"}))
    assert err.message == "'certificateKeyFile' in a SSL config must be provided"


def test_file_must_be_yaml(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("version: 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == "The server config file must be a yml or yaml file"
    yml = tmp_path / "config.yml"
    yml.write_text("version: 1\n")
    assert load_config(yml, environ={}).version == 1


def test_unreadable_and_invalid_yaml_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: [1\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n")
    with pytest.raises(ConfigError, match="must be a YAML mapping"):
        load_config(listing)


# --- our own validation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("port", -1, "'port' must be between 0 and 65535, got -1"),
        ("port", 70000, "'port' must be between 0 and 65535"),
        ("port", "eighty", "'port' must be an integer"),
        ("port", True, "'port' must be an integer"),
        ("preSignedUrlTimeoutSeconds", 0, "'preSignedUrlTimeoutSeconds' must be positive"),
        ("deltaTableCacheSize", -1, "'deltaTableCacheSize' must be non-negative"),
        ("requestTimeoutSeconds", -5, "'requestTimeoutSeconds' must be non-negative"),
        ("queryTablePageSizeLimit", 0, "'queryTablePageSizeLimit' must be positive"),
        ("queryTablePageTokenTtlMs", -1, "'queryTablePageTokenTtlMs' must be non-negative"),
        ("refreshTokenTtlMs", -1, "'refreshTokenTtlMs' must be non-negative"),
        ("stalenessAcceptable", "maybe", "'stalenessAcceptable' must be true or false"),
        ("endpoint", "delta-sharing", "'endpoint' must be a URL path starting with '/'"),
        ("publicUrl", "ftp://x", "'publicUrl' must be an absolute http(s) URL"),
        ("publicUrl", "https://x/?a=1", "'publicUrl' must be an absolute http(s) URL"),
        ("logLevel", "LOUD", "'logLevel' must be one of DEBUG, INFO"),
        ("host", ["a"], "'host' must be a string"),
        ("shares", {"name": "x"}, "'shares' must be a list"),
        ("authorization", "token", "'authorization' must be a mapping"),
    ],
)
def test_invalid_values_name_the_key(key: str, value: Any, fragment: str) -> None:
    err = error_of(minimal(**{key: value}))
    assert fragment in err.message
    assert err.path == key


def test_nested_invalid_values_carry_the_full_path() -> None:
    err = error_of(table_doc(name="t", location="/x", startVersion=-1))
    assert err.path == "shares[0].schemas[0].tables[0].startVersion"
    assert "'startVersion' must be a non-negative integer, got -1" in err.message
    err = error_of(table_doc(name="t", location="/x", historyShared="yes please"))
    assert err.path == "shares[0].schemas[0].tables[0].historyShared"
    err = error_of(minimal(shares=["oops"]))
    assert err.path == "shares[0]"


def test_numbers_and_booleans_as_strings_are_accepted() -> None:
    config = parse(minimal(port="8080", stalenessAcceptable="TRUE", version="1"))
    assert (config.port, config.staleness_acceptable, config.version) == (8080, True, 1)


def test_endpoint_and_public_url_are_normalised() -> None:
    config = parse(minimal(endpoint="/api/sharing/", publicUrl="https://x.example.com/base/"))
    assert config.endpoint == "/api/sharing"
    assert config.public_url == "https://x.example.com/base"
    assert parse(minimal(endpoint="/")).endpoint == ""


def test_duplicate_names_are_errors_case_insensitively() -> None:
    err = error_of(minimal(shares=[{"name": "a"}, {"name": "A"}]))
    assert err.path == "shares[1]"
    assert "duplicate share name 'A'" in err.message
    err = error_of(minimal(shares=[{"name": "a", "schemas": [{"name": "x"}, {"name": "X"}]}]))
    assert err.path == "shares[0].schemas[1]"
    doc = table_doc(name="t", location="/x")
    doc["shares"][0]["schemas"][0]["tables"].append({"name": "T", "location": "/y"})
    err = error_of(doc)
    assert err.path == "shares[0].schemas[0].tables[1]"


def test_temporary_credential_validity_non_positive_resets_to_default(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, "lakeshare.config"):
        config = parse(minimal(temporaryCredentialValiditySeconds=0))
    assert config.temporary_credential_validity_seconds == 3600
    assert "temporaryCredentialValiditySeconds" in caplog.text


# --- unknown keys and strict mode -------------------------------------------------------------


def test_unknown_keys_warn_with_their_full_path(caplog: pytest.LogCaptureFixture) -> None:
    doc = table_doc(name="t", locaton="/typo", location="/x")
    doc["shares"][0]["comment"] = "ok"
    with caplog.at_level(logging.WARNING, "lakeshare.config"):
        config = parse({**doc, "useKernel": True, "signingSecret": SECRET})
    assert config.shares[0].schemas[0].tables[0].location == "/x"
    text = "\n".join(config.warnings)
    assert "'useKernel'" in text
    assert "'shares[0].comment'" in text
    assert "'shares[0].schemas[0].tables[0].locaton'" in text
    assert "did you mean 'location'?" in text
    assert "shares[0].schemas[0].tables[0].locaton" in caplog.text
    assert len(config.warnings) == 3


def test_strict_mode_turns_warnings_into_errors() -> None:
    doc = table_doc(name="t", locaton="/typo", location="/x")
    err = error_of({**doc, "strict": True, "signingSecret": SECRET})
    assert err.path == "shares[0].schemas[0].tables[0].locaton"
    assert "unknown configuration key" in err.message
    with pytest.raises(ConfigError) as info:
        parse_config(minimal(signingSecret=SECRET, extra=1), strict=True, environ={})
    assert info.value.path == "extra"
    # The argument overrides the file's own setting.
    config = parse_config(minimal(strict=True, extra=1, signingSecret=SECRET), strict=False)
    assert config.strict is False
    err = error_of(minimal(strict=True))
    assert err.path == "signingSecret"


def test_strict_mode_accepts_a_clean_config() -> None:
    config = parse({**table_doc(name="t", location="/x"), "strict": True, "signingSecret": SECRET})
    assert config.strict is True
    assert config.warnings == ()


def test_duplicate_table_ids_warn() -> None:
    doc = table_doc(name="t", location="/x", id="same")
    doc["shares"][0]["schemas"][0]["tables"].append({"name": "u", "location": "/y", "id": "same"})
    config = parse({**doc, "signingSecret": SECRET})
    assert any("have the same id 'same'" in warning for warning in config.warnings)


# --- environment references -----------------------------------------------------------------


def test_environment_references_in_strings() -> None:
    config = parse(
        {
            **table_doc(name="t", location="s3a://${BUCKET}/t", id="$${literal}"),
            "authorization": {"bearerToken": "${TOKEN}"},
            "host": "${HOST:-0.0.0.0}",
            "port": "${PORT}",
            "endpoint": "/${PREFIX}/api",
        },
        TOKEN="from-the-environment",
        PORT="9000",
        PREFIX="ds",
        BUCKET="b1",
    )
    assert config.authorization == AuthorizationConfig(bearer_token="from-the-environment")
    assert config.host == "0.0.0.0"
    assert config.port == 9000
    assert config.endpoint == "/ds/api"
    table = config.shares[0].schemas[0].tables[0]
    assert table.location == "s3a://b1/t"
    assert table.id == "${literal}"


def test_missing_environment_variable_is_an_error_with_the_path() -> None:
    err = error_of(minimal(authorization={"bearerToken": "${NOT_SET_ANYWHERE}"}))
    assert err.path == "authorization.bearerToken"
    assert err.message == "environment variable 'NOT_SET_ANYWHERE' is not set"


# --- signing secret -------------------------------------------------------------------------


def test_signing_secret_from_config_env_or_generated(caplog: pytest.LogCaptureFixture) -> None:
    config = parse(minimal(signingSecret="${S}"), S=SECRET)
    assert (config.signing_secret, config.signing_secret_source) == (SECRET.encode(), "config")
    config = parse(minimal(), **{SIGNING_SECRET_ENV: SECRET})
    assert (config.signing_secret, config.signing_secret_source) == (SECRET.encode(), "env")
    with caplog.at_level(logging.WARNING, "lakeshare.config"):
        first = parse(minimal())
        second = parse(minimal())
    assert first.signing_secret_source == "generated"
    assert len(first.signing_secret) == 32
    assert first.signing_secret != second.signing_secret
    assert "several replicas" in caplog.text


def test_short_signing_secrets_are_rejected() -> None:
    err = error_of(minimal(signingSecret="short"))
    assert err.path == "signingSecret"
    assert "at least 16 characters" in err.message
    err = error_of(minimal(), **{SIGNING_SECRET_ENV: "short"})
    assert err.path == SIGNING_SECRET_ENV


def test_example_config_in_the_repo_loads_cleanly() -> None:
    env = {"LAKESHARE_BEARER_TOKEN": "t" * 24, SIGNING_SECRET_ENV: SECRET}
    config = load_config(REPO_ROOT / "config.example.yaml", environ=env)
    assert config.warnings == ()
    assert config.authorization == AuthorizationConfig(bearer_token="t" * 24)
    assert config.signing_secret == SECRET.encode()
    assert config.port == 8080
    assert sum(len(schema.tables) for share in config.shares for schema in share.schemas) == 6


# --- tokens, names and open access (issue 11) -------------------------------------------------


@pytest.mark.parametrize(
    ("token", "fragment"),
    [
        ("a", "'bearerToken' must be at least 16 characters, got 1"),
        ("0123456789abcde", "'bearerToken' must be at least 16 characters, got 15"),
        ("   ", "'bearerToken' must not be only whitespace"),
        ("\t\n", "'bearerToken' must not be only whitespace"),
        (" 0123456789abcdef", "'bearerToken' must not begin or end with whitespace"),
        ("0123456789abcdef\n", "'bearerToken' must not begin or end with whitespace"),
    ],
)
def test_weak_or_unusable_bearer_tokens_are_errors(token: str, fragment: str) -> None:
    err = error_of(minimal(authorization={"bearerToken": token}))
    assert err.path == "authorization.bearerToken"
    assert fragment in err.message
    # The same rule for a token taken from the environment.
    err = error_of(minimal(authorization={"bearerToken": "${TOKEN}"}), TOKEN=token)
    assert (err.path, fragment in err.message) == ("authorization.bearerToken", True)


def test_token_errors_do_not_echo_the_token() -> None:
    for token in ("Sekr1t-Tok3n", " Sekr1t-Tok3n-0123456789 "):
        assert "Sekr1t" not in str(error_of(minimal(authorization={"bearerToken": token})))


def test_a_sixteen_character_token_is_enough() -> None:
    config = parse(minimal(authorization={"bearerToken": "0123456789abcdef"}))
    assert config.authorization == AuthorizationConfig(bearer_token="0123456789abcdef")


def _named(share: str = "s", schema: str = "d", table: str = "t") -> dict[str, Any]:
    return minimal(
        shares=[
            {
                "name": share,
                "schemas": [{"name": schema, "tables": [{"name": table, "location": "/x"}]}],
            }
        ]
    )


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("s/1", "contains '/'"),
        ("what?", "contains '?'"),
        ("a#b", "contains '#'"),
        ("100%", "contains '%'"),
        ("tab\there", "contains a control character"),
        ("nul\x00", "contains a control character"),
        ("del\x7f", "contains a control character"),
        (".", "is a relative path step"),
        ("..", "is a relative path step"),
    ],
)
@pytest.mark.parametrize(
    ("level", "path"),
    [
        ("share", "shares[0].name"),
        ("schema", "shares[0].schemas[0].name"),
        ("table", "shares[0].schemas[0].tables[0].name"),
    ],
)
def test_names_that_cannot_be_one_url_path_segment_are_errors(
    name: str, reason: str, level: str, path: str
) -> None:
    err = error_of(_named(**{level: name}))
    assert err.path == path
    assert err.message.startswith("'name' must fit in one URL path segment: ")
    assert err.message.endswith(reason)


@pytest.mark.parametrize(
    ("level", "path"),
    [
        ("share", "shares[0].name"),
        ("schema", "shares[0].schemas[0].name"),
        ("table", "shares[0].schemas[0].tables[0].name"),
    ],
)
def test_names_longer_than_the_store_holds_are_errors(level: str, path: str) -> None:
    """Grants, store shares and async queries keep names (and table ids) in 255-character
    columns: a longer name would load, then fail there (PostgreSQL refuses the value)."""
    assert parse_config(_named(**{level: "n" * 255}), environ={}).shares  # loads
    err = error_of(_named(**{level: "n" * 256}))
    assert err.path == path
    assert err.message == "'name' must be at most 255 characters, got 256"


def test_a_table_id_longer_than_the_store_holds_is_an_error() -> None:
    err = error_of(table_doc(name="t", location="/x", id="i" * 256))
    assert err.path == "shares[0].schemas[0].tables[0].id"
    assert err.message == "'id' must be at most 255 characters, got 256"


def test_empty_names_keep_the_reference_message() -> None:
    err = error_of(_named(share=""))
    assert (err.message, err.path) == ("'name' in a share must be provided", "shares[0]")
    err = error_of(_named(table="${EMPTY:-}"))
    assert err.message == "'name' in a table must be provided"


def test_names_that_fit_a_path_segment_are_listed_and_reachable() -> None:
    """The rule rejects only what cannot work: names with spaces, dots, unicode or other
    punctuation load and are reachable through the real app (percent-encoded)."""
    from urllib.parse import quote

    from fastapi.testclient import TestClient

    from app.main import create_app

    names = ["a b", "x.y", "...", "ünïcödé", "a+b=c", "semi;colon", "quote'd"]
    doc = minimal(
        signingSecret=SECRET,
        authorization={"bearerToken": "a-token-for-the-names-test"},
        shares=[{"name": name, "schemas": [{"name": name}]} for name in names],
    )
    client = TestClient(create_app(parse(doc)))
    headers = {"Authorization": "Bearer a-token-for-the-names-test"}
    listed = client.get("/delta-sharing/shares", headers=headers).json()["items"]
    assert [item["name"] for item in listed] == names
    for name in names:
        response = client.get(f"/delta-sharing/shares/{quote(name, safe='')}", headers=headers)
        assert response.status_code == 200, (name, response.text)
        assert response.json()["share"]["name"] == name
        response = client.get(
            f"/delta-sharing/shares/{quote(name, safe='')}/schemas", headers=headers
        )
        assert [item["name"] for item in response.json()["items"]] == [name]


def test_no_authorization_is_a_loud_warning_at_load(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "lakeshare.config"):
        config = parse(minimal(signingSecret=SECRET))
    [record] = [r for r in caplog.records if NO_AUTHORIZATION_WARNING in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert "NO AUTHORIZATION" in record.getMessage()
    # Open access can be deliberate (an authenticating proxy in front): it is announced at
    # every load, but it is not a mistake in the file, so strict mode still loads it.
    assert config.warnings == ()
    assert parse(minimal(signingSecret=SECRET, strict=True)).authorization is None
    caplog.clear()
    with caplog.at_level(logging.WARNING, "lakeshare.config"):
        parse(minimal(signingSecret=SECRET, authorization={"bearerToken": "t" * 16}))
    assert NO_AUTHORIZATION_WARNING not in caplog.text


def test_lakeshare_serve_prints_the_no_authorization_warning(tmp_path: Path) -> None:
    """The real CLI: the warning is on stderr before the server binds (the port is taken, so
    the process exits by itself right after loading the config)."""
    import json
    import socket
    import subprocess
    import sys

    path = tmp_path / "open.yaml"
    path.write_text(json.dumps({"version": 1, "signingSecret": SECRET, "host": "127.0.0.1"}))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = str(busy.getsockname()[1])
        result = subprocess.run(
            [sys.executable, "-m", "app.cli", "serve", "--config", str(path), "--port", port],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO_ROOT,
        )
    assert result.returncode == 1, result.stderr
    [line] = [line for line in result.stderr.splitlines() if "NO AUTHORIZATION" in line]
    record = json.loads(line)
    assert record["level"] == "WARNING"
    assert NO_AUTHORIZATION_WARNING in record["msg"]


def test_an_azure_iceberg_metadata_location_is_refused_for_the_table_folder_setting() -> None:
    """A metadata location outside an Azure table cannot share its SAS (one directory):
    the configuration says so and names the setting that works."""
    azure = "abfss://meta@acct.dfs.core.windows.net/lakeshare-iceberg"
    err = error_of(minimal(iceberg={"metadataLocation": ["s3://b/x", azure]}))
    assert err.path.startswith("iceberg.metadataLocation")
    assert "azureMetadataInTableFolder" in err.message
    config = parse_config(
        minimal(iceberg={"metadataLocation": "s3://b/x", "azureMetadataInTableFolder": True}),
        environ={},
    )
    assert config.iceberg.azure_metadata_in_table_folder is True
    assert config.iceberg.metadata_location == ("s3://b/x",)

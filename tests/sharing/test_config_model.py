"""The configuration models themselves: every key they declare is documented in
config.example.yaml and loads from it, defaults survive a round trip through the YAML form,
models are immutable, and a new setting or section needs no code beyond its declaration."""

from __future__ import annotations

import logging
import re
from typing import Any

import pydantic
import pytest
import yaml

from deltalog.storage.kinds import StorageKind
from sharing import storage_options
from sharing.config import (
    SIGNING_SECRET_ENV,
    ConfigError,
    ServerConfig,
    TableConfig,
    load_config,
    parse_config,
)
from sharing.config.context import LoadContext
from sharing.config.document import prepare, section_in
from sharing.config.loading import validate
from sharing.config.values import Positive, Section, Text
from tests.support import REPO_ROOT

SECRET = "0123456789abcdef0123"
EXAMPLE = REPO_ROOT / "config.example.yaml"
EXAMPLE_ENV = {"LAKESHARE_BEARER_TOKEN": "t" * 24, SIGNING_SECRET_ENV: SECRET}


def _sections(section: type[Section] = ServerConfig) -> dict[str, type[Section]]:
    """Every section reachable from `section`, by the path of its key ("" for the root)."""
    found: dict[str, type[Section]] = {"": section}
    for key, field in section.document_fields().items():
        nested = section_in(field.annotation)
        if nested is not None:
            for path, inner in _sections(nested[0]).items():
                found[f"{key}.{path}" if path else key] = inner
    return found


def _document_keys() -> set[str]:
    return {key for section in _sections().values() for key in section.document_fields()}


# --- the example documents every key, and what it documents loads ---------------------------


def test_every_key_of_the_models_is_documented_in_the_example() -> None:
    text = EXAMPLE.read_text()
    missing = sorted(key for key in _document_keys() if not re.search(rf"\b{key}:", text))
    assert missing == [], f"document these keys in config.example.yaml: {missing}"


def test_every_storage_option_of_every_cloud_is_documented_in_the_example() -> None:
    text = EXAMPLE.read_text()
    for kind in (StorageKind.S3, StorageKind.GCS, StorageKind.AZURE):
        missing = [
            key for key in storage_options.option_names(kind) if not re.search(rf"\b{key}\b", text)
        ]
        assert missing == [], f"{kind} options missing from config.example.yaml: {missing}"


def _uncommented_example() -> str:
    """The example with its commented-out settings (`# publicUrl: ...`, the `# ssl:` block)
    turned on; prose comments that happen to start with a word and a colon stay comments."""
    keys = _document_keys()
    pattern = re.compile(r"^(\s*)# ?(\s*)([A-Za-z][A-Za-z0-9]*):(\s.*)?$")

    def uncomment(line: str) -> str:
        match = pattern.match(line)
        if match is None or match.group(3) not in keys:
            return line
        return f"{match.group(1)}{match.group(2)}{match.group(3)}:{match.group(4) or ''}"

    return "\n".join(uncomment(line) for line in EXAMPLE.read_text().splitlines())


def test_the_example_with_every_documented_setting_turned_on_loads_strictly() -> None:
    text = _uncommented_example()
    raw = yaml.safe_load(text)
    assert {"ssl", "publicUrl", "asyncQueryStateDir"} <= set(raw)
    config = parse_config(raw, environ=EXAMPLE_ENV, strict=True)
    assert config.warnings == ()
    assert config.ssl is not None
    assert config.ssl.certificate_file == "/etc/lakeshare/tls.crt"
    assert config.ssl.certificate_password_file == "/etc/lakeshare/tls.pass"
    assert config.public_url == "https://sharing.example.com"
    assert config.async_query_state_dir == "/var/lib/lakeshare/async-queries"
    set_in_file = {key for key in raw if raw[key] is not None}
    assert set_in_file == set(ServerConfig.document_fields()), "a top-level key is not shown"


def test_the_example_file_loads_with_its_storage_profiles() -> None:
    config = load_config(EXAMPLE, environ=EXAMPLE_ENV)
    tables = {t.name: t for s in config.shares for d in s.schemas for t in d.tables}
    assert tables["table1"].storage_options() == {"region": "eu-west-1"}
    assert tables["table1"].storage_profile == "aws-lake"
    assert tables["table4"].storage_options() == {"project": "my-project"}
    assert tables["local_table"].storage_options() is None
    assert all(t.id for t in tables.values())


# --- defaults and the YAML form ---------------------------------------------------------------


def test_defaults_are_the_declared_ones() -> None:
    config = parse_config({"version": 1, "signingSecret": SECRET}, environ={})
    for name, field in ServerConfig.model_fields.items():
        if name in ("version", "signing_secret", "signing_secret_source"):
            continue
        assert getattr(config, name) == field.default, name


def test_defaults_round_trip_through_the_yaml_form() -> None:
    config = parse_config({"version": 1, "signingSecret": SECRET}, environ={})
    document = config.model_dump(by_alias=True)
    assert "signingSecretSource" not in document and "warnings" not in document
    assert document["preSignedUrlTimeoutSeconds"] == 3600
    assert document["evaluateJsonPredicateHintsV2"] is True
    again = parse_config(yaml.safe_load(yaml.safe_dump(document)), environ={})
    assert again.warnings == ()
    assert again == config


def test_the_example_round_trips_through_the_yaml_form() -> None:
    config = load_config(EXAMPLE, environ=EXAMPLE_ENV)
    document = yaml.safe_load(yaml.safe_dump(config.model_dump(by_alias=True)))
    assert document["shares"][2]["schemas"][0]["tables"][0]["storage"] == {"project": "my-project"}
    again = parse_config(document, environ={})
    assert again.warnings == ()
    assert again == config


def test_a_generated_secret_is_not_written_back() -> None:
    config = parse_config({"version": 1}, environ={})
    assert config.signing_secret_source == "generated"
    assert config.model_dump(by_alias=True)["signingSecret"] is None


# --- the models -------------------------------------------------------------------------------


def test_models_are_immutable_and_hashable() -> None:
    config = parse_config(
        {
            "version": 1,
            "signingSecret": SECRET,
            "shares": [
                {
                    "name": "s",
                    "schemas": [
                        {
                            "name": "d",
                            "tables": [{"name": "t", "location": "s3://b/t", "storage": {}}],
                        }
                    ],
                }
            ],
        },
        environ={},
    )
    table = config.shares[0].schemas[0].tables[0]
    for model, attribute in ((config, "port"), (table, "location"), (table, "storage")):
        with pytest.raises(pydantic.ValidationError, match="frozen"):
            setattr(model, attribute, 1)
    assert isinstance(config.shares, tuple)
    assert isinstance(config.storage_profiles, tuple)
    assert {table: 1}[table] == 1
    assert hash(config) == hash(config.model_copy())


def test_models_built_in_code_are_validated_too() -> None:
    table = TableConfig.model_validate({"name": "t", "location": "/x", "startVersion": "2"})
    assert table.start_version == 2
    with pytest.raises(pydantic.ValidationError, match="URL path segment"):
        TableConfig(name="a/b", location="/x", id="i")
    with pytest.raises(pydantic.ValidationError):
        TableConfig(name="t", location="/x", id="i", typo=1)  # type: ignore[call-arg]


def test_snake_case_keys_are_not_yaml_keys(caplog: pytest.LogCaptureFixture) -> None:
    """Attribute names are accepted by the model constructors, but a file must use the
    camelCase keys: a snake_case key is unknown (and ignored), with a hint."""
    with caplog.at_level(logging.WARNING, "lakeshare.config"):
        config = parse_config(
            {"version": 1, "signingSecret": SECRET, "pre_signed_url_timeout_seconds": 5},
            environ={},
        )
    assert config.pre_signed_url_timeout_seconds == 3600
    [warning] = config.warnings
    assert "unknown configuration key 'pre_signed_url_timeout_seconds' is ignored" in warning


# --- adding settings: the mechanism the package docstring describes -------------------------


class _Limits(Section):
    max_body_bytes: Positive = 4096
    label: Text = "default"


class _ExtendedConfig(ServerConfig):
    limits: _Limits = _Limits()
    max_connections: Positive = 100
    allowed_origins: tuple[Text, ...] = ()


def _load_extended(raw: dict[str, Any], **environ: str) -> _ExtendedConfig:
    context = LoadContext(environ=environ)
    return validate(_ExtendedConfig, prepare(_ExtendedConfig, raw, "", context), context)


def test_a_new_setting_or_section_needs_only_its_declaration() -> None:
    config = _load_extended(
        {
            "version": 1,
            "maxConnections": "${CONNS}",
            "limits": {"maxBodyBytes": "${BODY:-2048}", "label": 7},
            "allowedOrigins": ["https://${HOST}", 8080],
        },
        CONNS="12",
        HOST="a.example",
    )
    assert (config.max_connections, config.limits.max_body_bytes) == (12, 2048)
    assert config.allowed_origins == ("https://a.example", "8080")
    assert config.limits.label == "7"
    assert _load_extended({"version": 1}).limits == _Limits()
    with pytest.raises(ConfigError) as info:
        _load_extended({"version": 1, "limits": {"maxBodyBytes": 0}})
    assert (info.value.path, info.value.message) == (
        "limits.maxBodyBytes",
        "'maxBodyBytes' must be positive, got 0",
    )
    with pytest.raises(ConfigError) as info:
        _load_extended({"version": 1, "allowedOrigins": ["${NOT_SET}"]})
    assert info.value.path == "allowedOrigins[0]"
    with pytest.raises(ConfigError) as info:
        _load_extended({"version": 1, "allowedOrigins": [True]})
    assert (info.value.path, info.value.message) == (
        "allowedOrigins[0]",
        "each entry of 'allowedOrigins' must be a string",
    )
    with pytest.raises(ConfigError) as info:
        _load_extended({"version": 1, "limits": "big"})
    assert (info.value.path, info.value.message) == ("limits", "'limits' must be a mapping")
    context = LoadContext(environ={})
    prepare(_ExtendedConfig, {"version": 1, "limits": {"maxBodyByte": 1}}, "", context)
    [warning] = context.warnings
    assert "'limits.maxBodyByte' is ignored; did you mean 'maxBodyBytes'?" in warning

"""What a reload of the configuration file may change in a running server.

Live settings (`LIVE_SETTINGS`) take effect at once in every worker: the shares and their
tables (with the storage profiles they use), the recipients of the file and the
`authorization` token, the log level, and the limits checked per request (`LIVE_LIMITS`:
body sizes, query field lengths, the admission queue's length and wait). Every other
setting is bound into what the server built at start (the listening socket, TLS, worker
processes, the store, the admin app, limits wired into the HTTP layer...): a reload that
changes one names it and leaves it as it was, until a restart.
"""

from __future__ import annotations

from pydantic.alias_generators import to_camel

from sharing.config.models import LimitsConfig, ServerConfig

__all__ = ["LIVE_LIMITS", "LIVE_SETTINGS", "live_update", "restart_settings"]

LIVE_SETTINGS = ("shares", "storage_profiles", "recipients", "authorization", "log_level")
# Limits read per request (app.limits): the rest are bound into the HTTP layer (request
# line, headers, timeouts, connections, draining) or the admission gate's size.
LIVE_LIMITS = (
    "max_query_body_bytes",
    "max_body_bytes",
    "max_idempotency_key_chars",
    "max_predicate_hints_chars",
    "max_json_predicate_hints_chars",
    "max_queued_requests",
    "queue_timeout_seconds",
)
_NOT_SETTINGS = ("warnings", "signing_secret_source")


def restart_settings(started: ServerConfig, loaded: ServerConfig) -> list[str]:
    """The keys (camelCase) whose value in `loaded` differs from the file the server started
    with and that only a restart applies. A signing secret generated at random (none in the
    file nor the environment) is not a change."""
    changed = []
    for name, field in ServerConfig.model_fields.items():
        if name in LIVE_SETTINGS or name in _NOT_SETTINGS:
            continue
        if (
            name == "signing_secret"
            and started.signing_secret_source == "generated"
            and loaded.signing_secret_source == "generated"
        ):
            continue
        if name == "limits":
            changed.extend(_restart_limits(started.limits, loaded.limits))
            continue
        if getattr(started, name) != getattr(loaded, name):
            changed.append(field.alias or to_camel(name))
    return changed


def _restart_limits(started: LimitsConfig, loaded: LimitsConfig) -> list[str]:
    return [
        f"limits.{to_camel(name)}"
        for name in LimitsConfig.model_fields
        if name not in LIVE_LIMITS and getattr(started, name) != getattr(loaded, name)
    ]


def live_update(running: ServerConfig, loaded: ServerConfig) -> ServerConfig:
    """The running configuration with the live settings of `loaded`."""
    update = {name: getattr(loaded, name) for name in LIVE_SETTINGS}
    update["warnings"] = loaded.warnings
    update["limits"] = running.limits.model_copy(
        update={name: getattr(loaded.limits, name) for name in LIVE_LIMITS}
    )
    return running.model_copy(update=update)

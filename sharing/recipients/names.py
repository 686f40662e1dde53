"""Checks of the values a recipient is made of, shared by the configuration and the store so
both refuse the same names, durations and address lists with the same words."""

from __future__ import annotations

import ipaddress
import re
from datetime import UTC, datetime

__all__ = [
    "ADMIN_RECIPIENT",
    "ALL_SHARES",
    "ANONYMOUS_RECIPIENT",
    "BEARER_TOKEN_RECIPIENT",
    "MAX_PROPERTIES",
    "MAX_PROPERTY_VALUE_BYTES",
    "RESERVED_NAMES",
    "InvalidValue",
    "IpNetwork",
    "Properties",
    "address_in",
    "is_recipient_name",
    "parse_address",
    "parse_duration",
    "parse_instant",
    "parse_networks",
    "property_assignment",
    "property_key",
    "property_value",
    "recipient_name",
    "recipient_properties",
]

ALL_SHARES = "*"
"""A grant of every share (what `authorization.bearerToken` means)."""

BEARER_TOKEN_RECIPIENT = "_bearer_token"
"""The recipient `authorization.bearerToken` stands for (it sees every share)."""
ADMIN_RECIPIENT = "_admin"
"""Who the audit trail names for the admin API's requests."""
ANONYMOUS_RECIPIENT = "anonymous"
"""Who requests are served as when no authorization is configured (it sees every share)."""
RESERVED_NAMES = frozenset({BEARER_TOKEN_RECIPIENT, ADMIN_RECIPIENT, ANONYMOUS_RECIPIENT})
"""Names the server gives its own principals: no recipient of the configuration, the store
(CLI, admin API), a federated token or a `recipientMap` can be one of them. Names starting
with '_' are refused by the name rule as well, so the server may add more of those."""

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
_DURATION = re.compile(r"(\d{1,9})\s*([smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class InvalidValue(ValueError):
    """A value a recipient cannot have; the message says why and is safe to show."""


def recipient_name(value: str) -> str:
    """The canonical (lower-case) recipient name, or InvalidValue saying what is allowed
    (a reserved name is refused as well)."""
    name = value.strip().lower()
    if not _NAME.fullmatch(name):
        raise InvalidValue(
            f"invalid recipient name {value[:80]!r}: use 1 to 64 letters, digits, '_', '.' or "
            "'-', starting with a letter or digit"
        ) from None
    if name in RESERVED_NAMES:
        raise InvalidValue(f"the recipient name '{name}' is reserved for the server's own use")
    return name


def is_recipient_name(value: str) -> bool:
    """Whether `value` is, exactly as given, a recipient's canonical name: lower-case, no
    surrounding blanks, not reserved. Identities asserted by others (federated tokens) must
    be one, so that no case folding or trimming turns one identity into another."""
    return _NAME.fullmatch(value) is not None and value not in RESERVED_NAMES


def parse_duration(value: str) -> int:
    """Seconds in '90d', '1h', '30m', '45s', '2w' or a bare number of seconds."""
    text = value.strip().lower()
    if text.isdigit():
        return int(text)
    match = _DURATION.fullmatch(text)
    if match is None:
        raise InvalidValue(
            f"invalid duration {value[:40]!r}: use e.g. 90d, 12h, 30m, 45s or 2w"
        ) from None
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def parse_instant(value: str) -> datetime:
    """An ISO-8601 instant; one without an offset is taken as UTC."""
    try:
        instant = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidValue(
            f"invalid time {value[:40]!r}: use ISO-8601, e.g. 2027-01-31T00:00Z"
        ) from None
    return instant if instant.tzinfo else instant.replace(tzinfo=UTC)


def parse_networks(values: tuple[str, ...] | list[str]) -> tuple[IpNetwork, ...]:
    """IPv4/IPv6 CIDRs (a bare address is a /32 or /128)."""
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise InvalidValue(
                f"invalid IP network {value[:60]!r}: use a CIDR such as 10.0.0.0/8"
            ) from None
    return tuple(networks)


# -- recipient properties -----------------------------------------------------------------

MAX_PROPERTIES = 64
MAX_PROPERTY_VALUE_BYTES = 1024
_PROPERTY_KEY = re.compile(r"[A-Za-z0-9_.-]{1,255}")

Properties = tuple[tuple[str, str], ...]
"""A recipient's properties: (key, value) pairs sorted by key, hashable for cache keys."""


def property_key(value: str) -> str:
    """A property key as written (keys are case-sensitive), or InvalidValue."""
    key = value.strip()
    if not _PROPERTY_KEY.fullmatch(key):
        raise InvalidValue(
            f"invalid property key {value[:80]!r}: use 1 to 255 letters, digits, '_', '.' or '-'"
        )
    return key


def property_value(key: str, value: object) -> str:
    """A property value: a string of at most 1 KiB (UTF-8), or InvalidValue."""
    if not isinstance(value, str):
        raise InvalidValue(f"property {key!r}: the value must be a string")
    if len(value.encode("utf-8")) > MAX_PROPERTY_VALUE_BYTES:
        raise InvalidValue(
            f"property {key!r}: the value is longer than {MAX_PROPERTY_VALUE_BYTES} bytes"
        )
    return value


def recipient_properties(pairs: object) -> Properties:
    """Checked, sorted properties from a mapping (or pairs); at most MAX_PROPERTIES."""
    items = pairs.items() if isinstance(pairs, dict) else pairs
    checked: dict[str, str] = {}
    for key, value in items:  # type: ignore[attr-defined]
        name = property_key(str(key))
        checked[name] = property_value(name, value)
    if len(checked) > MAX_PROPERTIES:
        raise InvalidValue(f"a recipient has at most {MAX_PROPERTIES} properties")
    return tuple(sorted(checked.items()))


def property_assignment(text: str) -> tuple[str, str]:
    """`KEY=VALUE` from the command line (the value may contain '=')."""
    key, sep, value = text.partition("=")
    if not sep:
        raise InvalidValue(f"expected KEY=VALUE, got {text[:80]!r}")
    name = property_key(key)
    return name, property_value(name, value)


def parse_address(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """An IP address as a socket or a proxy header gives it (an IPv6 zone is dropped, an
    IPv4-mapped IPv6 address is its IPv4 address), or None when it is not one."""
    try:
        ip = ipaddress.ip_address(value.strip().split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def address_in(address: str | None, networks: tuple[IpNetwork, ...]) -> bool:
    """Whether `address` (text) is an IP address inside one of `networks`."""
    ip = parse_address(address) if address else None
    if ip is None:
        return False
    return any(ip.version == net.version and ip in net for net in networks)

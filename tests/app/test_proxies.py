"""Forwarding headers parsed into the client address (app.proxies), without a server: the
walk from the right, the hop formats proxies write, and which header counts."""

from __future__ import annotations

import pytest

from app.proxies import client_address, forwarded_hops
from sharing.recipients.names import parse_networks

TRUSTED = parse_networks(["127.0.0.1/32", "10.0.0.0/8", "fd00::/8"])


def _client(peer: str, header: str, *values: tuple[str, str]) -> str:
    headers = [(name.lower().encode(), value.encode()) for name, value in values]
    return client_address(peer, forwarded_hops(headers, header), TRUSTED)[0]


@pytest.mark.parametrize(
    ("peer", "xff", "expected"),
    [
        ("127.0.0.1", "203.0.113.9", "203.0.113.9"),
        # The client may send its own header: the proxy appends the address it saw.
        ("127.0.0.1", "198.51.100.1, 203.0.113.9", "203.0.113.9"),
        # Trusted hops on the right are skipped.
        ("127.0.0.1", "203.0.113.9, 10.1.2.3, 10.0.0.7", "203.0.113.9"),
        # Only trusted hops: the left-most one.
        ("127.0.0.1", "10.1.2.3, 10.0.0.7", "10.1.2.3"),
        # A peer that is no trusted proxy: the header is a claim and is ignored.
        ("192.0.2.1", "203.0.113.9", "192.0.2.1"),
        # Ports and IPv6 forms proxies write.
        ("127.0.0.1", "203.0.113.9:4711", "203.0.113.9"),
        ("127.0.0.1", "[2001:db8::7]:4711", "2001:db8::7"),
        ("127.0.0.1", "2001:db8::7", "2001:db8::7"),
        ("::ffff:127.0.0.1", "203.0.113.9", "203.0.113.9"),
        # Not an address: the walk ends at the last trusted hop.
        ("127.0.0.1", "203.0.113.9, unknown", "127.0.0.1"),
        ("127.0.0.1", "203.0.113.9, garbage, 10.0.0.7", "10.0.0.7"),
        ("127.0.0.1", "", "127.0.0.1"),
    ],
)
def test_right_most_untrusted_address_of_x_forwarded_for(
    peer: str, xff: str, expected: str
) -> None:
    assert _client(peer, "X-Forwarded-For", ("X-Forwarded-For", xff)) == expected


def test_several_header_lines_are_one_list() -> None:
    lines = (("X-Forwarded-For", "198.51.100.1"), ("X-Forwarded-For", "203.0.113.9, 10.0.0.7"))
    assert _client("127.0.0.1", "X-Forwarded-For", *lines) == "203.0.113.9"


def test_forwarded_header_elements() -> None:
    value = 'for=198.51.100.1, for="[2001:db8::7]:4711";proto=https;host=share.example'
    hops = forwarded_hops([(b"forwarded", value.encode())], "Forwarded")
    client, nearest = client_address("10.0.0.1", hops, TRUSTED)
    assert client == "2001:db8::7"
    assert nearest is not None and (nearest.scheme, nearest.host) == ("https", "share.example")
    assert _client("127.0.0.1", "Forwarded", ("Forwarded", "for=_hidden")) == "127.0.0.1"


def test_only_the_configured_header_counts() -> None:
    spoof = ("Forwarded", "for=203.0.113.9")
    assert _client("127.0.0.1", "X-Forwarded-For", spoof) == "127.0.0.1"
    assert _client("127.0.0.1", "Forwarded", ("X-Forwarded-For", "203.0.113.9")) == "127.0.0.1"


def test_scheme_and_host_of_the_nearest_proxy() -> None:
    headers = [
        (b"x-forwarded-for", b"203.0.113.9"),
        (b"x-forwarded-proto", b"http, https"),
        (b"x-forwarded-host", b"share.example:8443"),
    ]
    _, nearest = client_address("127.0.0.1", forwarded_hops(headers, "X-Forwarded-For"), TRUSTED)
    assert nearest is not None and (nearest.scheme, nearest.host) == ("https", "share.example:8443")


@pytest.mark.parametrize(
    ("header", "value", "expected"),
    [
        # A client's unbalanced quote must not swallow the address the proxy appended (the
        # request was once attributed to the trusted proxy itself: its allow-lists and
        # failed-login throttle, and an audit trail without the client's address).
        ("X-Forwarded-For", '", 203.0.113.9', "203.0.113.9"),
        ("X-Forwarded-For", '198.51.100.1, "x, 203.0.113.9, 10.0.0.7', "203.0.113.9"),
        ("Forwarded", 'for=", for=203.0.113.9', "203.0.113.9"),
        ("Forwarded", 'for="x;host=", for=203.0.113.9;proto=https', "203.0.113.9"),
    ],
)
def test_a_clients_quote_does_not_hide_the_proxys_entry(
    header: str, value: str, expected: str
) -> None:
    assert _client("127.0.0.1", header, (header, value)) == expected

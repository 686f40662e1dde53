"""Who the client is behind reverse proxies: `trustedProxies` and `forwardedHeader`.

uvicorn believes `X-Forwarded-For`/`X-Forwarded-Proto` from 127.0.0.1 unless told
otherwise; `app.serving` turns that off, so by default the client is the connection's peer
whatever the headers say (a header is only a claim by whoever sent it). A provider behind
an ingress or load balancer lists its addresses in `trustedProxies`; then, for a request
whose peer is one of them, `ForwardedMiddleware` reads the one configured header
(`X-Forwarded-For`, or RFC 7239 `Forwarded`) and takes as the client the right-most address
that is not a trusted proxy: each trusted hop appended the address it saw, so everything to
the right of that address was written by a trusted proxy, and everything left of it by
the client (who may have sent the header itself). A hop that is not an IP address
(`unknown`, an obfuscated RFC 7239 name) ends the walk at the last trusted proxy.

From a trusted peer the scheme and host the nearest proxy received are honoured as well
(`X-Forwarded-Proto`/`X-Forwarded-Host`, or `proto=`/`host=` of the nearest `Forwarded`
element), as the URLs the server builds from the request (signed file URLs without
`publicUrl`, activation links) must be the ones the client used.

Every consumer of the client address (IP allow-lists, failed-login throttles, the audit
trail, the access log) reads `scope["client"]`, which this middleware rewrites before
anything else runs; it is installed only when `trustedProxies` is not empty.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from sharing.recipients.names import IpNetwork, address_in, parse_address, parse_networks

__all__ = ["ForwardedMiddleware", "Hop", "client_address", "forwarded_hops"]

_HOST = re.compile(r"(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.?|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?")
_SCHEMES = frozenset({"http", "https"})


@dataclass(slots=True)
class Hop:
    """One proxy hop of a forwarding header: the address it names (None when that is not an
    IP address), and the scheme and host it received, when the header says."""

    address: str | None
    scheme: str | None
    host: str | None


def _hop_address(value: str) -> str | None:
    """The IP address of one forwarding entry: `1.2.3.4`, `1.2.3.4:port`, `::1`,
    `[::1]`, `[::1]:port` (quotes already removed); None for anything else."""
    text = value.strip()
    if text.startswith("["):
        text = text[1 : text.find("]")] if "]" in text else ""
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    ip = parse_address(text) if text else None
    return str(ip) if ip is not None else None


def _split_list(value: str) -> list[str]:
    """A header's comma-separated elements. Every comma splits, quoted or not: the entries
    trusted proxies write (addresses, `for="[v6]:port"`, schemes, host names) hold none,
    and honouring quotes let a client's unbalanced `"` swallow the entry the proxy
    appended after it. A quoted comma left of the client's entry splits an element the
    walk never reaches."""
    return [part.strip() for part in value.split(",") if part.strip()]


def _forwarded_element(element: str) -> Hop:
    """One RFC 7239 element (`for=...;proto=...;host=...`)."""
    pairs: dict[str, str] = {}
    for pair in element.split(";"):
        name, sep, value = pair.partition("=")
        if sep:
            pairs[name.strip().lower()] = value.strip().strip('"')
    return Hop(_hop_address(pairs.get("for", "")), pairs.get("proto"), pairs.get("host"))


def forwarded_hops(headers: Iterable[tuple[bytes, bytes]], header: str) -> list[Hop]:
    """The hops `header` (`X-Forwarded-For` or `Forwarded`) lists, client side first; with
    `X-Forwarded-For`, the last hop carries the right-most `X-Forwarded-Proto`/`-Host`."""
    wanted = header.lower().encode("latin-1")
    values: dict[bytes, list[str]] = {}
    for name, value in headers:
        if name in (wanted, b"x-forwarded-proto", b"x-forwarded-host"):
            values.setdefault(name, []).append(value.decode("latin-1"))
    listed = _split_list(",".join(values.get(wanted, ())))
    if wanted == b"forwarded":
        return [_forwarded_element(element) for element in listed]
    hops = [Hop(_hop_address(entry), None, None) for entry in listed]
    schemes = _split_list(",".join(values.get(b"x-forwarded-proto", ())))
    hosts = _split_list(",".join(values.get(b"x-forwarded-host", ())))
    if (schemes or hosts) and not hops:  # a proxy that names the scheme only: no address
        hops.append(Hop(None, None, None))
    if hops:
        hops[-1].scheme = schemes[-1] if schemes else None
        hops[-1].host = hosts[-1] if hosts else None
    return hops


def client_address(
    peer: str, hops: list[Hop], trusted: tuple[IpNetwork, ...]
) -> tuple[str, Hop | None]:
    """The client's address for a request from `peer` listing `hops`, and the hop the
    nearest proxy wrote (whose scheme and host it received), None when no header applies."""
    if not hops or not address_in(peer, trusted):
        return peer, None
    client = peer
    for hop in reversed(hops):
        if hop.address is None:
            break
        client = hop.address
        if not address_in(client, trusted):
            break
    return client, hops[-1]


class ForwardedMiddleware:
    """Rewrites `scope["client"]` (and the scheme and `Host`, when the nearest trusted proxy
    says) from the forwarding header of a trusted proxy; see the module doc."""

    def __init__(self, app: ASGIApp, trusted_proxies: Iterable[str], header: str) -> None:
        self.app = app
        self.trusted = parse_networks(list(trusted_proxies))
        self.header = header

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        peer = scope.get("client")
        if scope["type"] == "http" and peer and address_in(peer[0], self.trusted):
            headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
            client, nearest = client_address(
                peer[0], forwarded_hops(headers, self.header), self.trusted
            )
            if nearest is not None:
                scope = dict(scope)
                scope["client"] = (client, 0)
                scheme = (nearest.scheme or "").lower()
                if scheme in _SCHEMES:
                    scope["scheme"] = scheme
                if nearest.host and _HOST.fullmatch(nearest.host):
                    host = nearest.host.encode("latin-1")
                    scope["headers"] = [
                        *((n, v) for n, v in headers if n != b"host"),
                        (b"host", host),
                    ]
        await self.app(scope, receive, send)

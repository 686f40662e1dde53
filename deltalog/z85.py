"""Z85 (ZeroMQ Base85), the encoding Delta uses for deletion vector UUIDs and inline DVs.

Z85 maps every 4 bytes (a big-endian 32-bit number) to 5 characters of a JSON-safe
alphabet. Delta pads input whose length is not a multiple of 4 with zero bytes and keeps
the true length elsewhere (`sizeInBytes`), so `decode` accepts the wanted output length.

Some writers (the Rust `z85` crate, used to build inline DVs in delta-kernel-rs test
tables) pad differently: the last group starts with one `#` per missing byte and the rest
of the group encodes the shorter big-endian tail. No standard group can start with `#`
(84 * 85**4 > 2**32), so `decode` recognises that form unambiguously.
"""

from __future__ import annotations

ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"

_DECODE = {ch: i for i, ch in enumerate(ALPHABET)}
_POWERS = (85**4, 85**3, 85**2, 85, 1)


class Z85Error(ValueError):
    """The text is not valid Z85 (bad length, character or value)."""


def encode(data: bytes) -> str:
    """Z85 text of `data`, zero-padded to a multiple of 4 bytes."""
    padded = data + b"\x00" * (-len(data) % 4)
    out: list[str] = []
    for i in range(0, len(padded), 4):
        value = int.from_bytes(padded[i : i + 4], "big")
        for power in _POWERS:
            out.append(ALPHABET[(value // power) % 85])
    return "".join(out)


def decode(text: str, length: int | None = None) -> bytes:
    """Bytes of Z85 `text`; when `length` is given, the padding beyond it is dropped."""
    if len(text) % 5:
        raise Z85Error(f"Z85 text length {len(text)} is not a multiple of 5")
    out = bytearray()
    for i in range(0, len(text), 5):
        group = text[i : i + 5]
        if group[0] == "#" and i + 5 == len(text):
            out += _decode_padded_tail(group)
            break
        value = 0
        for ch in group:
            digit = _DECODE.get(ch)
            if digit is None:
                raise Z85Error(f"invalid Z85 character {ch!r}")
            value = value * 85 + digit
        if value > 0xFFFFFFFF:
            raise Z85Error(f"Z85 group {text[i : i + 5]!r} exceeds 32 bits")
        out += value.to_bytes(4, "big")
    if length is not None:
        if length < 0 or length > len(out):
            raise Z85Error(f"wanted {length} bytes but the text holds only {len(out)}")
        del out[length:]
    return bytes(out)


def _decode_padded_tail(group: str) -> bytes:
    missing = len(group) - len(group.lstrip("#"))
    if missing > 3:
        raise Z85Error(f"Z85 tail group {group!r} has no data")
    value = 0
    for ch in group[missing:]:
        digit = _DECODE.get(ch)
        if digit is None:
            raise Z85Error(f"invalid Z85 character {ch!r}")
        value = value * 85 + digit
    size = 4 - missing
    if value >= 1 << (8 * size):
        raise Z85Error(f"Z85 tail group {group!r} exceeds {size} bytes")
    return value.to_bytes(size, "big")

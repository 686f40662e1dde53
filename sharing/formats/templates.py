"""File lines with their unsigned parts built once: only URLs and expiry are filled in later.

Everything in a file line except its signed URL and its expiry depends on the snapshot and
the request's options alone (id, partition values, stats, size, time travel version), so
for a small response these parts can be kept between requests on the same table version.
They are made by the format writer itself, with a recording signer that hands out unique
placeholders: the writer stays the one place that knows the line layout, and the filled
template is byte for byte what the writer would have written with the real signer.

A batch whose lines need more than one signature per line (deletion vectors stored in
files are signed too), or whose data happen to contain a placeholder, gets no template:
the caller formats it with the writer as usual.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import orjson
import pyarrow as pa

from sharing.formats import FILE, FileContext, FileLines, FormatWriter
from sharing.presign.base import SignedUrls, Signer

__all__ = ["LineTemplates", "line_templates"]


class _RecordingSigner:
    """Signs nothing: records the keys of the one `sign` call expected and answers
    placeholder URLs and a placeholder expiry that cannot occur in table data."""

    def __init__(self) -> None:
        nonce = secrets.token_hex(8)
        self.url_mark = f"lakeshare-url-{nonce}-"
        # 19 digits, like no millisecond timestamp before the year 2286.
        self.expiry = 10**18 + secrets.randbelow(8 * 10**18)
        self.keys: list[str] = []
        self.calls = 0

    def sign(self, keys: Sequence[str]) -> SignedUrls:
        self.calls += 1
        self.keys = list(keys)
        return SignedUrls([f"{self.url_mark}{i}." for i in range(len(keys))], self.expiry)


@dataclass(frozen=True, slots=True)
class LineTemplates:
    """The lines of one batch as literal parts around two holes each, the URL (JSON
    string) and the expiry, in `url_first` order; `keys` are the storage keys to sign, in
    line order."""

    keys: tuple[str, ...]
    parts: tuple[tuple[bytes, bytes, bytes], ...]
    url_first: bool
    nbytes: int

    def render(self, signer: Signer) -> FileLines:
        """The lines with fresh URLs from `signer` (one `sign` call, like the writer)."""
        if not self.keys:
            return FileLines(b"", None)
        signed = signer.sign(self.keys)
        expiry = str(signed.expiration_ms).encode()
        dumps = orjson.dumps
        out: list[bytes] = []
        append = out.append
        url_first = self.url_first
        for (head, middle, tail), url in zip(self.parts, signed.urls, strict=True):
            first, second = (dumps(url), expiry) if url_first else (expiry, dumps(url))
            append(head)
            append(first)
            append(middle)
            append(second)
            append(tail)
        return FileLines(b"".join(out), signed.expiration_ms)

    @staticmethod
    def joined(batches: Sequence[LineTemplates]) -> LineTemplates | None:
        """The templates of several batches as one (signed with one call), or None when
        their layouts differ."""
        filled = [t for t in batches if t.keys]
        if not filled:
            return LineTemplates((), (), True, 0)
        if len(filled) == 1:
            return filled[0]
        if len({t.url_first for t in filled}) != 1:
            return None
        return LineTemplates(
            tuple(k for t in filled for k in t.keys),
            tuple(p for t in filled for p in t.parts),
            filled[0].url_first,
            sum(t.nbytes for t in filled),
        )


def line_templates(
    writer: FormatWriter, batch: pa.RecordBatch, context: FileContext, action: str = FILE
) -> LineTemplates | None:
    """Templates of `batch`'s lines as `writer` writes them in `context` (whose signer is
    not used), or None when the lines cannot be templated (see the module doc)."""
    recorder = _RecordingSigner()
    recording = FileContext(
        storage=context.storage,
        table_root=context.table_root,
        signer=recorder,
        id_scheme=context.id_scheme,
        version=context.version,
        timestamp=context.timestamp,
    )
    written = writer.file_lines(batch, recording, action)
    if batch.num_rows == 0:
        return LineTemplates((), (), True, 0)
    if recorder.calls != 1 or len(recorder.keys) != batch.num_rows:
        return None
    expiry_text = str(recorder.expiry).encode()
    lines = bytes(written.text).split(b"\n")
    if lines[-1] != b"" or len(lines) != batch.num_rows + 1:
        return None
    parts: list[tuple[bytes, bytes, bytes]] = []
    url_first: bool | None = None
    for i, line in enumerate(lines[:-1]):
        url = orjson.dumps(f"{recorder.url_mark}{i}.")
        if line.count(url) != 1 or line.count(expiry_text) != 1:
            return None
        url_at, expiry_at = line.index(url), line.index(expiry_text)
        this_first = url_at < expiry_at
        if url_first is None:
            url_first = this_first
        elif url_first != this_first:
            return None
        (a, a_end), (b, b_end) = sorted(
            [(url_at, url_at + len(url)), (expiry_at, expiry_at + len(expiry_text))]
        )
        parts.append((line[:a], line[a_end:b], line[b_end:] + b"\n"))
    size = sum(len(p) for triple in parts for p in triple) + sum(len(k) for k in recorder.keys)
    return LineTemplates(tuple(recorder.keys), tuple(parts), bool(url_first), size)

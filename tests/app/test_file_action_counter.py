"""Counting file-action lines in NDJSON bodies as they stream (app.middleware), against
counting the lines of the whole body: for chunks as the response writers send them (whole
lines, a batch of file lines per chunk) and for bodies cut anywhere inside lines."""

from __future__ import annotations

import random

import pytest

from app.middleware import _FileActionCounter, count_newlines

FILE_KINDS = [
    b'{"file":{"id":"a","url":"u"}}',
    b'{"add":{"path":"p"}}',
    b'{"cdf":{}}',
    b'{"remove":{}}',
]
OTHER_KINDS = [
    b'{"protocol":{"minReaderVersion":1}}',
    b'{"metaData":{"description":"a \\"file\\": in a string\\n{\\"add\\":"}}',
    b'{"endStreamAction":{"refreshToken":"t"}}',
]


def _expected(lines: list[bytes]) -> int:
    return sum(
        1 for line in lines if line.startswith((b'{"file":', b'{"add":', b'{"cdf":', b'{"remove":'))
    )


@pytest.mark.parametrize("as_view", [False, True], ids=["bytes", "memoryview"])
def test_writer_chunks(as_view: bool) -> None:
    """A batch's text may come as a memoryview of its Arrow buffer (not copied)."""
    rng = random.Random(7)
    for _ in range(500):
        chunks: list[list[bytes]] = [[rng.choice(OTHER_KINDS)]]
        for _ in range(rng.randint(0, 8)):
            kinds = FILE_KINDS if rng.random() < 0.7 else OTHER_KINDS
            chunks.append([rng.choice(kinds) for _ in range(rng.randint(1, 20))])
        counter = _FileActionCounter()
        for lines in chunks:
            text = b"\n".join(lines) + b"\n"
            chunk = memoryview(text) if as_view else text
            counter.feed(chunk, count_newlines(chunk))
        assert counter.count == _expected([line for lines in chunks for line in lines])


@pytest.mark.parametrize("as_view", [False, True], ids=["bytes", "memoryview"])
def test_bodies_cut_inside_lines(as_view: bool) -> None:
    rng = random.Random(11)
    for _ in range(500):
        lines = [rng.choice(FILE_KINDS + OTHER_KINDS) for _ in range(rng.randint(1, 40))]
        body = b"\n".join(lines) + b"\n"
        line_ends = {i + 1 for i, byte in enumerate(body) if byte == ord("\n")}
        inside = [i for i in range(1, len(body)) if i not in line_ends]
        cuts = sorted(rng.sample(inside, min(len(inside), rng.randint(1, 30))))
        counter = _FileActionCounter()
        view = memoryview(body) if as_view else body
        for begin, end in zip([0, *cuts], [*cuts, len(body)], strict=True):
            counter.feed(view[begin:end], count_newlines(view[begin:end]))
        assert counter.count == _expected(lines)


def test_newlines_counted_alike_in_small_and_big_chunks() -> None:
    line = b'{"file":{"url":"u\\n"}}\n'
    for repeat in (0, 1, 100, 10_000):  # the last one past the numpy threshold
        assert count_newlines(line * repeat) == repeat
        assert count_newlines(memoryview(line * repeat)) == repeat

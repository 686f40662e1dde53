"""Signing batches ahead of the response writer: same bytes, same order, same failures.

The slow signer here is a real GcsSigner (RSA, fixed clock, so URLs are reproducible)
that also sleeps per batch. The sleep stands for the cost a slow signer has per batch
(signBlob round trips, or RSA on a busy machine) while letting other threads run: local
RSA in `cryptography` holds the GIL, so timing it alone would measure the machine, not
whether the pipeline overlaps signing with writing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import orjson
import pyarrow as pa
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from deltalog.actions import ADD_SCHEMA
from deltalog.storage.gcs import GcsStorage
from sharing.errors import UnsupportedOperation
from sharing.formats import FileContext
from sharing.formats.writers import writer_for
from sharing.presign.base import SignedUrls, parallel_batches
from sharing.presign.gcs import GcsSigner, HmacKey, RsaKey
from sharing.query.batch_pipeline import FAST_AHEAD
from sharing.query.plan import FileSection, QueryPlan

NOW = 1_795_364_124.0
BATCH_ROWS = 4
POISON = "poison"


class SlowSigner(GcsSigner):
    """GcsSigner with a fixed clock that sleeps `delay` per batch and records its calls."""

    def __init__(self, key: Any, *, ahead: int, delay: float) -> None:
        super().__init__(key, table_root="lake/t", ttl_seconds=3600)
        self.parallel_batches = ahead
        self.delay = delay
        self.lock = threading.Lock()
        self.started = 0
        self.active = 0
        self.max_active = 0
        self.threads: set[str] = set()
        self.spans: list[tuple[float, float]] = []  # (start, end) of each batch's signing

    def sign(self, keys: Sequence[str], now: float | None = None) -> SignedUrls:
        with self.lock:
            self.started += 1
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.threads.add(threading.current_thread().name)
        start = time.perf_counter()
        try:
            time.sleep(self.delay)
            if any(POISON in key for key in keys):
                raise UnsupportedOperation("Table contains absolute paths")
            return super().sign(keys, now=NOW)
        finally:
            with self.lock:
                self.active -= 1
                self.spans.append((start, time.perf_counter()))


@pytest.fixture(scope="module")
def rsa_key() -> RsaKey:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return RsaKey.from_service_account({"client_email": "r@p.iam", "private_key": pem})


@pytest.fixture(scope="module")
def storage() -> GcsStorage:
    return GcsStorage({"anonymous": True})


def _files(count: int, poison_at: int | None = None) -> pa.Table:
    rows = [
        {
            "path": f"date=2024-01-{i % 28 + 1:02d}/part-{i:05d}"
            + (POISON if i == poison_at else "")
            + ".parquet",
            "partitionValues": [("date", f"2024-01-{i % 28 + 1:02d}")],
            "size": 1000 + i,
            "stats": '{"numRecords":1}',
        }
        for i in range(count)
    ]
    return pa.Table.from_pylist(rows, schema=ADD_SCHEMA)


def _plan(signer: GcsSigner, storage: GcsStorage, files: pa.Table, **kwargs: Any) -> QueryPlan:
    ctx = FileContext(storage, "lake/t", signer, "parquet")
    half = files.num_rows // 2
    sections = [
        b'{"literal":1}\n',
        FileSection(files.slice(0, half), ctx),
        b'{"literal":2}\n',
        FileSection(files.slice(half), ctx),
    ]
    return QueryPlan(
        1, "parquet", b"HEAD\n", sections, writer_for("parquet"), batch_rows=BATCH_ROWS, **kwargs
    )


def _drain(body: Any, write_delay: float = 0.0) -> tuple[list[bytes], list[tuple[float, float]]]:
    """(chunks, (start, end) of each chunk's writing), writing each chunk in `write_delay`
    (a slow client)."""
    chunks: list[bytes] = []
    writes: list[tuple[float, float]] = []
    for chunk in body:
        chunks.append(chunk)
        start = time.perf_counter()
        time.sleep(write_delay)
        writes.append((start, time.perf_counter()))
    return chunks, writes


def _signed_while_writing(signer: SlowSigner, writes: list[tuple[float, float]]) -> int:
    """How many batches were being signed while the writer was writing a chunk."""
    return sum(
        any(sign_start < write_end and write_start < sign_end for write_start, write_end in writes)
        for sign_start, sign_end in signer.spans
    )


def test_same_bytes_in_the_same_order(rsa_key, storage) -> None:
    files = _files(37)  # 10 batches over two sections, the last ones short
    kwargs = {"end_stream": True, "header_end_stream": True}
    plain = b"".join(
        _plan(SlowSigner(rsa_key, ahead=0, delay=0), storage, files, **kwargs).body(ahead=False)
    )
    slow = SlowSigner(rsa_key, ahead=3, delay=0.02)
    pipelined = b"".join(_plan(slow, storage, files, **kwargs).body())
    assert pipelined == plain
    lines = plain.splitlines()
    assert lines[1] == b'{"literal":1}' and lines[2 + 18] == b'{"literal":2}'
    assert [orjson.loads(line)["file"]["size"] for line in lines[2:20] + lines[21:-1]] == [
        1000 + i for i in range(37)
    ]
    assert 1 < slow.max_active <= 3
    assert threading.current_thread().name not in slow.threads


def test_fast_signers_format_ahead_when_streamed_and_inline_when_rendered(storage) -> None:
    assert parallel_batches(GcsSigner(HmacKey("i", "s"), table_root="lake/t", ttl_seconds=1)) == 0
    files = _files(20)
    rendered = SlowSigner(HmacKey("GOOG1ID", "secret"), ahead=0, delay=0)
    whole = _plan(rendered, storage, files).render()
    assert rendered.threads == {threading.current_thread().name} and rendered.max_active == 1
    streamed = SlowSigner(HmacKey("GOOG1ID", "secret"), ahead=0, delay=0.01)
    assert b"".join(_plan(streamed, storage, files).body()) == whole
    assert threading.current_thread().name not in streamed.threads
    assert 1 < streamed.max_active <= FAST_AHEAD


def test_signing_ahead_overlaps_the_writer(rsa_key, storage) -> None:
    # Checked by what overlapped, not by wall time: on a loaded machine sleeps only grow,
    # so the overlap is there whatever the load, and a total-time ratio is not.
    files, delay, write_delay = _files(40), 0.02, 0.01  # 10 batches
    sequential = SlowSigner(rsa_key, ahead=0, delay=delay)
    seq_chunks, seq_writes = _drain(
        _plan(sequential, storage, files).body(ahead=False), write_delay
    )
    pipelined = SlowSigner(rsa_key, ahead=3, delay=delay)
    chunks, writes = _drain(_plan(pipelined, storage, files).body(), write_delay)
    assert chunks == seq_chunks
    assert sequential.started == pipelined.started == 10
    # Sequential: each batch is signed between two writes, never during one.
    assert _signed_while_writing(sequential, seq_writes) == 0
    # Pipelined: the first three batches are signed together before the first file line;
    # from then on the signer works while the writer writes (one batch of slack).
    assert _signed_while_writing(pipelined, writes) >= 10 - 3 - 1, (pipelined.spans, writes)
    # The first file line does not wait for more than the batches signed alongside it.
    first_file = next(i for i, chunk in enumerate(chunks) if b'"file"' in bytes(chunk))
    finished_before_first_write = sum(end <= writes[first_file][0] for _, end in pipelined.spans)
    assert finished_before_first_write <= 1 + pipelined.parallel_batches


def _collect(body: Any) -> tuple[list[bytes], type[BaseException] | None]:
    out: list[bytes] = []
    try:
        for chunk in body:
            out.append(chunk)
    except Exception as exc:
        return out, type(exc)
    return out, None


@pytest.mark.parametrize("opted_in", [True, False])
def test_a_signer_failure_ends_the_stream_as_before(rsa_key, storage, opted_in) -> None:
    files = _files(40, poison_at=17)  # batch 5 of 10
    kwargs = {"end_stream": True, "header_end_stream": opted_in}
    sequential = SlowSigner(rsa_key, ahead=0, delay=0)
    pipelined = SlowSigner(rsa_key, ahead=3, delay=0.01)
    expected, expected_error = _collect(
        _plan(sequential, storage, files, **kwargs).body(ahead=False)
    )
    got, error = _collect(_plan(pipelined, storage, files, **kwargs).body())
    assert got == expected and error == expected_error
    if opted_in:
        assert error is None
        assert orjson.loads(got[-1])["endStreamAction"] == {
            "errorMessage": "Table contains absolute paths",
            "httpStatusErrorCode": 400,
        }
        assert b"".join(got).count(b'"file"') == 16  # the four batches before it
    else:
        assert error is UnsupportedOperation


def test_an_abandoned_stream_stops_signing(rsa_key, storage) -> None:
    signer = SlowSigner(rsa_key, ahead=2, delay=0.05)
    body = _plan(signer, storage, _files(80)).body()  # 20 batches
    assert next(body) == b"HEAD\n" and next(body) == b'{"literal":1}\n'
    assert b'"file"' in bytes(next(body))
    body.close()  # the client went away
    time.sleep(0.3)
    assert signer.started <= 4 and signer.active == 0


def test_a_failure_reading_the_sections_comes_after_the_batches_before_it(rsa_key, storage) -> None:
    # Streaming and change feed plans make their sections lazily (commit by commit).
    def plan(signer: SlowSigner) -> QueryPlan:
        ctx = FileContext(storage, "lake/t", signer, "parquet")

        def sections() -> Any:
            yield FileSection(_files(12), ctx)
            raise RuntimeError("log unreadable")

        return QueryPlan(
            1, "parquet", b"HEAD\n", sections(), writer_for("parquet"), batch_rows=BATCH_ROWS
        )

    expected, expected_error = _collect(
        plan(SlowSigner(rsa_key, ahead=0, delay=0)).body(ahead=False)
    )
    got, error = _collect(plan(SlowSigner(rsa_key, ahead=3, delay=0.02)).body())
    assert got == expected and error is expected_error is RuntimeError
    assert b"".join(got).count(b'"file"') == 12


def test_streams_at_once_share_the_fast_batches_ahead(storage) -> None:
    """Two responses streaming at once in a process hold FAST_AHEAD batches ahead between
    them (one each at least), not FAST_AHEAD each; a finished or abandoned one gives its
    share back."""
    from sharing.query import batch_pipeline

    assert batch_pipeline._streaming == 0 and batch_pipeline._fast_depth() == FAST_AHEAD
    signer = SlowSigner(HmacKey("GOOG1ID", "secret"), ahead=0, delay=0.01)
    first = iter(_plan(signer, storage, _files(40)).body())
    second = iter(_plan(signer, storage, _files(40)).body())
    for _ in range(4):  # the head, a literal and into the first batches
        next(first)
        next(second)
    assert batch_pipeline._streaming == 2
    assert batch_pipeline._fast_depth() == max(1, FAST_AHEAD // 2)
    signer.max_active = 0
    for _ in range(6):
        next(first)
        next(second)
    # The signing under way at once: one batch ahead per response.
    assert signer.max_active <= 2 * max(1, FAST_AHEAD // 2)
    second.close()  # abandoned (client gone)
    assert batch_pipeline._streaming == 1 and batch_pipeline._fast_depth() == FAST_AHEAD
    _drain(first)
    assert batch_pipeline._streaming == 0

"""URLs signed in the signing helper process are the bytes the server's own threads sign:
S3 URLs are botocore's and fetch from a real S3 (moto), local URLs carry the signature
the server's file endpoint checks (`url_signature`). When the helper cannot start or is
killed mid-response, the batches are signed in the server with the same result; a helper
that answers with an error fails the response cleanly (an end-stream error, or a cut
body), never a short success.

The misbehaving helpers are small Python programs that speak the helper's pipe protocol
(a real process on the other end of the pipe, as in production); nothing is mocked."""

from __future__ import annotations

import ctypes
import datetime as dt
import functools
import logging
import os
import signal
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import boto3
import botocore.auth
import orjson
import pyarrow as pa
import pytest
from botocore.config import Config
from botocore.credentials import Credentials

from deltalog.actions import ADD_SCHEMA
from deltalog.storage.local import LocalStorage
from deltalog.storage.s3 import S3Storage
from sharing.formats import FileContext
from sharing.formats.writers import writer_for
from sharing.presign import signing_helper
from sharing.presign.local import (
    LocalSigner,
    TableRef,
    UrlHolder,
    derive_master_key,
    table_key,
    url_signature,
)
from sharing.presign.prepared_hmac import PREFIXED, PreparedHmac
from sharing.presign.s3 import S3Signer
from sharing.presign.signing_helper import MIN_BATCH, SigningFailed, SigningHelper
from sharing.query.plan import FileSection, QueryPlan

NOW = 1_900_000_000.25
FILES = 3 * MIN_BATCH + 100  # three batches through the helper, a short one in the server
BATCH = MIN_BATCH
S3_ROOT = "lake-bucket/tables/events"
LOCAL_ROOT = "/lake/tables/events"
HOLDER = UrlHolder("recipient", "cred-1")


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: NOW)
    fixed = dt.datetime.fromtimestamp(NOW, dt.UTC)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *a, **k: fixed)


def _install(monkeypatch: pytest.MonkeyPatch, helper: SigningHelper) -> Iterator[SigningHelper]:
    monkeypatch.setattr(signing_helper, "HELPER", helper)
    try:
        yield helper
    finally:
        helper.close()


@pytest.fixture
def helper(monkeypatch: pytest.MonkeyPatch) -> Iterator[SigningHelper]:
    """A helper of this test's own (the real command), closed afterwards."""
    yield from _install(monkeypatch, SigningHelper())


def _files() -> pa.Table:
    rows: list[dict[str, Any]] = []
    for i in range(FILES):
        date = f"2024-01-{i % 28 + 1:02d}"
        name = f"part-{i:05d}-{uuid.UUID(int=i)}.parquet"
        path = f"date={date}/with%20space-{name}" if i % 401 == 7 else f"date={date}/{name}"
        rows.append(
            {
                "path": path,
                "partitionValues": [("date", date)],
                "size": 1000 + i,
                "modificationTime": 1_700_000_000_000 + i,
                "dataChange": True,
                "stats": f'{{"numRecords":{i}}}',
            }
        )
    return pa.Table.from_pylist(rows, schema=ADD_SCHEMA)


def _context(token: str | None = None) -> FileContext:
    signer = S3Signer(
        Credentials("AKIAEXAMPLE", "wJalr/K7+MDENG=", token),
        region="eu-west-1",
        table_root=S3_ROOT,
        ttl_seconds=3600,
        endpoint_url="http://127.0.0.1:9000",
        path_style=True,
    )
    return FileContext(S3Storage(), S3_ROOT, signer, "parquet")


def _plan(response_format: str, *, end_stream: bool = True, token: str | None = None) -> QueryPlan:
    return QueryPlan(
        3,
        response_format,
        b"HEAD\n",
        [FileSection(_files(), _context(token))],
        writer_for(response_format),
        end_stream=end_stream,
        header_end_stream=end_stream,
        batch_rows=BATCH,
    )


@functools.lru_cache(maxsize=2)
def _botocore(token: str | None) -> Any:
    session = boto3.Session(
        aws_access_key_id="AKIAEXAMPLE",
        aws_secret_access_key="wJalr/K7+MDENG=",
        aws_session_token=token,
    )
    return session.client(
        "s3",
        region_name="eu-west-1",
        endpoint_url="http://127.0.0.1:9000",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )


def _url(line: dict[str, Any], response_format: str) -> str:
    if response_format == "parquet":
        url: str = line["file"]["url"]
    else:
        url = line["file"]["deltaSingleAction"]["add"]["path"]
    return url


def _helper_cpu(helper: SigningHelper) -> float:
    process = helper._process
    assert process is not None and process.pid != os.getpid()
    with open(f"/proc/{process.pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("token", [None, "session-token/with+special="])
@pytest.mark.parametrize("response_format", ["parquet", "delta"])
def test_helper_signs_the_bytes_the_server_signs_and_botocore_does(
    helper: SigningHelper, response_format: str, token: str | None
) -> None:
    with_helper = b"".join(_plan(response_format, token=token).body())
    assert helper._process is not None and helper._process.poll() is None
    assert _helper_cpu(helper) > 0  # the helper did the hashing
    helper.enabled = False
    in_server = b"".join(_plan(response_format, token=token).body())
    assert with_helper == in_server

    lines = [orjson.loads(line) for line in with_helper.splitlines()[1:-1]]
    rows = _files().to_pylist()
    assert len(lines) == len(rows) == FILES
    bucket, _, prefix = S3_ROOT.partition("/")
    for line, row in zip(lines, rows, strict=True):
        expected = _botocore(token).generate_presigned_url(
            "get_object",
            Params={"Bucket": bucket, "Key": f"{prefix}/{unquote(row['path'])}"},
            ExpiresIn=3600,
        )
        assert _url(line, response_format) == expected


@pytest.mark.parametrize("response_format", ["parquet", "delta"])
def test_helper_signs_local_urls_the_file_endpoint_accepts(
    helper: SigningHelper, response_format: str
) -> None:
    signer = LocalSigner(
        secret="secret-for-helper-tests",
        base_url="http://lakeshare.test/",
        endpoint="/delta-sharing",
        table=TableRef("s", "d", "t"),
        table_root=LOCAL_ROOT,
        ttl_seconds=900,
        holder=HOLDER,
    )
    context = FileContext(LocalStorage(), LOCAL_ROOT, signer, response_format)

    def plan() -> QueryPlan:
        sections = [FileSection(_files(), context)]
        writer = writer_for(response_format)
        return QueryPlan(3, response_format, b"HEAD\n", sections, writer, batch_rows=BATCH)

    with_helper = b"".join(plan().body())
    assert helper._process is not None and _helper_cpu(helper) > 0
    helper.enabled = False
    assert b"".join(plan().body()) == with_helper

    key = table_key(derive_master_key("secret-for-helper-tests"), "s", "d", "t")
    expires = int(NOW * 1000) + 900_000
    lines = [orjson.loads(line) for line in with_helper.splitlines()[1:]]
    rows = _files().to_pylist()
    assert len(lines) == len(rows)
    for line, row in zip(lines, rows, strict=True):
        url = _url(line, response_format)
        relative = unquote(row["path"])
        assert url.endswith(f"&sig={url_signature(key, relative, expires, HOLDER)}"), url


def test_small_batches_never_start_a_helper(helper: SigningHelper) -> None:
    signer = _context().signer
    assert isinstance(signer, S3Signer)
    keys = pa.array([f"{S3_ROOT}/f{i}.parquet" for i in range(MIN_BATCH - 1)])
    signer.sign_column(keys)
    assert helper._process is None


def test_without_a_helper_the_server_signs_the_same_urls(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    expected = b"".join(_plan("parquet").body())  # the real helper (the module's own)
    missing = SigningHelper([sys.executable + "-does-not-exist"])
    for _ in _install(monkeypatch, missing):
        with caplog.at_level(logging.WARNING, "lakeshare.signing"):
            assert b"".join(_plan("parquet").body()) == expected
        assert missing._process is None
        assert "cannot start the signing helper" in caplog.text


def test_helper_killed_mid_response_leaves_the_response_whole(
    helper: SigningHelper, caplog: pytest.LogCaptureFixture
) -> None:
    helper.enabled = False
    expected = b"".join(_plan("delta").body(ahead=False))
    helper.enabled = True
    chunks = []
    with caplog.at_level(logging.WARNING, "lakeshare.signing"):
        for chunk in _plan("delta").body(ahead=False):
            chunks.append(chunk)
            if len(chunks) == 2:  # the head and the first batch, signed by the helper
                assert helper._process is not None
                os.kill(helper._process.pid, signal.SIGKILL)
                helper._process.wait()
    assert b"".join(chunks) == expected
    assert "the signing helper ended" in caplog.text
    assert helper._process is None  # not restarted before RETRY_AFTER_SECONDS


@pytest.mark.timeout(60)
def test_helper_that_stops_answering_is_dropped_and_the_response_left_whole(
    helper: SigningHelper, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The real helper SIGSTOPped after the first batch: the next batch waits for it no
    longer than its bound, then the helper is killed and reaped and the batch (and the
    rest) signed in the server, the same bytes. (The bound's base is shortened to keep the
    test short; without a bound the response waited forever.)"""
    monkeypatch.setattr(signing_helper, "ANSWER_TIMEOUT_BASE_SECONDS", 1.0)
    helper.enabled = False
    expected = b"".join(_plan("delta").body(ahead=False))
    helper.enabled = True
    chunks = []
    stopped = None
    with caplog.at_level(logging.WARNING, "lakeshare.signing"):
        for chunk in _plan("delta").body(ahead=False):
            chunks.append(chunk)
            if len(chunks) == 2:  # the head and the first batch, signed by the helper
                stopped = helper._process
                assert stopped is not None
                os.kill(stopped.pid, signal.SIGSTOP)
                started = time.monotonic()
    waited = time.monotonic() - started
    assert b"".join(chunks) == expected
    assert stopped is not None and stopped.returncode == -signal.SIGKILL  # killed and reaped
    assert helper._process is None  # not restarted before RETRY_AFTER_SECONDS
    assert "did not answer within" in caplog.text
    assert 1.0 <= waited < 10


# A helper that signs `GOOD` batches with the real code, then answers every batch with
# what `REPLY` says (after reading the request whole, as the real one does).
_FAULTY = """
import io, sys
sys.path.insert(0, {root!r})
from sharing.presign import prepared_hmac as p
good = {good}
reader, writer = sys.stdin.buffer, sys.stdout.buffer
while True:
    header = reader.read(p.REQUEST.size)
    if len(header) < p.REQUEST.size:
        break
    kind, key, head, count, data = p.REQUEST.unpack(header)
    body = reader.read(key + head + 4 * (count + 1) + data)
    if good > 0:
        good -= 1
        p.serve(io.BytesIO(header + body), writer)
        continue
    {reply}
    writer.flush()
"""
_ERROR = (
    "message = b'ValueError: bad'; writer.write(p.REPLY.pack(p.FAILED, len(message)) + message)"
)
_SHORT = "writer.write(p.REPLY.pack(p.OK, 32 * count - 32) + bytes(32 * count - 32))"


def _faulty(reply: str, good: int) -> SigningHelper:
    root = str(os.path.dirname(os.path.dirname(os.path.abspath(signing_helper.__file__))))
    script = _FAULTY.format(root=os.path.dirname(root), good=good, reply=reply)
    return SigningHelper([sys.executable, "-c", script])


@pytest.mark.parametrize("reply", [_ERROR, _SHORT], ids=["error", "malformed"])
def test_helper_failing_mid_response_fails_it_cleanly(
    monkeypatch: pytest.MonkeyPatch, reply: str
) -> None:
    # With includeEndStreamAction: the last line is an end-stream action with the error.
    for _ in _install(monkeypatch, _faulty(reply, good=1)):
        body = b"".join(_plan("parquet").body(ahead=False))
    lines = body.splitlines()
    assert len(lines) == 1 + MIN_BATCH + 1  # the head, the helper's good batch, the end
    assert orjson.loads(lines[-1]) == {
        "endStreamAction": {
            "errorMessage": "Internal error while streaming the response.",
            "httpStatusErrorCode": 500,
        }
    }

    # Without it: the body raises after the first batch (the server cuts the connection).
    for _ in _install(monkeypatch, _faulty(reply, good=1)):
        body_chunks = _plan("parquet", end_stream=False).body()
        assert next(body_chunks) == b"HEAD\n"
        assert bytes(next(body_chunks)).count(b"\n") == MIN_BATCH
        with pytest.raises(SigningFailed):
            next(body_chunks)


# A helper signing with the real code, its first reply slow: the head after a pause, the
# digests after another.
_SLOW_FIRST = """
import io, sys, time
sys.path.insert(0, {root!r})
from sharing.presign import prepared_hmac as p
pause = 1.0
reader, writer = sys.stdin.buffer, sys.stdout.buffer
while True:
    header = reader.read(p.REQUEST.size)
    if len(header) < p.REQUEST.size:
        break
    kind, key, head, count, data = p.REQUEST.unpack(header)
    body = reader.read(key + head + 4 * (count + 1) + data)
    reply = io.BytesIO()
    p.serve(io.BytesIO(header + body), reply)
    answer = reply.getvalue()
    time.sleep(pause)
    writer.write(answer[: p.REPLY.size])
    writer.flush()
    time.sleep(pause)
    writer.write(answer[p.REPLY.size :])
    writer.flush()
    pause = 0.0
"""


class _Interrupted(Exception):
    """Raised in the signing thread from outside (as a MemoryError would be from inside)."""


def test_helper_interrupted_mid_reply_never_hands_its_rest_to_the_next_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The signing thread interrupted between a reply's head and its digests: the helper is
    dropped, and the next batch gets its own signatures. Before, the digests left in the
    pipe were read as the next batch's reply (a stuck read, or another batch's
    signatures)."""
    root = os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(signing_helper.__file__)))
    )
    slow = SigningHelper([sys.executable, "-c", _SLOW_FIRST.format(root=root)])
    mac_key = b"k" * 32
    mac = PreparedHmac(mac_key)
    first = pa.array([f"first-{i}".encode() for i in range(MIN_BATCH)], pa.binary())
    second = pa.array([f"second-{i}".encode() for i in range(MIN_BATCH)], pa.binary())
    outcome: list[BaseException] = []
    result: list[bytes] = []

    def sign_first() -> None:
        try:
            signing_helper.digests(PREFIXED, mac, mac_key, b"p", first)
        except BaseException as exc:  # what the thread ended with
            outcome.append(exc)

    def sign_second() -> None:
        result.append(signing_helper.digests(PREFIXED, mac, mac_key, b"p", second))

    for _ in _install(monkeypatch, slow):
        thread = threading.Thread(target=sign_first)
        thread.start()
        time.sleep(0.3)  # ... the thread waits for the reply's head
        assert thread.ident is not None
        raised = ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(thread.ident), ctypes.py_object(_Interrupted)
        )
        assert raised == 1
        thread.join(timeout=30)
        assert [type(e) for e in outcome] == [_Interrupted]

        thread = threading.Thread(target=sign_second, daemon=True)
        thread.start()
        thread.join(timeout=20)
        stuck = not result
        if stuck and slow._process is not None:
            slow._process.kill()  # ends the stuck read, so that the helper can be closed
        assert not stuck, "the next batch's signing is stuck on the previous reply's rest"
        slow.enabled = False  # the server's own threads: the same kernel
        assert result[0] == signing_helper.digests(PREFIXED, mac, mac_key, b"p", second)


@pytest.mark.slow
def test_helper_signed_urls_fetch_from_moto(moto_s3: str, helper: SigningHelper) -> None:
    options = {
        "endpoint_url": moto_s3,
        "region": "us-east-1",
        "access_key_id": "testing",
        "secret_access_key": "testing",
        "path_style": True,
    }
    storage = S3Storage(options)
    storage.client.create_bucket(Bucket="helper-signed")
    names = [f"t/date=2024-01-0{i % 3}/part-{i}.parquet" for i in range(MIN_BATCH + 10)]
    stored = {0: b"first", 1234: b"middle", len(names) - 1: b"last"}
    for i, body in stored.items():
        storage.client.put_object(Bucket="helper-signed", Key=names[i], Body=body)
    signer = S3Signer.for_storage(storage, table_root="helper-signed/t", ttl_seconds=3600)
    urls = signer.sign([f"helper-signed/{name}" for name in names]).urls
    assert helper._process is not None and _helper_cpu(helper) > 0
    for i, body in stored.items():
        with urllib.request.urlopen(urls[i], timeout=10) as response:
            assert response.read() == body


def test_responses_rendered_on_the_event_loop_never_wait_for_the_helper() -> None:
    from sharing.query.small import SMALL_PLAN_FILES

    assert SMALL_PLAN_FILES < MIN_BATCH

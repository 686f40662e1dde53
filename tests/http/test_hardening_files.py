"""Issue 11, item 5: the file route opens, sizes and reads the file before it sends a status
line, so a data file the server cannot read is a JSON error with an ERROR log line, never a
`200 OK` followed by a cut-off body (GET and HEAD alike).

File modes do not apply to root, so the server runs as `lakeshare serve` in a child process
without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH (setpriv) when the tests run as root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
import yaml

from sharing.errors import ResourceNotFound
from sharing.presign.local_verify import (
    CHUNK_BYTES,
    LocalFile,
    OpenedFile,
    RangeNotSatisfiable,
)
from tests.support.corpus import CORPUS
from tests.support.processes import free_port, stop, wait_http
from tests.support.requirements import require
from tests.support.server import TEST_BEARER_TOKEN, TEST_SIGNING_SECRET

BASIC = CORPUS / "levi/dat/basic_append/delta"
TABLE = "/delta-sharing/shares/s/schemas/d/tables/basic"


def _without_file_privileges() -> list[str]:
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    require(setpriv is not None, "setpriv (util-linux) to drop root's file privileges")
    drop = "-dac_override,-dac_read_search"
    return [str(setpriv), "--bounding-set", drop, "--inh-caps", drop, "--"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    """(base URL, table copy, server log) with one data file of the table made unreadable."""
    work = tmp_path_factory.mktemp("unreadable")
    table = work / "basic"
    shutil.copytree(BASIC, table)
    port = free_port()
    config = {
        "version": 1,
        "host": "127.0.0.1",
        "port": port,
        "authorization": {"bearerToken": TEST_BEARER_TOKEN},
        "signingSecret": TEST_SIGNING_SECRET,
        "shares": [
            {
                "name": "s",
                "schemas": [{"name": "d", "tables": [{"name": "basic", "location": str(table)}]}],
            }
        ],
    }
    config_path = work / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    log_path = work / "server.log"
    command = [
        *_without_file_privileges(),
        sys.executable,
        "-c",
        "import sys; from app.cli import main; sys.exit(main(sys.argv[1:]))",
        "serve",
        "--config",
        str(config_path),
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=os.getcwd())
        try:
            wait_http(f"http://127.0.0.1:{port}/healthz", process)
            yield f"http://127.0.0.1:{port}", table, log_path
        finally:
            stop(process)


def _file_urls(base: str) -> list[str]:
    response = httpx.post(
        base + TABLE + "/query",
        headers={"Authorization": f"Bearer {TEST_BEARER_TOKEN}"},
        json={},
    )
    assert response.status_code == 200
    return [orjson.loads(line)["file"]["url"] for line in response.text.splitlines()[2:]]


@pytest.mark.slow
def test_unreadable_file_is_a_json_error_for_get_and_head_with_an_error_log(
    served: tuple[str, Path, Path],
) -> None:
    base, table, log_path = served
    urls = _file_urls(base)
    victim_url = urls[0]
    name = httpx.URL(victim_url).path.rsplit("/", 1)[1]
    victim = table / name
    victim.chmod(0)
    try:
        for method in ("GET", "HEAD"):
            response = httpx.request(method, victim_url)
            assert response.status_code == 403, (method, response.status_code)
            assert response.headers["content-type"].startswith("application/json")
            if method == "GET":
                error = response.json()
                assert error["errorCode"] == "PERMISSION_DENIED"
                assert name not in error["message"]  # nothing about the disk for the client
        ranged = httpx.get(victim_url, headers={"Range": "bytes=0-3"})
        assert ranged.status_code == 403
    finally:
        victim.chmod(0o644)
    # The other files, and the same one once readable, are served whole.
    for url in urls[:2]:
        whole = httpx.get(url)
        assert whole.status_code == 200
        assert whole.content == (table / httpx.URL(url).path.rsplit("/", 1)[1]).read_bytes()
    lines = [orjson.loads(line) for line in log_path.read_bytes().splitlines() if line[:1] == b"{"]
    errors = [line for line in lines if line["level"] == "ERROR" and name in line["msg"]]
    assert errors, "no ERROR line names the unreadable file"
    assert not any("sig=" in line["msg"] for line in lines)


def test_opened_file_reads_before_the_reply_and_streams_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    data = os.urandom(3 * 1024 * 1024 + 17)
    path.write_bytes(data)
    found = LocalFile(str(path), len(data))
    whole = OpenedFile(found, None, head=False)
    assert whole.reply.status == 200 and whole.reply.headers["Content-Length"] == str(len(data))
    assert b"".join(whole.chunks()) == data
    part = OpenedFile(found, "bytes=1048570-1048585", head=False)
    assert part.reply.status == 206 and b"".join(part.chunks()) == data[1048570:1048586]
    head = OpenedFile(found, None, head=True)
    head.close()
    assert head.reply.headers["Content-Length"] == str(len(data))


def test_a_body_of_one_chunk_is_read_whole_while_opening(tmp_path: Path) -> None:
    """Up to CHUNK_BYTES, the body is read while opening and the file closed at once: the
    route answers with one plain response instead of a streamed one (a streamed response
    costs the server about as much CPU again for a small file)."""
    path = tmp_path / "f.bin"
    data = os.urandom(CHUNK_BYTES + 5)
    path.write_bytes(data)
    found = LocalFile(str(path), len(data))
    small = tmp_path / "small.bin"
    small.write_bytes(data[:100])
    whole = OpenedFile(LocalFile(str(small), 100), None, head=False)
    assert whole.body == data[:100] and whole._file.closed
    ranged = OpenedFile(found, f"bytes=5-{CHUNK_BYTES + 4}", head=False)
    assert ranged.reply.status == 206 and ranged.body == data[5:]
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    assert OpenedFile(LocalFile(str(empty), 0), None, head=False).body == b""
    large = OpenedFile(found, None, head=False)
    assert large.body is None and not large._file.closed  # streamed by chunks()
    assert b"".join(large.chunks()) == data
    head = OpenedFile(LocalFile(str(small), 100), None, head=True)
    assert head.body is None
    head.close()


def test_opened_file_uses_the_size_of_what_it_opened(tmp_path: Path) -> None:
    """The size from the verification step may be stale (file replaced): the reply
    describes the file actually opened."""
    path = tmp_path / "f.bin"
    path.write_bytes(b"0123456789")
    stale = LocalFile(str(path), 4)
    opened = OpenedFile(stale, None, head=False)
    assert opened.reply.headers["Content-Length"] == "10"
    assert b"".join(opened.chunks()) == b"0123456789"


def test_vanished_or_unsatisfiable_files_fail_before_any_header(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"0123456789")
    found = LocalFile(str(path), 10)
    with pytest.raises(RangeNotSatisfiable):
        OpenedFile(found, "bytes=10-", head=False)
    path.unlink()
    with pytest.raises(ResourceNotFound):
        OpenedFile(found, None, head=False)

"""A GCS query response with slow signing: sequential batches vs signed ahead.

    .venv/bin/python bench/gcs_stream.py [--files 20000] [--batch-rows 10000]
        [--client-mbps 50] [--iam-files 4000] [--iam-rtt-ms 20] [--json out.json]

Streams the body of a parquet-format snapshot response (sharing.query.snapshot.QueryPlan,
the real writer and GcsSigner) and reports the time to the first file line and in total:

* RSA: a local service-account key, reader draining as fast as it can, then a reader at
  `--client-mbps` (the response crossing a network). Local RSA holds the GIL, so signing
  ahead can only hide the writing, not speed up the signing itself;
* signBlob: URLs signed through a stand-in IAM Credentials server on 127.0.0.1 (its own
  process, so it does not share this one's GIL) that answers after `--iam-rtt-ms` with a
  canned signature: only the round trips are measured. `--iam-files` files in batches of
  a tenth of them.

"sequential" is the same signer with `parallel_batches = 0` (the path fast signers take).
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.auth import credentials as ga_credentials

from deltalog.actions import ADD_SCHEMA
from deltalog.storage.gcs import GcsStorage
from sharing.formats import FileContext
from sharing.formats.writers import writer_for
from sharing.presign.gcs import GcsSigner, IamKey, RsaKey
from sharing.presign.gcs_iam import IamBlobSigner
from sharing.query.plan import FileSection, QueryPlan

EMAIL = "bench@bench.iam.gserviceaccount.com"


def files(count: int) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "path": f"date=2024-01-{i % 28 + 1:02d}/part-{i:05d}-c000.snappy.parquet",
                "partitionValues": [("date", f"2024-01-{i % 28 + 1:02d}")],
                "size": 100_000 + i,
                "stats": '{"numRecords":1000,"minValues":{"id":1},"maxValues":{"id":9}}',
            }
            for i in range(count)
        ],
        schema=ADD_SCHEMA,
    )


def stream(signer: GcsSigner, table: pa.Table, batch_rows: int, mbps: float | None) -> dict:
    """Drain one response body; with `mbps`, each chunk takes its time on the wire."""
    ctx = FileContext(GcsStorage({"anonymous": True}), "lake/t", signer, "parquet")
    sections = [FileSection(table, ctx)]
    plan = QueryPlan(
        1, "parquet", b"HEAD\n", sections, writer_for("parquet"), batch_rows=batch_rows
    )
    start = time.perf_counter()
    first = None
    size = 0
    for chunk in plan.body():
        if first is None and b'"file"' in chunk:
            first = time.perf_counter() - start
        size += len(chunk)
        if mbps:
            time.sleep(len(chunk) * 8 / (mbps * 1e6))
    return {"first_file_line_s": first, "total_s": time.perf_counter() - start, "bytes": size}


def compare(label: str, signer: GcsSigner, table: pa.Table, rows: int, mbps: float | None) -> dict:
    ahead = signer.parallel_batches
    signer.parallel_batches = 0
    sequential = stream(signer, table, rows, mbps)
    signer.parallel_batches = ahead
    pipelined = stream(signer, table, rows, mbps)
    assert sequential["bytes"] == pipelined["bytes"]
    return {
        "label": label,
        "files": table.num_rows,
        "batch_rows": rows,
        "parallel_batches": ahead,
        "sequential": sequential,
        "pipelined": pipelined,
    }


class _Token(ga_credentials.Credentials):
    def refresh(self, request: Any) -> None:
        self.token = "bench-token"


def serve_signblob(rtt: float) -> None:
    """Run the stand-in: answers every POST after `rtt` seconds with a fixed 256-byte
    signature; prints its port, serves until killed."""
    body = json.dumps({"keyId": "k", "signedBlob": base64.b64encode(b"\x01" * 256).decode()})
    data = body.encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        wbufsize = 1 << 16  # head and body in one write: no delayed-ACK stall per call

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            time.sleep(rtt)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


def _stand_in(rtt_ms: float) -> Iterator[str]:
    """The stand-in in a child process; yields its endpoint, stops it afterwards."""
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve-signblob", str(rtt_ms)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        yield f"http://127.0.0.1:{int(child.stdout.readline())}"
    finally:
        child.terminate()
        child.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--batch-rows", type=int, default=10_000)
    parser.add_argument("--client-mbps", type=float, default=50.0)
    parser.add_argument("--iam-files", type=int, default=4_000)
    parser.add_argument("--iam-rtt-ms", type=float, default=20.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--serve-signblob", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_signblob is not None:
        serve_signblob(args.serve_signblob / 1000)
        return

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    rsa_signer = GcsSigner(
        RsaKey.from_service_account({"client_email": EMAIL, "private_key": pem}),
        table_root="lake/t",
        ttl_seconds=3600,
    )
    table = files(args.files)
    rows = [
        compare("RSA, fast reader", rsa_signer, table, args.batch_rows, None),
        compare(
            f"RSA, {args.client_mbps:g} Mbit/s reader",
            rsa_signer,
            table,
            args.batch_rows,
            args.client_mbps,
        ),
    ]
    stand_in = _stand_in(args.iam_rtt_ms)
    endpoint = next(stand_in)
    try:
        iam_signer = GcsSigner(
            IamKey(IamBlobSigner(_Token(), email=EMAIL, endpoint=endpoint)),
            table_root="lake/t",
            ttl_seconds=3600,
        )
        iam_rows = max(1, args.iam_files // 10)
        label = f"signBlob {args.iam_rtt_ms:g} ms, fast reader"
        rows.append(compare(label, iam_signer, files(args.iam_files), iam_rows, None))
    finally:
        stand_in.close()

    print(
        f"{'scenario':34} {'files':>6} {'batch':>6} {'k':>2}  {'first line s':>14}  {'total s':>14}"
    )
    for row in rows:
        seq, pipe = row["sequential"], row["pipelined"]
        print(
            f"{row['label']:34} {row['files']:>6} {row['batch_rows']:>6} "
            f"{row['parallel_batches']:>2}  "
            f"{seq['first_file_line_s']:>6.2f} -> {pipe['first_file_line_s']:<5.2f}  "
            f"{seq['total_s']:>6.2f} -> {pipe['total_s']:<5.2f} "
            f"({pipe['total_s'] / seq['total_s']:.2f}x)"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

"""Pre-signed URL throughput per cloud: our signers next to each SDK's own function.

    .venv/bin/python bench/presign.py [--urls 100000] [--json out.json]

Our signers sign `--urls` keys in one batch (the way the response writer calls them). The
SDK baselines are far slower, so they sign fewer URLs (see SDK_SHARE) and their rate is
extrapolated to the same count; the output says how many each really signed. Keys look like
real Delta data files (a partition directory and a UUID name). Goals: S3 >= 10x boto3,
Azure >= 2.5x generate_blob_sas, GCS HMAC >= 10x our own RSA.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import boto3
from azure.storage.blob import BlobSasPermissions, generate_blob_sas
from botocore.config import Config
from botocore.credentials import Credentials
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage as gcs
from google.oauth2 import service_account

from sharing.presign.azure import AzureSigner
from sharing.presign.gcs import GcsSigner, HmacKey, RsaKey
from sharing.presign.s3 import S3Signer

AZURE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
SDK_SHARE = {"boto3": 20, "azure-sdk": 5, "gcs-sdk-rsa": 100, "ours-rsa": 50}  # 1/n of --urls


def names(count: int) -> list[str]:
    return [
        f"date=2024-01-{i % 28 + 1:02d}/part-{i:05d}-{uuid.uuid4()}-c000.snappy.parquet"
        for i in range(count)
    ]


def timed(label: str, count: int, run: Callable[[], object], signed: int | None = None) -> dict:
    """Run once, return URLs per second and the time extrapolated to `count` URLs."""
    signed = signed or count
    start = time.perf_counter()
    run()
    elapsed = time.perf_counter() - start
    rate = signed / elapsed
    return {
        "label": label,
        "signed": signed,
        "seconds": elapsed,
        "per_second": rate,
        "for_count": count / rate,
    }


def bench_s3(count: int) -> list[dict]:
    keys = [f"bucket/tables/t/{n}" for n in names(count)]
    signer = S3Signer(
        Credentials("AKIAEXAMPLE", "wJalrXUtnFEMI/K7MDENG", "session-token"),
        region="eu-west-1",
        table_root="bucket/tables/t",
        ttl_seconds=3600,
    )
    client = boto3.Session(
        aws_access_key_id="AKIAEXAMPLE",
        aws_secret_access_key="wJalrXUtnFEMI/K7MDENG",
        aws_session_token="session-token",
    ).client(
        "s3",
        region_name="eu-west-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "virtual"}),
    )
    few = keys[: max(1, count // SDK_SHARE["boto3"])]

    def sdk() -> None:
        for key in few:
            client.generate_presigned_url(
                "get_object", Params={"Bucket": "bucket", "Key": key[7:]}, ExpiresIn=3600
            )

    return [
        timed("s3 boto3 generate_presigned_url", count, sdk, len(few)),
        timed("s3 ours S3Signer", count, lambda: signer.sign(keys)),
    ]


def bench_azure(count: int) -> list[dict]:
    keys = [f"lake/tables/t/{n}" for n in names(count)]
    signer = AzureSigner("acct", AZURE_KEY, table_root="lake/tables/t", ttl_seconds=3600)
    few = keys[: max(1, count // SDK_SHARE["azure-sdk"])]
    read = BlobSasPermissions(read=True)

    def sdk() -> None:
        # the SDK's way to make the same URL: a token per blob, then the URL around it
        base = "https://acct.blob.core.windows.net/lake/"
        for key in few:
            expiry = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=3600)
            name = key[5:]
            token = generate_blob_sas(
                "acct",
                "lake",
                name,
                account_key=AZURE_KEY,
                permission=read,
                expiry=expiry,
                protocol="https",
            )
            _ = f"{base}{name}?{token}"

    return [
        timed("azure sdk generate_blob_sas", count, sdk, len(few)),
        timed("azure ours AzureSigner", count, lambda: signer.sign(keys)),
    ]


def bench_gcs(count: int) -> list[dict]:
    keys = [f"lake/tables/t/{n}" for n in names(count)]
    private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    info = {
        "type": "service_account",
        "project_id": "bench",
        "private_key_id": "0",
        "private_key": private_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode(),
        "client_email": "bench@bench.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": "https://oauth2.googleapis.com/token",
    }
    credentials = service_account.Credentials.from_service_account_info(info)
    bucket = gcs.Client(project="bench", credentials=AnonymousCredentials()).bucket("lake")
    rsa_signer = GcsSigner(
        RsaKey.from_service_account(info), table_root="lake/tables/t", ttl_seconds=3600
    )
    hmac_signer = GcsSigner(
        HmacKey("GOOG1BENCH", "secret/+key"), table_root="lake/tables/t", ttl_seconds=3600
    )
    sdk_few = keys[: max(1, count // SDK_SHARE["gcs-sdk-rsa"])]
    rsa_few = keys[: max(1, count // SDK_SHARE["ours-rsa"])]
    expiration = dt.timedelta(seconds=3600)

    def sdk() -> None:
        for key in sdk_few:
            bucket.blob(key[5:]).generate_signed_url(
                version="v4", expiration=expiration, method="GET", credentials=credentials
            )

    return [
        timed("gcs sdk Blob.generate_signed_url (RSA)", count, sdk, len(sdk_few)),
        timed("gcs ours GcsSigner RSA", count, lambda: rsa_signer.sign(rsa_few), len(rsa_few)),
        timed("gcs ours GcsSigner HMAC", count, lambda: hmac_signer.sign(keys)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--urls", type=int, default=100_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = bench_s3(args.urls) + bench_azure(args.urls) + bench_gcs(args.urls)
    print(f"{'signer':42} {'signed':>8} {'URLs/s':>10} {f's per {args.urls:,}':>14}")
    for row in rows:
        note = "" if row["signed"] == args.urls else " (extrapolated)"
        label, signed, rate = row["label"], row["signed"], row["per_second"]
        print(f"{label:42} {signed:>8} {rate:>10,.0f} {row['for_count']:>14.2f}{note}")
    rate = {row["label"]: row["per_second"] for row in rows}
    ratios = {
        "s3 ours / boto3": rate["s3 ours S3Signer"] / rate["s3 boto3 generate_presigned_url"],
        "azure ours / sdk": rate["azure ours AzureSigner"] / rate["azure sdk generate_blob_sas"],
        "gcs ours HMAC / ours RSA": rate["gcs ours GcsSigner HMAC"]
        / rate["gcs ours GcsSigner RSA"],
        "gcs ours RSA / sdk RSA": rate["gcs ours GcsSigner RSA"]
        / rate["gcs sdk Blob.generate_signed_url (RSA)"],
    }
    for label, ratio in ratios.items():
        print(f"{label:42} {ratio:>8.1f}x")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "ratios": ratios}, indent=2))


if __name__ == "__main__":
    main()

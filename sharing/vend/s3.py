"""AWS temporary credentials scoped to one table directory.

With a `roleArn` in the table's storage options, STS `AssumeRole` on that role from the
server's base credentials (not from the role's own session, which would be role chaining)
with an inline session policy; without one, `GetFederationToken` with the same policy
(needs IAM user credentials). The policy allows `s3:GetObject` under `bucket/prefix/` and
`s3:ListBucket` only for keys under that prefix; when STS finds it too large once packed,
it falls back to GetObject alone, as the reference server does. The STS endpoint is the
table's `endpointUrl` when one is set (S3-compatible stores with STS, emulators).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from deltalog.storage.s3 import S3Storage
from sharing.errors import SharingError
from sharing.temp_credentials import CloudLocation, TemporaryCredentials

__all__ = ["session_policy", "vend"]

log = logging.getLogger(__name__)

MIN_DURATION = 900  # STS refuses shorter sessions
MAX_ASSUME_ROLE = 3600
MAX_FEDERATION = 129_600


def _partition(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def session_policy(bucket: str, prefix: str, region: str, *, with_list: bool = True) -> str:
    """The inline policy: read objects under `prefix/`, list only keys under it."""
    arn = f"arn:{_partition(region)}:s3:::{bucket}"
    objects = f"{arn}/{prefix}/*" if prefix else f"{arn}/*"
    statements: list[dict[str, Any]] = [
        {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": [objects]}
    ]
    if with_list:
        listed = [prefix, f"{prefix}/*"] if prefix else ["*"]
        statements.append(
            {
                "Effect": "Allow",
                "Action": ["s3:ListBucket"],
                "Resource": [arn],
                "Condition": {"StringLike": {"s3:prefix": listed}},
            }
        )
    return json.dumps({"Version": "2012-10-17", "Statement": statements}, separators=(",", ":"))


def _base_session(storage: S3Storage) -> boto3.Session:
    """The server's own credentials, before any role of the table's options is assumed."""
    o = storage.options
    return boto3.Session(
        profile_name=o.profile,
        aws_access_key_id=o.access_key_id,
        aws_secret_access_key=o.secret_access_key,
        aws_session_token=o.session_token,
        region_name=o.region,
    )


def _request(storage: S3Storage, region: str, policy: str, duration: int) -> dict[str, Any]:
    o = storage.options
    sts = _base_session(storage).client(
        "sts", region_name=region, endpoint_url=o.endpoint_url or None
    )
    if o.role_arn:
        extra = {"ExternalId": o.external_id} if o.external_id else {}
        return sts.assume_role(
            RoleArn=o.role_arn,
            RoleSessionName=o.role_session_name,
            Policy=policy,
            DurationSeconds=min(max(duration, MIN_DURATION), MAX_ASSUME_ROLE),
            **extra,
        )
    return sts.get_federation_token(
        Name=o.role_session_name[:32],
        Policy=policy,
        DurationSeconds=min(max(duration, MIN_DURATION), MAX_FEDERATION),
    )


def vend(
    storage: S3Storage, location: str, parsed: CloudLocation, validity_seconds: int
) -> TemporaryCredentials:
    """STS credentials that can read (and list) `parsed` only."""
    bucket, prefix = parsed.bucket, parsed.prefix
    region = storage.bucket_region(bucket)
    try:
        try:
            answer = _request(
                storage, region, session_policy(bucket, prefix, region), validity_seconds
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "PackedPolicyTooLarge":
                raise
            policy = session_policy(bucket, prefix, region, with_list=False)
            answer = _request(storage, region, policy, validity_seconds)
    except (ClientError, BotoCoreError) as exc:
        code = (
            exc.response.get("Error", {}).get("Code")
            if isinstance(exc, ClientError)
            else type(exc).__name__
        )
        log.error("STS refused temporary credentials for %s: %s", location, code)
        raise SharingError(
            "Temporary credentials could not be issued; the provider has been notified."
        ) from exc
    credentials = answer["Credentials"]
    return TemporaryCredentials(
        location=location,
        kind="awsTempCredentials",
        values={
            "accessKeyId": credentials["AccessKeyId"],
            "secretAccessKey": credentials["SecretAccessKey"],
            "sessionToken": credentials["SessionToken"],
        },
        expiration_ms=int(credentials["Expiration"].timestamp() * 1000),
    )

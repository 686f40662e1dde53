"""AWS temporary credentials scoped to one table directory.

With a `roleArn` in the table's storage options, STS `AssumeRole` on that role from the
server's base credentials (not from the role's own session, which would be role chaining)
with an inline session policy; without one, `GetFederationToken` with the same policy
(it needs long-term IAM user credentials). The policy allows `s3:GetObject` under
`bucket/prefix/` and `s3:ListBucket` only for listing prefixes under `prefix/` (a listing
of `prefix` without the slash would also name the objects of a sibling `prefix2/`); when
STS finds it too large once packed, it falls back to GetObject alone, as the reference
server does. The STS endpoint is the table's `endpointUrl` when one is set
(S3-compatible stores with STS, emulators).
"""

from __future__ import annotations

import json
import re
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from deltalog.storage.base import Storage
from deltalog.storage.kinds import as_backend
from deltalog.storage.s3 import S3Storage
from sharing.credentials.base import NotVendable, TemporaryCredentials
from sharing.credentials.location import CloudLocation

__all__ = ["check", "session_policy", "vend"]

MIN_DURATION = 900  # STS refuses shorter sessions
MAX_ASSUME_ROLE = 3600
MAX_FEDERATION = 129_600


def _partition(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def session_policy(
    bucket: str,
    prefix: str,
    region: str,
    *,
    with_list: bool = True,
    also: Sequence[tuple[str, str]] = (),
) -> str:
    """The inline policy: read objects under `prefix/` (and under each (bucket, prefix) of
    `also`), list only prefixes under them."""
    partition = _partition(region)
    locations = [(b, _literal(p)) for b, p in [(bucket, prefix), *also]]
    objects = [
        f"arn:{partition}:s3:::{b}/{p}/*" if p else f"arn:{partition}:s3:::{b}/*"
        for b, p in locations
    ]
    statements: list[dict[str, Any]] = [
        {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": objects}
    ]
    if with_list:
        listed: dict[str, list[str]] = {}
        for b, p in locations:
            listed.setdefault(b, []).append(f"{p}/*" if p else "*")
        for b, prefixes in listed.items():
            statements.append(
                {
                    "Effect": "Allow",
                    "Action": ["s3:ListBucket"],
                    "Resource": [f"arn:{partition}:s3:::{b}"],
                    "Condition": {"StringLike": {"s3:prefix": prefixes}},
                }
            )
    return json.dumps({"Version": "2012-10-17", "Statement": statements}, separators=(",", ":"))


def _literal(prefix: str) -> str:
    """A prefix as policy text matching only itself: `*`, `?` and `$` are legal in object
    names but a wildcard or a policy variable in a Resource or StringLike value (IAM's
    `${*}`, `${?}`, `${$}` stand for the characters)."""
    return re.sub(r"[*?$]", lambda m: "${" + m.group(0) + "}", prefix)


_STS_CLIENTS: weakref.WeakKeyDictionary[S3Storage, dict[str, Any]] = weakref.WeakKeyDictionary()
_STS_LOCK = threading.Lock()


def _sts_client(storage: S3Storage, region: str) -> Any:
    """The STS client of a storage's own credentials (`base_session`, before any role of
    its options is assumed) for a region: one per storage and region, as a client is safe
    to share between threads and making one per vend re-reads its configuration."""
    with _STS_LOCK:  # making a client from a session is not thread-safe
        clients = _STS_CLIENTS.setdefault(storage, {})
        client = clients.get(region)
        if client is None:
            client = clients[region] = storage.base_session.client(
                "sts", region_name=region, endpoint_url=storage.options.endpoint_url or None
            )
        return client


def check(storage: Storage, table: CloudLocation) -> None:
    """NotVendable when the server's AWS credentials cannot ask STS for scoped ones."""
    del table  # a session policy scopes any prefix
    s3 = as_backend(storage, S3Storage)
    try:
        credentials = s3.base_session.get_credentials()
    except BotoCoreError as exc:  # e.g. a credential_process that fails
        raise NotVendable(
            "the server has no AWS credentials to request them with",
            f"the table's AWS credentials cannot be loaded: {type(exc).__name__}",
        ) from exc
    if credentials is None:
        raise NotVendable(
            "the server has no AWS credentials to request them with",
            "no AWS credentials for STS: set accessKeyId/secretAccessKey, profile or roleArn "
            "in the table's storage options, or provide boto3's default credentials",
        )
    if not s3.options.role_arn and credentials.get_frozen_credentials().token:
        raise NotVendable(
            "the server's AWS credentials cannot request federation tokens",
            "GetFederationToken needs long-term IAM user credentials, the table's are "
            "temporary (they carry a session token): set roleArn in its storage options to "
            "vend through AssumeRole",
        )


def _request(storage: S3Storage, region: str, policy: str, duration: int) -> dict[str, Any]:
    o = storage.options
    sts = _sts_client(storage, region)
    answer: dict[str, Any]
    if o.role_arn:
        extra = {"ExternalId": o.external_id} if o.external_id else {}
        answer = sts.assume_role(
            RoleArn=o.role_arn,
            RoleSessionName=o.role_session_name,
            Policy=policy,
            DurationSeconds=min(max(duration, MIN_DURATION), MAX_ASSUME_ROLE),
            **extra,
        )
    else:
        answer = sts.get_federation_token(
            Name=o.role_session_name[:32],
            Policy=policy,
            DurationSeconds=min(max(duration, MIN_DURATION), MAX_FEDERATION),
        )
    return answer


def vend(
    storage: Storage,
    table: CloudLocation,
    location: str,
    requested: CloudLocation,
    validity_seconds: int,
    also: Sequence[CloudLocation] = (),
) -> TemporaryCredentials:
    """STS credentials that can read (and list) `requested` and `also` only."""
    check(storage, table)
    s3 = as_backend(storage, S3Storage)
    bucket, prefix = requested.bucket, requested.prefix
    extra = [(a.bucket, a.prefix) for a in also]
    region = s3.bucket_region(bucket)
    try:
        try:
            policy = session_policy(bucket, prefix, region, also=extra)
            answer = _request(s3, region, policy, validity_seconds)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "PackedPolicyTooLarge":
                raise
            policy = session_policy(bucket, prefix, region, with_list=False, also=extra)
            answer = _request(s3, region, policy, validity_seconds)
    except (ClientError, BotoCoreError) as exc:
        code = (
            exc.response.get("Error", {}).get("Code")
            if isinstance(exc, ClientError)
            else type(exc).__name__
        )
        action = "AssumeRole" if s3.options.role_arn else "GetFederationToken"
        raise NotVendable(
            "AWS STS did not issue them", f"STS {action} refused for {location}: {code}"
        ) from exc
    credentials = answer["Credentials"]
    return TemporaryCredentials(
        location=location,
        field="awsTempCredentials",
        values={
            "accessKeyId": credentials["AccessKeyId"],
            "secretAccessKey": credentials["SecretAccessKey"],
            "sessionToken": credentials["SessionToken"],
        },
        expiration_ms=int(credentials["Expiration"].timestamp() * 1000),
    )

"""Read options, with the Scala connector's names and checks (case-insensitive).

Also where a read finds its profile: the table URL's profile file, or profile options
(`endpoint`, `bearerToken`, ...) as the Scala connector accepts them.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from client.actions import DELTA, PARQUET
from client.errors import OptionError
from client.profile import Profile, TableRef, parse_table_url

DEFAULT_MAX_FILES_PER_TRIGGER = 1000
DEFAULT_MAX_VERSIONS_PER_RPC = 100
DEFAULT_VERSION_INTERVAL_SECONDS = 30.0
DEFAULT_MAX_PARTITION_BYTES = 128 << 20
DEFAULT_OPEN_COST_BYTES = 4 << 20
DEFAULT_READ_CONCURRENCY = 4

_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "t": 1 << 40,
    "tb": 1 << 40,
    "p": 1 << 50,
    "pb": 1 << 50,
}
_BYTES = re.compile(r"^\s*(\d+)\s*([a-z]*)\s*$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$")
_DURATION_UNITS = {None: 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "min": 60.0, "h": 3600.0}


def _invalid(name: str, value: str, why: str) -> OptionError:
    return OptionError(f"Invalid value '{value}' for option '{name}', {why}")


def parse_timestamp(name: str, value: str) -> str:
    """An ISO-8601 UTC instant (`2022-01-01T00:00:00Z`) from the forms Spark casts to a
    timestamp: `2022`, `2022-01-01`, `2022-01-01 10:00:00[.f]`, with `T`, with `Z` or an
    offset. A value without an offset is taken as UTC."""
    text = value.strip()
    candidate = text
    if re.fullmatch(r"\d{4}", text):
        candidate = f"{text}-01-01"
    elif re.fullmatch(r"\d{4}-\d{1,2}", text):
        candidate = f"{text}-01"
    candidate = candidate.replace("Z", "+00:00").replace("z", "+00:00")
    try:
        parsed = dt.datetime.fromisoformat(candidate)
    except ValueError:
        raise OptionError(
            f"The provided timestamp ({value}) cannot be converted to a valid timestamp."
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    parsed = parsed.astimezone(dt.UTC)
    fraction = f".{parsed.microsecond:06d}".rstrip("0").rstrip(".") if parsed.microsecond else ""
    return parsed.strftime("%Y-%m-%dT%H:%M:%S") + fraction + "Z"


@dataclass(frozen=True)
class ReadOptions:
    """Every option of a read, validated once on the driver."""

    table: TableRef
    profile: Profile
    response_format: str | None = None
    version_as_of: int | None = None
    timestamp_as_of: str | None = None
    read_change_feed: bool = False
    starting_version: int | None = None
    starting_version_latest: bool = False
    starting_timestamp: str | None = None
    ending_version: int | None = None
    ending_timestamp: str | None = None
    max_files_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    max_versions_per_rpc: int = DEFAULT_MAX_VERSIONS_PER_RPC
    ignore_deletes: bool = False
    ignore_changes: bool = False
    skip_change_commits: bool = False
    version_interval_seconds: float = DEFAULT_VERSION_INTERVAL_SECONDS
    page_size: int | None = None
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    open_cost_bytes: int = DEFAULT_OPEN_COST_BYTES
    min_partitions: int = 1
    read_concurrency: int = DEFAULT_READ_CONCURRENCY
    max_retries: int = 5
    timeout_seconds: float = 320.0

    @property
    def time_travel(self) -> bool:
        return self.version_as_of is not None or self.timestamp_as_of is not None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        o = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
        path = o.get("path")
        if not path:
            raise OptionError(
                "no table given: use .load('<profile-file>#<share>.<schema>.<table>')"
            )
        location, table = parse_table_url(path)
        profile = Profile.from_options(options)
        if profile is None:
            if not location:
                raise OptionError(
                    f"{path!r} names no profile file and no profile options (endpoint, ...) "
                    "are given"
                )
            profile = Profile.read(location)
        response_format = o.get("responseformat")
        if response_format is not None and response_format not in (PARQUET, DELTA):
            raise _invalid(
                "responseFormat",
                response_format,
                f"The user input must be one of:{{{PARQUET}, {DELTA}}}.",
            )
        read_change_feed = _bool(o, "readchangefeed", "readChangeFeed") or _bool(
            o, "readchangedata", "readChangeData"
        )
        starting_version, latest = None, False
        if "startingversion" in o:
            raw = o["startingversion"]
            if raw.strip().lower() == "latest":
                latest = True
            else:
                starting_version = _int(o, "startingversion", "startingVersion", minimum=0)
        starting_timestamp = (
            parse_timestamp("startingTimestamp", o["startingtimestamp"])
            if "startingtimestamp" in o
            else None
        )
        if (starting_version is not None or latest) and starting_timestamp is not None:
            raise OptionError("Please either provide 'startingVersion' or 'startingTimestamp'.")
        version_as_of = _int(o, "versionasof", "versionAsOf", minimum=0)
        timestamp_as_of = (
            parse_timestamp("timestampAsOf", o["timestampasof"]) if "timestampasof" in o else None
        )
        if version_as_of is not None and timestamp_as_of is not None:
            raise OptionError("Please either provide 'versionAsOf' or 'timestampAsOf'.")
        ending_version = _int(o, "endingversion", "endingVersion", minimum=0)
        ending_timestamp = (
            parse_timestamp("endingTimestamp", o["endingtimestamp"])
            if "endingtimestamp" in o
            else None
        )
        if ending_version is not None and ending_timestamp is not None:
            raise OptionError("Please either provide 'endingVersion' or 'endingTimestamp'.")
        if read_change_feed and latest:
            raise _invalid(
                "startingVersion", "latest", "a change data feed read needs a version number"
            )
        return cls(
            table=table,
            profile=profile,
            response_format=response_format,
            version_as_of=version_as_of,
            timestamp_as_of=timestamp_as_of,
            read_change_feed=read_change_feed,
            starting_version=starting_version,
            starting_version_latest=latest,
            starting_timestamp=starting_timestamp,
            ending_version=ending_version,
            ending_timestamp=ending_timestamp,
            max_files_per_trigger=_int(o, "maxfilespertrigger", "maxFilesPerTrigger", minimum=1),
            max_bytes_per_trigger=_bytes(o, "maxbytespertrigger", "maxBytesPerTrigger"),
            max_versions_per_rpc=_int(o, "maxversionsperrpc", "maxVersionsPerRpc", minimum=1)
            or DEFAULT_MAX_VERSIONS_PER_RPC,
            ignore_deletes=_bool(o, "ignoredeletes", "ignoreDeletes"),
            ignore_changes=_bool(o, "ignorechanges", "ignoreChanges"),
            skip_change_commits=_bool(o, "skipchangecommits", "skipChangeCommits"),
            version_interval_seconds=_duration(
                o, "querytableversionintervalseconds", "queryTableVersionIntervalSeconds"
            ),
            page_size=_int(o, "maxfilesperrequest", "maxFilesPerRequest", minimum=1),
            max_partition_bytes=_bytes(o, "maxpartitionbytes", "maxPartitionBytes")
            or DEFAULT_MAX_PARTITION_BYTES,
            open_cost_bytes=_bytes(o, "opencostinbytes", "openCostInBytes", minimum=0)
            or DEFAULT_OPEN_COST_BYTES,
            min_partitions=_int(o, "minpartitions", "minPartitions", minimum=1)
            or (os.cpu_count() or 1),
            read_concurrency=_int(o, "readconcurrency", "readConcurrency", minimum=1)
            or DEFAULT_READ_CONCURRENCY,
            max_retries=_int_or(o, "maxretries", "maxRetries", minimum=0, default=5),
            timeout_seconds=_duration(o, "timeout", "timeout", default=320.0),
        )


def _bool(o: Mapping[str, str], key: str, name: str) -> bool:
    if key not in o:
        return False
    value = o[key].strip().lower()
    if value not in ("true", "false"):
        raise _invalid(name, o[key], "must be 'true' or 'false'")
    return value == "true"


def _int_or(o: Mapping[str, str], key: str, name: str, *, minimum: int, default: int) -> int:
    """`_int`, or `default` when the option is absent (0 is a value, not an absence)."""
    value = _int(o, key, name, minimum=minimum)
    return default if value is None else value


def _int(o: Mapping[str, str], key: str, name: str, *, minimum: int) -> int | None:
    if key not in o:
        return None
    try:
        value = int(o[key].strip())
    except ValueError:
        value = minimum - 1
    if value < minimum:
        why = (
            "must be a positive integer"
            if minimum == 1
            else f"must be an integer greater than or equal to {minimum}"
        )
        raise _invalid(name, o[key], why)
    return value


def _bytes(o: Mapping[str, str], key: str, name: str, *, minimum: int = 1) -> int | None:
    if key not in o:
        return None
    match = _BYTES.match(o[key].lower())
    if not match or match.group(2) not in _BYTE_UNITS:
        raise _invalid(name, o[key], "must be a size configuration such as '10g'")
    value = int(match.group(1)) * _BYTE_UNITS[match.group(2)]
    if value < minimum:
        raise _invalid(name, o[key], "must be a size configuration such as '10g'")
    return value


def _duration(
    o: Mapping[str, str], key: str, name: str, *, default: float = DEFAULT_VERSION_INTERVAL_SECONDS
) -> float:
    if key not in o:
        return default
    match = _DURATION.match(o[key].lower())
    if not match:
        raise _invalid(name, o[key], "must be a duration in seconds such as '30' or '30s'")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]

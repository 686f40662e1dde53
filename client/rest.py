"""The Delta Sharing REST protocol, as a recipient speaks it.

Every call retries on 429, 5xx and network failures with exponential backoff (honouring
`Retry-After`), negotiates the response format through `delta-sharing-capabilities`, asks
for an `endStreamAction` so that a cut-off stream is detected and retried rather than read
as a shorter table, and follows `nextPageToken` when paging is on. Listing queries return
`FileListing`s that remember their request, so that expired pre-signed URLs can be renewed
by repeating it (with the refresh token for a latest-snapshot query).
"""

from __future__ import annotations

import contextlib
import platform
import random
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote

import orjson
import requests

from client.actions import (
    DELTA,
    PARQUET,
    READER_FEATURES,
    EndStream,
    FileAction,
    TableMetadata,
    TableProtocol,
    parse_line,
)
from client.auth import Credentials, credentials_for
from client.errors import DeltaSharingError, SharingServerError, TruncatedResponseError
from client.profile import Profile, TableRef

VERSION = "0.1.0"
CAPABILITIES = "delta-sharing-capabilities"
TABLE_VERSION = "delta-table-version"
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
DEFAULT_TIMEOUT_SECONDS = 320.0
DEFAULT_RETRIES = 5
_LOCAL = threading.local()


@dataclass(frozen=True)
class ListingRequest:
    """How to list a set of files again (to renew their URLs): picklable and small."""

    table: TableRef
    kind: str  # "query" or "changes"
    request: Mapping[str, Any]
    refresh_token: str | None = None


@dataclass(frozen=True)
class FileListing:
    """The files of one `/query` or `/changes` response (all pages), and how to ask again."""

    table: TableRef
    kind: str  # "query" or "changes"
    request: Mapping[str, Any]  # the JSON body (query) or URL parameters (changes)
    version: int
    format: str
    protocol: TableProtocol
    metadata: TableMetadata
    files: list[FileAction]
    later_metadata: list[TableMetadata] = field(default_factory=list)
    refresh_token: str | None = None
    min_url_expiration: int | None = None

    @property
    def again(self) -> ListingRequest:
        return ListingRequest(self.table, self.kind, self.request, self.refresh_token)


@dataclass(frozen=True)
class TableInfo:
    """What `/metadata` says of a table version."""

    version: int
    format: str
    protocol: TableProtocol
    metadata: TableMetadata


class SharingClient:
    """A client for one profile. Picklable: the HTTP session is made per process/thread.

    `response_format` is `"parquet"`, `"delta"`, or None to let the server choose (parquet
    for plain tables, delta for tables with deletion vectors or column mapping).
    `page_size` turns on paging of listings with `maxFiles`/`pageToken`.
    """

    def __init__(
        self,
        profile: Profile,
        *,
        response_format: str | None = None,
        page_size: int | None = None,
        max_retries: int = DEFAULT_RETRIES,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        streaming: bool = False,
    ) -> None:
        if response_format not in (None, PARQUET, DELTA):
            raise ValueError(f"response_format must be parquet or delta, not {response_format!r}")
        self.profile = profile
        self.response_format = response_format
        self.page_size = page_size
        self.max_retries = max_retries
        self.timeout = timeout
        self.streaming = streaming

    # listing ----------------------------------------------------------------------------

    def list_shares(self) -> list[str]:
        return [item["name"] for item in self._items("/shares")]

    def list_schemas(self, share: str) -> list[str]:
        return [item["name"] for item in self._items(f"/shares/{_seg(share)}/schemas")]

    def list_tables(self, share: str, schema: str) -> list[TableRef]:
        path = f"/shares/{_seg(share)}/schemas/{_seg(schema)}/tables"
        return [TableRef(i["share"], i["schema"], i["name"]) for i in self._items(path)]

    def list_all_tables(self) -> list[TableRef]:
        tables: list[TableRef] = []
        for share in self.list_shares():
            path = f"/shares/{_seg(share)}/all-tables"
            tables.extend(TableRef(i["share"], i["schema"], i["name"]) for i in self._items(path))
        return tables

    def _items(self, path: str) -> Iterator[Mapping[str, Any]]:
        token: str | None = None
        while True:
            params = {"pageToken": token} if token else None
            response = self._send("GET", path, params=params)
            body = _json(response)
            yield from body.get("items") or ()
            token = body.get("nextPageToken")
            if not token:
                return

    # table calls ------------------------------------------------------------------------

    def table_version(self, table: TableRef, starting_timestamp: str | None = None) -> int:
        """The latest version, or the first version at or after `starting_timestamp`."""
        params = {"startingTimestamp": starting_timestamp} if starting_timestamp else None
        response = self._send("GET", f"{table.path}/version", params=params)
        return _table_version(response, f"GET {table.path}/version")

    def metadata(
        self, table: TableRef, *, version: int | None = None, timestamp: str | None = None
    ) -> TableInfo:
        params: dict[str, Any] = {}
        if version is not None:
            params["version"] = version
        if timestamp is not None:
            params["timestamp"] = timestamp
        path = f"{table.path}/metadata"
        lines, headers, fmt = self._ndjson("GET", path, params=params, end_stream=False)
        protocol, metadata, _ = _head(lines, str(table), fmt)
        return TableInfo(_table_version_from(headers, f"GET {path}"), fmt, protocol, metadata)

    def query(
        self,
        table: TableRef,
        *,
        version: int | None = None,
        timestamp: str | None = None,
        starting_version: int | None = None,
        ending_version: int | None = None,
        json_predicate_hints: str | None = None,
        limit_hint: int | None = None,
        include_refresh_token: bool = False,
    ) -> FileListing:
        """`POST /query`: a snapshot (latest, `version` or `timestamp`), or the add/remove
        actions of versions `starting_version..ending_version` (a streaming query)."""
        body: dict[str, Any] = {}
        if json_predicate_hints:
            body["jsonPredicateHints"] = json_predicate_hints
        if limit_hint is not None:
            body["limitHint"] = limit_hint
        for key, value in (
            ("version", version),
            ("timestamp", timestamp),
            ("startingVersion", starting_version),
            ("endingVersion", ending_version),
        ):
            if value is not None:
                body[key] = value
        if include_refresh_token:
            body["includeRefreshToken"] = True
        return self._listing(table, "query", body)

    def changes(
        self,
        table: TableRef,
        *,
        starting_version: int | None = None,
        starting_timestamp: str | None = None,
        ending_version: int | None = None,
        ending_timestamp: str | None = None,
        include_historical_metadata: bool = False,
    ) -> FileListing:
        """`GET /changes`: the change data feed of a version or timestamp range."""
        params: dict[str, Any] = {}
        for key, value in (
            ("startingVersion", starting_version),
            ("startingTimestamp", starting_timestamp),
            ("endingVersion", ending_version),
            ("endingTimestamp", ending_timestamp),
        ):
            if value is not None:
                params[key] = value
        if include_historical_metadata:
            params["includeHistoricalMetadata"] = "true"
        return self._listing(table, "changes", params)

    def relist(self, again: ListingRequest) -> FileListing:
        """The same listing with new URLs: the refresh token pins a latest-snapshot query
        to its version; every other listing names its versions and is simply repeated."""
        request = dict(again.request)
        if again.kind == "query" and again.refresh_token:
            request["refreshToken"] = again.refresh_token
            request["includeRefreshToken"] = True
        renewed = self._listing(again.table, again.kind, request)
        return replace(renewed, request=again.request)

    def _listing(self, table: TableRef, kind: str, request: Mapping[str, Any]) -> FileListing:
        path = f"{table.path}/{kind}"
        files: list[FileAction] = []
        later: list[TableMetadata] = []
        first: tuple[int, str, TableProtocol, TableMetadata] | None = None
        refresh_token: str | None = None
        min_expiration: int | None = None
        page_token: str | None = None
        while True:
            body = dict(request)
            if self.page_size:
                body["maxFiles"] = self.page_size
            if page_token:
                body["pageToken"] = page_token
                body.pop("includeRefreshToken", None)
                body.pop("refreshToken", None)
            if kind == "query":
                lines, headers, fmt = self._ndjson("POST", path, body=body)
            else:
                lines, headers, fmt = self._ndjson("GET", path, params=body)
            version = _table_version_from(headers, f"{kind} {path}")
            protocol, metadata, rest = _head(lines, str(table), fmt)
            if first is None:
                first = (version, fmt, protocol, metadata)
            elif (version, fmt, protocol, metadata) != first:
                raise DeltaSharingError(
                    f"the pages of {kind} on {table} disagree on the table version, format, "
                    "protocol or metadata"
                )
            end: EndStream | None = None
            for line in rest:
                if isinstance(line, FileAction):
                    files.append(line)
                elif isinstance(line, TableMetadata):
                    later.append(line)
                elif isinstance(line, EndStream):
                    end = line
            page_token = None
            if end is not None:
                refresh_token = end.refresh_token or refresh_token
                if end.min_url_expiration_timestamp is not None:
                    min_expiration = min(
                        end.min_url_expiration_timestamp, min_expiration or (1 << 62)
                    )
                page_token = end.next_page_token if self.page_size else None
            if not page_token:
                break
        assert first is not None
        version, fmt, protocol, metadata = first
        if min_expiration is None:
            stamps = [f.expiration_timestamp for f in files if f.expiration_timestamp]
            min_expiration = min(stamps) if stamps else None
        return FileListing(
            table=table,
            kind=kind,
            request=dict(request),
            version=version,
            format=fmt,
            protocol=protocol,
            metadata=metadata,
            files=files,
            later_metadata=later,
            refresh_token=refresh_token,
            min_url_expiration=min_expiration,
        )

    # transport --------------------------------------------------------------------------

    def _capabilities(self, end_stream: bool) -> str:
        if self.response_format == PARQUET:
            value = "responseformat=parquet"
        else:
            formats = "delta" if self.response_format == DELTA else "delta,parquet"
            value = f"responseformat={formats};readerfeatures={','.join(READER_FEATURES)}"
        if end_stream:
            value += ";includeendstreamaction=true"
        return value

    def _ndjson(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        end_stream: bool = True,
    ) -> tuple[list[Any], Mapping[str, str], str]:
        """All parsed lines of an NDJSON response; a stream cut short is retried."""
        capabilities = self._capabilities(end_stream)
        for attempt in range(self.max_retries + 1):
            response = self._send(
                method, path, params=params, body=body, capabilities=capabilities, stream=True
            )
            try:
                fmt, expects_end = _responded(response, self.response_format, f"{method} {path}")
                lines = [parse_line(orjson.loads(raw)) for raw in response.iter_lines() if raw]
                if expects_end and end_stream:
                    last = lines[-1] if lines else None
                    if not isinstance(last, EndStream):
                        raise TruncatedResponseError(f"{method} {path}: no endStreamAction")
                    if last.error_message:
                        raise SharingServerError(
                            last.http_status_error_code or 500,
                            "INTERNAL_ERROR",
                            last.error_message,
                            f"{method} {path}",
                        )
                return [x for x in lines if x is not None], response.headers, fmt
            except (TruncatedResponseError, requests.RequestException, orjson.JSONDecodeError):
                if attempt == self.max_retries:
                    raise
                _backoff(attempt, None)
            finally:
                response.close()
        raise AssertionError("unreachable")

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        capabilities: str | None = None,
        stream: bool = False,
    ) -> requests.Response:
        """One request with retries; an error response becomes SharingServerError."""
        credentials = self._credentials()
        url = self.profile.url(path)
        refused_once = False
        attempt = 0
        while True:
            headers = {"User-Agent": self._user_agent(), **credentials.headers()}
            if capabilities:
                headers[CAPABILITIES] = capabilities
            data = None
            if body is not None:
                headers["Content-Type"] = "application/json; charset=utf-8"
                data = orjson.dumps(body)
            try:
                response = http_session().request(
                    method,
                    url,
                    params=params,
                    data=data,
                    headers=headers,
                    timeout=self.timeout,
                    stream=stream,
                )
            except (requests.ConnectionError, requests.Timeout):
                if attempt >= self.max_retries:
                    raise
                _backoff(attempt, None)
                attempt += 1
                continue
            if response.status_code < 400:
                return response
            if response.status_code == 401 and not refused_once:
                # An OAuth token may have been revoked or expired early: fetch a new one once.
                refused_once = True
                credentials.invalidate()
                response.close()
                continue
            if response.status_code in RETRY_STATUSES and attempt < self.max_retries:
                retry_after = response.headers.get("Retry-After")
                response.close()
                _backoff(attempt, retry_after)
                attempt += 1
                continue
            raise self._error(response, f"{method} {path}")

    def _error(self, response: requests.Response, request: str) -> SharingServerError:
        try:
            text = response.text
        finally:
            response.close()
        code, message = f"HTTP_{response.status_code}", text.strip()[:500] or response.reason
        try:
            body = orjson.loads(text)
        except orjson.JSONDecodeError:
            body = None
        if isinstance(body, dict) and body.get("errorCode"):
            code = str(body["errorCode"])
            message = str(body.get("message") or "")
        if response.status_code == 401:
            expiration = self.profile.expiration
            if expiration is not None and expiration.timestamp() < time.time():
                message += (
                    f" (the profile's token expired at {self.profile.expiration_time}; "
                    "ask the provider for a new profile)"
                )
        return SharingServerError(response.status_code, code, message, request)

    def _credentials(self) -> Credentials:
        cached = getattr(self, "_creds", None)
        if cached is None:
            cached = credentials_for(self.profile)
            self._creds = cached
        return cached

    def _user_agent(self) -> str:
        product = "Lakeshare-Spark-Streaming" if self.streaming else "Lakeshare-Spark"
        return f"{product}/{VERSION} Python/{platform.python_version()} {platform.system()}"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_creds", None)
        return state


def http_session() -> requests.Session:
    """One HTTP session (connection pool) per thread."""
    session = getattr(_LOCAL, "session", None)
    if session is None:
        session = requests.Session()
        adapter = requests.adapters.HTTPAdapter(pool_connections=8, pool_maxsize=32)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        _LOCAL.session = session
    return session


def _backoff(attempt: int, retry_after: str | None) -> None:
    delay = min(0.2 * (2**attempt), 10.0) * (0.5 + random.random() / 2)
    if retry_after:
        with contextlib.suppress(ValueError):
            delay = max(delay, min(float(retry_after), 60.0))
    time.sleep(delay)


def _seg(name: str) -> str:
    return quote(name, safe="")


def _json(response: requests.Response) -> Mapping[str, Any]:
    try:
        body = response.json()
    except ValueError as exc:
        raise DeltaSharingError(f"the server answered {response.url} with invalid JSON") from exc
    finally:
        response.close()
    if not isinstance(body, dict):
        raise DeltaSharingError(f"the server answered {response.url} with a non-object")
    return body


def _table_version_from(headers: Mapping[str, str], request: str) -> int:
    value = headers.get(TABLE_VERSION)
    if value is None:
        raise DeltaSharingError(f"{request}: the response has no Delta-Table-Version header")
    try:
        version = int(value)
    except ValueError as exc:
        raise DeltaSharingError(f"{request}: bad Delta-Table-Version {value!r}") from exc
    if version < 0:
        raise DeltaSharingError(f"{request}: negative table version {version}")
    return version


def _table_version(response: requests.Response, request: str) -> int:
    try:
        return _table_version_from(response.headers, request)
    finally:
        response.close()


def _responded(response: requests.Response, wanted: str | None, request: str) -> tuple[str, bool]:
    """The format the server answered in, and whether it promised an endStreamAction."""
    fmt, end_stream = PARQUET, False
    for part in response.headers.get(CAPABILITIES, "").lower().split(";"):
        key, _, value = part.partition("=")
        if key.strip() == "responseformat" and value.strip():
            fmt = value.strip()
        elif key.strip() == "includeendstreamaction":
            end_stream = value.strip() == "true"
    if fmt not in (PARQUET, DELTA) or (wanted is not None and fmt != wanted):
        raise DeltaSharingError(f"{request}: the server answered in format {fmt!r}")
    return fmt, end_stream


def _head(lines: list[Any], table: str, fmt: str) -> tuple[TableProtocol, TableMetadata, list[Any]]:
    """The protocol and metadata lines that open every table response, checked readable."""
    if len(lines) < 2:
        raise DeltaSharingError(f"the response for {table} lacks its protocol/metadata lines")
    protocol, metadata = lines[0], lines[1]
    if not isinstance(protocol, TableProtocol) or not isinstance(metadata, TableMetadata):
        raise DeltaSharingError(f"the response for {table} does not open with protocol/metaData")
    if fmt == DELTA:
        protocol.check_readable(table)
    return protocol, metadata, lines[2:]

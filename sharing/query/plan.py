"""What every query kind plans into: a `QueryPlan` (header values, head lines, then
sections of literal lines and `FileSection`s formatted batch by batch), and the checks and
head figures the planners share."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog import Snapshot
from sharing.errors import SharingError, UnsupportedOperation
from sharing.formats import FILE, FileContext, FileLines, FormatWriter, TableHead, dumps_line
from sharing.formats.templates import LineTemplates
from sharing.presign.base import Signer
from sharing.query import capabilities
from sharing.query.batch_pipeline import BatchWork, formatted
from sharing.query.rows import row_batches

BATCH_ROWS = 10_000


@dataclass(frozen=True)
class FileSection:
    """File actions that share one context (a snapshot, or one commit of a range): the
    rows `rows` of `files` (indices in response order; None: every row, in order), taken
    batch by batch as they are written (sharing.query.rows)."""

    files: pa.Table
    context: FileContext
    action: str = FILE
    rows: pa.Array | None = None


Section = bytes | FileSection


@dataclass(frozen=True)
class PreparedFiles:
    """File lines whose unsigned parts were built before (sharing.query.small): only the
    URLs are signed, with the request's signer, when the body is written."""

    templates: LineTemplates
    signer: Signer


@dataclass
class QueryPlan:
    """A response ready to stream: header values, head lines, then sections: literal
    lines (metadata of later versions) and file actions, formatted batch by batch."""

    version: int
    response_format: str
    head: bytes
    sections: Iterable[Section]
    writer: FormatWriter
    end_stream: bool = False  # finish with an endStreamAction
    header_end_stream: bool = False  # the client asked for it in its capabilities
    next_page_token: str | None = None
    refresh_token: str | None = None
    batch_rows: int = BATCH_ROWS
    prepared: PreparedFiles | None = None  # written before the sections
    inline: bool = False  # small: rendered whole before the response starts (`render`)

    def capabilities_header(self) -> str:
        return capabilities.response_header(
            self.response_format, include_end_stream_action=self.header_end_stream
        )

    def body(self, *, ahead: bool = True) -> Iterator[bytes | memoryview]:
        """The NDJSON body; file lines are formatted and signed one batch at a time, the
        next batches ahead on a pool (see sharing.query.batch_pipeline; `ahead=False`:
        only a slow signer's).

        A failure after the head lines were sent can no longer change the status: a client
        that declared `includeendstreamaction` gets a final end-stream action carrying the
        error; for any other client the error propagates and the connection is aborted, so
        it sees a truncated body rather than a short, well-formed one (an end-stream action
        it does not check for errors would look like a complete last page)."""
        yield self.head
        min_expiration: int | None = None
        try:
            for lines in self._lines(ahead):
                if isinstance(lines, bytes):
                    yield lines
                    continue
                expiry = lines.min_expiration_ms
                if expiry is not None and (min_expiration is None or expiry < min_expiration):
                    min_expiration = expiry
                if lines.text:
                    yield lines.text
        except Exception as exc:
            if not self.header_end_stream:
                raise
            yield end_stream_error(exc)
            return
        if self.end_stream:
            action: dict[str, Any] = {}
            if self.refresh_token is not None:
                action["refreshToken"] = self.refresh_token
            if self.next_page_token is not None:
                action["nextPageToken"] = self.next_page_token
            if min_expiration is not None:
                action["minUrlExpirationTimestamp"] = min_expiration
            yield dumps_line({"endStreamAction": action})

    def render(self) -> bytes:
        """The whole body at once (small plans: one step, no hand-off per line). A failure
        without `includeendstreamaction` is raised before any byte is sent, so it becomes
        an error response instead of a cut connection."""
        return b"".join(self.body(ahead=False))

    def _lines(self, ahead: bool) -> Iterator[bytes | FileLines]:
        if self.prepared is not None:
            yield self.prepared.templates.render(self.prepared.signer)
        yield from formatted(self._work(), self.writer, ahead=ahead)

    def _work(self) -> Iterator[bytes | BatchWork]:
        """The sections as literal lines and batches of at most `batch_rows` files."""
        for section in self.sections:
            if isinstance(section, bytes):
                yield section
                continue
            for batch in row_batches(section.files, section.rows, self.batch_rows):
                yield BatchWork(batch, section.context, section.action)


def end_stream_error(exc: Exception) -> bytes:
    """The last line of a stream that failed midway."""
    if isinstance(exc, SharingError) and exc.status < 500:
        message, status = exc.message, exc.status
    else:
        message, status = "Internal error while streaming the response.", 500
    return dumps_line({"endStreamAction": {"errorMessage": message, "httpStatusErrorCode": status}})


def table_head(
    snapshot: Snapshot, history_shared: bool, visible: tuple[int, int] | None = None
) -> TableHead:
    """Protocol, metadata and size figures of a snapshot, computed on its Arrow files;
    `visible`: (bytes, files) of the recipient's slice (sharing.slices.visible_figures)."""
    size, num_files = visible if visible is not None else (None, None)
    return TableHead(
        protocol=snapshot.protocol,
        metadata=snapshot.metadata,
        size=snapshot.size_in_bytes if size is None else size,
        num_files=snapshot.num_files if num_files is None else num_files,
        history_shared=history_shared,
    )


def check_parquet_readable(response_format: str, files: pa.Table) -> None:
    """Files with deletion vectors cannot be read as plain parquet (a table may hold them
    after its DV property was turned off)."""
    if response_format != capabilities.PARQUET or files.num_rows == 0:
        return
    check_parquet_files(
        response_format, pc.any(pc.is_valid(files.column("deletionVector"))).as_py()
    )


def check_parquet_files(response_format: str, deletion_vectors: bool) -> None:
    """`check_parquet_readable` when whether any file has a deletion vector is known."""
    if response_format == capabilities.PARQUET and deletion_vectors:
        raise UnsupportedOperation(
            "Deletion Vector property disabled: the table has files with deletion vectors; "
            "ask for responseformat=delta with readerfeatures=deletionvectors."
        )

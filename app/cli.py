"""The `lakeshare` command: `serve` the sharing server, `check` its tables, `inspect` a
Delta table.

`lakeshare serve` with no `--config` builds and serves a demo share of real local Delta
tables and writes a ready recipient profile, so a first run shows something useful.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pickle
import socket
import ssl as stdlib_ssl
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from starlette.types import ASGIApp

from app.cli_recipients import add_recipient_commands, anonymous_refusal
from app.cli_shares import add_share_commands
from app.logs import configure_logging
from app.terminal import stdout_gone
from sharing.config import ConfigError, LimitsConfig, ServerConfig, load_config
from sharing.store import StoreError

if TYPE_CHECKING:
    from app.metrics_dir import MetricsDir
    from app.worker_loads import WorkerLoads, WorkerSlot  # imported with the server
    from sharing.catalog import SharedTable
    from sharing.tables import TableService

__all__ = ["build_parser", "main"]

log = logging.getLogger("lakeshare.cli")

PROFILE_FILE_NAME = "profile.share"
STARTUP_CHECK_SECONDS = 300.0
_ANY_ADDRESS = ("", "0.0.0.0", "::")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lakeshare",
        description="Lakeshare: a Delta Sharing server for Delta tables on local disk, S3, GCS "
        "and Azure.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = commands.add_parser(
        "serve",
        help="run the sharing server",
        description="Run the sharing server. Without --config, build and serve a demo share "
        "of local Delta tables and write a recipient profile for it.",
    )
    serve.add_argument("--config", metavar="FILE", help="server config (.yaml/.yml)")
    serve.add_argument("--host", help="address to listen on (default: the config's 'host')")
    serve.add_argument(
        "--port", type=int, help="port to listen on (default: the config's 'port'; 0 = any)"
    )
    serve.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="worker processes (default: the config's 'workers'; 0 or unset there = one "
        "per CPU core, or 1 for the demo)",
    )
    serve.add_argument(
        "--demo-dir",
        metavar="DIR",
        default=".lakeshare/demo",
        help="where the demo tables, config and profile live when no --config is given "
        "(default: %(default)s)",
    )
    serve.set_defaults(handler=_serve)

    inspect = commands.add_parser(
        "inspect",
        help="describe a Delta table as JSON",
        description="Print a JSON description of a Delta table (protocol, metadata, "
        "versions, and optionally its active files).",
    )
    inspect.add_argument("table_uri", metavar="TABLE_URI", help="table root path or URI")
    when = inspect.add_mutually_exclusive_group()
    when.add_argument("--version", type=int, help="describe this version")
    when.add_argument(
        "--timestamp",
        metavar="TS",
        help="describe the latest version committed at or before this time "
        "(ISO-8601 with offset, or epoch milliseconds)",
    )
    inspect.add_argument("--files", action="store_true", help="include the active files")
    inspect.set_defaults(handler=_inspect)

    check = commands.add_parser(
        "check",
        help="open every configured table and say who can read it",
        description="Open every table of a server configuration (local and cloud) and "
        "report its version, file count, reader features, the response formats and clients "
        "that can read it, and any problem, after the configuration's warnings (unknown "
        "keys with a did-you-mean, ...). Exits with status 1 when a table is unusable, 2 "
        "when the configuration is invalid (with --strict: or has warnings).",
    )
    check.add_argument("--config", metavar="FILE", required=True, help="server config")
    check.add_argument("--format", choices=("table", "json"), default="table", help="output format")
    check.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="give up on tables whose storage has not answered by then (default: %(default)s)",
    )
    check.add_argument(
        "--strict",
        action="store_true",
        help="exit with status 2 when the configuration has warnings, as `strict: true` "
        "would refuse it",
    )
    check.set_defaults(handler=_check)
    views = commands.add_parser(
        "views",
        help="materialize compatible copies on Spark (refresh, status)",
        description="Run the refresher beside the server: `lakeshare views refresh --config "
        "FILE [--view NAME] [--full] [--watch]`, `lakeshare views status --config FILE`. "
        "Needs the spark extra (pip install 'lakeshare[spark]').",
        add_help=False,
    )
    views.add_argument("arguments", nargs=argparse.REMAINDER)
    views.set_defaults(handler=_views)
    add_recipient_commands(commands)
    add_share_commands(commands)
    # Not listed: the supervisor of `serve --workers N` starts it in place of a dead worker.
    worker = commands.add_parser("worker")
    worker.add_argument("supervisor_pid", type=int)
    worker.add_argument("state_fd", type=int)
    worker.add_argument("index", type=int)
    worker.set_defaults(handler=_restarted_worker)
    return parser


def _views(args: argparse.Namespace) -> int:
    """Hand off to the pipeline by replacing this process (the server's code never imports
    PySpark or the pipeline): signals (SIGTERM from a container runtime, Ctrl-C) then reach
    the refresher itself, which stops cleanly, and its exit status is the command's."""
    command = [sys.executable, "-m", "pipeline", *args.arguments]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, command)
    return 0  # not reached: execv replaces the process or raises


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `lakeshare` console script; returns the process exit code."""
    args = build_parser().parse_args(argv)
    try:
        code = int(args.handler(args))
        sys.stdout.flush()  # here, not at exit: a reader gone away is handled below
    except BrokenPipeError:
        if not stdout_gone():
            raise
        return 0  # `lakeshare audit | head`: the reader has what it wanted
    return code


# --- serve -------------------------------------------------------------------------------


def _fail(message: str, code: int = 1) -> int:
    print(f"lakeshare: {message}", file=sys.stderr)
    return code


def _serve(args: argparse.Namespace) -> int:
    from sharing.preload import refuse_pandas

    refuse_pandas()  # before pyarrow's first type inference would load it (sharing.preload)
    configure_logging("INFO")
    demo = args.config is None
    try:
        if demo:
            from app.demo import prepare_demo

            config_path = prepare_demo(Path(args.demo_dir))
        else:
            config_path = Path(args.config)
        config = load_config(config_path)
    except ConfigError as exc:
        return _fail(f"invalid configuration: {exc}", 2)
    started = config  # the file as loaded: what a reload compares with (app.reload)
    configure_logging(config.log_level)
    from app.metrics_dir import prepare_metrics_dir
    from app.reload import file_fingerprint

    fingerprint = file_fingerprint(config_path)
    metrics = prepare_metrics_dir(config)  # before anything imports prometheus-client
    from app.main import create_app
    from app.workers import bound_malloc_arenas, worker_count

    bound_malloc_arenas()  # before the app starts threads or forks workers

    if args.workers is not None and args.workers < 0:
        return _fail("--workers must be 0 or more", 2)
    workers = worker_count(args.workers, config.workers, demo=demo)
    config = _with_snapshot_cache(config)

    try:
        app = create_app(config)  # before announcing anything: a broken app must not look up
    except StoreError as exc:
        return _fail(str(exc))
    except ConfigError as exc:  # e.g. a share name both in the file and in the store
        return _fail(f"invalid configuration: {exc}", 2)

    host = args.host if args.host is not None else config.host
    port = args.port if args.port is not None else config.port
    refusal = anonymous_refusal(app.state.recipients.directory, config, host)
    if refusal:
        return _fail(refusal, 2)
    try:
        sock = _bind(host, port)
    except OSError as exc:
        return _fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    port = sock.getsockname()[1]

    with tempfile.TemporaryDirectory(prefix="lakeshare-tls-") as tls_dir:
        try:
            ssl_options = _ssl_options(config, host, Path(tls_dir))
        except (OSError, ImportError) as exc:
            sock.close()
            return _fail(f"cannot set up TLS: {exc}")
        base_url = _base_url(config, host, port)
        _announce(config, config_path, base_url, demo)
        if workers == 1:
            _check_in_background(app, config)
            _reload_live(app, config_path, started, fingerprint)
            return _run(app, sock, ssl_options, config.limits, returns_on_sigterm=True)
        del app  # each worker builds its own, after the fork
        made = (tls_dir,) + ((str(metrics.path),) if metrics and metrics.made else ())
        source = (config_path, started, fingerprint)
        return _run_workers(config, workers, sock, ssl_options, source, metrics, made)


def _check_in_background(app: Any, config: ServerConfig) -> None:
    from sharing.table_check import log_reports_in_background

    # Warms the app's own table cache too; a slow store delays only its own line.
    tables = app.state.catalog.current().tables()  # the file's and the store's
    log_reports_in_background(app.state.tables, tables, timeout_seconds=STARTUP_CHECK_SECONDS)


def _reload_live(app: Any, path: Path, started: ServerConfig, fingerprint: str | None) -> None:
    """Reload the configuration file on SIGHUP and when it changes since it was loaded
    (its `fingerprint` then) (app.reload)."""
    from app.reload import ConfigReloader

    reloader = ConfigReloader(app, path, started, fingerprint)
    reloader.install_signal_handler()
    reloader.start()
    app.state.reloader = reloader
    app.state.readiness.add_detail("configuration", reloader.describe)


class _WorkerServer(NamedTuple):
    """What every worker of `--workers N` serves, as the supervisor loaded it: forked
    workers inherit it, a restarted one reads it from a memfd (pickled: a signing secret
    generated at start must be the same in every worker, and the file may have changed)."""

    config: ServerConfig  # with the snapshot cache resolved (_with_snapshot_cache)
    config_path: Path
    started: ServerConfig  # the file as loaded at start (app.reload)
    fingerprint: str | None  # the file's digest then
    ssl_options: dict[str, Any]
    workers: int
    socket_fd: int
    loads_fd: int  # the workers' WorkerLoads


def _run_workers(
    config: ServerConfig,
    workers: int,
    sock: socket.socket,
    ssl_options: dict[str, Any],
    source: tuple[Path, ServerConfig, str | None],
    metrics: MetricsDir | None,
    made: tuple[str, ...],
) -> int:
    """N processes serving `sock` (app.workers); the first one also checks the tables at
    start-up, which writes their snapshots to the shared cache for the others to map. Once
    they run, this process becomes the small supervisor (app.supervisor), which removes
    the directories in `made` when it exits; a worker it restarts is `lakeshare worker`."""
    from app.supervisor import Duties, module_command
    from app.worker_loads import WorkerLoads
    from app.workers import run_workers

    loads = WorkerLoads(workers)  # shared by the workers: connections are spread over them
    server = _WorkerServer(config, *source, ssl_options, workers, sock.fileno(), loads.fd)
    state_fd = os.memfd_create("lakeshare-worker-server")
    with open(state_fd, "wb", closefd=False) as state:
        state.write(pickle.dumps(tuple(server)))  # a tuple: `python -m app.cli` or not
    duties = Duties(
        loads_fd=loads.fd,
        metrics_dir=None if metrics is None else str(metrics.path),
        remove_at_exit=made,
    )
    command = [*module_command("app.cli"), "worker", str(os.getpid()), str(state_fd)]

    def worker(index: int) -> int:
        return _serve_worker(server, sock, loads, index)

    print(f"Worker processes: {server.workers}")
    sys.stdout.flush()
    keep = (sock.fileno(), loads.fd, state_fd)
    return run_workers(server.workers, worker, duties, hand_off=(command, keep))


def _serve_worker(
    server: _WorkerServer, sock: socket.socket, loads: WorkerLoads, index: int
) -> int:
    from app.main import create_app

    app = create_app(server.config)
    if index == 0:
        _check_in_background(app, server.config)
    _reload_live(app, server.config_path, server.started, server.fingerprint)
    return _run(app, sock, server.ssl_options, server.config.limits, loads.slot(index))


def _restarted_worker(args: argparse.Namespace) -> int:
    """`lakeshare worker SUPERVISOR_PID STATE_FD INDEX` (hidden): a worker the small
    supervisor starts in place of one that died. Not forked from the app, it imports and
    builds everything itself, with the state the first workers had."""
    from app.supervisor import become_worker
    from app.worker_loads import WorkerLoads
    from app.workers import bound_malloc_arenas
    from sharing.preload import refuse_pandas

    refuse_pandas()  # as in the first workers (_serve)
    become_worker(args.supervisor_pid)
    bound_malloc_arenas()
    # Read at an offset: the descriptor's position is shared with every process holding it.
    state = os.pread(args.state_fd, os.fstat(args.state_fd).st_size, 0)
    server = _WorkerServer(*pickle.loads(state))
    configure_logging(server.config.log_level)
    sock = socket.socket(fileno=server.socket_fd)
    loads = WorkerLoads(server.workers, server.loads_fd)
    return _serve_worker(server, sock, loads, args.index)


def _bind(host: str, port: int) -> socket.socket:
    """Bind before starting uvicorn: port 0 resolves to a real port we can announce, and an
    address in use is reported plainly instead of as a server traceback."""
    family, _, _, _, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        # Listening now means connections made right after the URL is announced wait in the
        # backlog instead of being refused while uvicorn starts.
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def _ssl_options(config: ServerConfig, host: str, tls_dir: Path) -> dict[str, Any]:
    ssl = config.ssl
    if ssl is None:
        return {}
    if ssl.self_signed:
        from app.tls import write_self_signed_certificate

        cert, key = write_self_signed_certificate(tls_dir, host)
        log.warning("serving HTTPS with a self-signed certificate (ssl.selfSigned: true)")
        return {"ssl_certfile": str(cert), "ssl_keyfile": str(key)}
    options: dict[str, Any] = {
        "ssl_certfile": ssl.certificate_file,
        "ssl_keyfile": ssl.certificate_key_file,
    }
    password = None
    if ssl.certificate_password_file:
        password = Path(ssl.certificate_password_file).read_text(encoding="utf-8").strip()
        options["ssl_keyfile_password"] = password
    # Load once here so a bad certificate, key or password is a one-line error (ssl.SSLError
    # is an OSError), not a traceback from inside uvicorn.
    probe = stdlib_ssl.SSLContext(stdlib_ssl.PROTOCOL_TLS_SERVER)
    probe.load_cert_chain(options["ssl_certfile"], options["ssl_keyfile"], password)
    return options


def _base_url(config: ServerConfig, host: str, port: int) -> str:
    """The URL recipients use: `publicUrl` when configured, else derived from the socket."""
    if config.public_url:
        return f"{config.public_url}{config.endpoint}/"
    scheme = "https" if config.ssl else "http"
    shown = "127.0.0.1" if host in _ANY_ADDRESS else host
    if ":" in shown:
        shown = f"[{shown}]"
    return f"{scheme}://{shown}:{port}{config.endpoint}/"


def _announce(config: ServerConfig, config_path: Path, base_url: str, demo: bool) -> None:
    tables = [
        f"{share.name}.{schema.name}.{table.name}"
        for share in config.shares
        for schema in share.schemas
        for table in schema.tables
    ]
    print(f"Lakeshare is serving {len(tables)} table(s) at {base_url}")
    print(f"Configuration: {config_path.resolve()}")
    if not demo:
        sys.stdout.flush()
        return
    profile_path = _write_profile(config, config_path.parent / PROFILE_FILE_NAME, base_url)
    example = tables[0] if tables else "<share>.<schema>.<table>"
    print(f"Recipient profile: {profile_path}")
    partners = _write_partner_profiles(config, config_path.parent, base_url)
    for name, path in partners:
        print(f"Partner profile ({name}): {path}")
    print()
    print("Try it from Python (pip install delta-sharing):")
    print()
    print("    import delta_sharing")
    print(f'    profile = "{profile_path}"')
    print("    print(delta_sharing.SharingClient(profile).list_all_tables())")
    print(f'    print(delta_sharing.load_as_pandas(profile + "#{example}"))')
    filtered = next((t for t in tables if t.endswith(".orders_by_region")), None)
    if partners and filtered is not None:
        print("    # one table name, one slice per partner (partition filter on `region`):")
        for _, path in partners:
            print(f'    print(delta_sharing.load_as_pandas("{path}#{filtered}").region.unique())')
    print()
    sys.stdout.flush()


def _write_partner_profiles(
    config: ServerConfig, directory: Path, endpoint: str
) -> list[tuple[str, Path]]:
    """The demo's configured recipients' profiles (`<name>.share`, private)."""
    written = []
    for recipient in config.recipients:
        token = next((c.token for c in recipient.credentials if c.token), None)
        if token is None:
            continue
        path = (directory / f"{recipient.name}.share").resolve()
        profile = {"shareCredentialsVersion": 1, "endpoint": endpoint, "bearerToken": token}
        path.touch(mode=0o600, exist_ok=True)
        path.chmod(0o600)
        path.write_text(json.dumps(profile, indent=2) + "\n", encoding="utf-8")
        written.append((recipient.name, path))
    return written


def _write_profile(config: ServerConfig, path: Path, endpoint: str) -> Path:
    """A Delta Sharing profile file for the demo, private since it holds the bearer token."""
    profile: dict[str, Any] = {"shareCredentialsVersion": 1, "endpoint": endpoint}
    if config.authorization is not None:
        profile["bearerToken"] = config.authorization.bearer_token
    path = path.resolve()
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(json.dumps(profile, indent=2) + "\n", encoding="utf-8")
    return path


def _run(
    app: ASGIApp,
    sock: socket.socket,
    ssl_options: dict[str, Any],
    limits: LimitsConfig,
    balance: WorkerSlot | None = None,
    *,
    returns_on_sigterm: bool = False,
) -> int:
    from app.serving import run

    return run(app, sock, limits, balance, returns_on_sigterm=returns_on_sigterm, **ssl_options)


def _with_snapshot_cache(config: ServerConfig) -> ServerConfig:
    """The configuration as `lakeshare serve` runs it: an unset `snapshotCacheDir` is the
    default per-user directory (or off, when that cannot be made)."""
    from app.workers import default_snapshot_cache_dir

    if config.snapshot_cache_dir is not None:
        return config
    try:
        cache_dir = str(default_snapshot_cache_dir())
    except OSError as exc:
        log.warning("no snapshot cache (%s); set snapshotCacheDir", exc)
        cache_dir = "off"
    return config.model_copy(update={"snapshot_cache_dir": cache_dir})


# --- check -------------------------------------------------------------------------------


def _check(args: argparse.Namespace) -> int:
    from sharing.shares.repository import every_share
    from sharing.table_check import Status, check_tables, configured_tables
    from sharing.tables import TableService

    configure_logging("ERROR")  # the report is the output; table errors are in it
    try:
        config = load_config(Path(args.config))
    except ConfigError as exc:
        return _fail(f"invalid configuration: {exc}", 2)
    warnings = list(config.warnings)
    try:  # the store's shares too, when the store exists
        checked = config.model_copy(update={"shares": every_share(config)})
    except StoreError as exc:
        warnings.append(f"the store's shares were not checked: {exc}")
        checked = config
    service = TableService(config)
    reports = check_tables(service, configured_tables(checked), timeout_seconds=args.timeout)
    errors = _check_directories(config)
    if config.iceberg.azure_metadata_in_table_folder:
        azure_warnings, azure_errors = _check_azure_iceberg(service, configured_tables(checked))
        warnings += azure_warnings
        errors += azure_errors
    if args.format == "json":
        document = {
            "warnings": warnings,
            "errors": errors,
            "tables": [r.to_json() for r in reports],
        }
        _write(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        _write(
            "".join(f"warning: {w}\n" for w in warnings)
            + "".join(f"error: {e}\n" for e in errors)
            + _check_table_text(reports)
        )
    if args.strict and warnings:
        print(f"lakeshare: {len(warnings)} configuration warning(s) (--strict)", file=sys.stderr)
        return 2
    return 1 if errors or any(r.status is Status.UNUSABLE for r in reports) else 0


def _check_directories(config: ServerConfig) -> list[str]:
    """Problems with the directories the server writes to, as `lakeshare serve` would
    resolve them: the Iceberg catalog's generated metadata (`iceberg.cacheDir`)."""
    from sharing.iceberg.files import cache_directory, unwritable

    directory = cache_directory(_with_snapshot_cache(config))
    problem = unwritable(directory)
    if problem is None:
        return []
    return [f"iceberg.cacheDir: the Iceberg metadata cache {directory} is not writable ({problem})"]


def _check_azure_iceberg(
    service: TableService, tables: Iterable[SharedTable]
) -> tuple[list[str], list[str]]:
    """With `iceberg.azureMetadataInTableFolder`, what each Azure table shared whole with
    its history gets from the Iceberg catalog: a warning when no SAS can be limited to it
    (it is answered without credentials), an error when the server cannot write into its
    `_lakeshare_iceberg/` folder (loadTable would fail)."""
    from deltalog.storage.kinds import StorageKind
    from sharing.credentials.vending import vending_support
    from sharing.errors import SharingError
    from sharing.iceberg.generator import AZURE_METADATA_FOLDER
    from sharing.iceberg.publish import probe_write

    key = "iceberg.azureMetadataInTableFolder"
    warnings: list[str] = []
    errors: list[str] = []
    for shared in tables:
        if shared.is_view or not shared.config.location.lower().startswith(("abfs", "wasb")):
            continue
        if shared.config.partition_filter is not None or not shared.config.history_shared:
            continue  # never vended (the table's own report says why)
        try:
            storage = service.delta_table(shared).storage
        except SharingError:
            continue  # the table's report has the problem
        if storage.kind is not StorageKind.AZURE:
            continue
        support = vending_support(shared, storage)
        if not support.possible:
            warnings.append(
                f"{key}: table {shared.full_name} is answered without credentials: "
                f"{support.reason} {support.detail}".strip()
            )
            continue
        folder = f"{shared.config.location.rstrip('/')}/{AZURE_METADATA_FOLDER}"
        problem = probe_write(storage, folder)
        if problem is not None:
            errors.append(
                f"{key}: table {shared.full_name}: the server cannot write its generated "
                f"Iceberg metadata into {folder}/ ({problem})"
            )
    return warnings, errors


def _check_table_text(reports: Sequence[Any]) -> str:
    """One row per table, then its problems and readers indented below it."""
    header = ("TABLE", "STATUS", "VERSION", "FILES", "SIZE", "FORMATS", "READER FEATURES")
    rows = [
        (
            r.table,
            r.status.value,
            "-" if r.version is None else str(r.version),
            "-" if r.num_files is None else str(r.num_files),
            "-" if r.size_bytes is None else _human_size(r.size_bytes),
            ",".join(r.formats) or "-",
            ",".join(r.reader_features) or "-",
        )
        for r in reports
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(header, widths, strict=True)).rstrip()]
    for report, row in zip(reports, rows, strict=True):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        lines.extend(f"    readable by: {client}" for client in report.clients)
        if report.temporary_credentials:
            lines.append(f"    temporary credentials: {report.temporary_credentials}")
        lines.extend(f"    note: {note}" for note in report.notes)
        lines.extend(f"    problem: {problem}" for problem in report.problems)
    unusable = sum(1 for r in reports if r.status.value == "unusable")
    lines.append(f"{len(reports)} table(s), {unusable} unusable")
    return "\n".join(lines)


def _human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _write(text: str) -> None:
    """Print to stdout; a reader that went away (`| head`) is not worth a traceback, nor a
    change of the command's exit code."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        if not stdout_gone():
            raise


# --- inspect -----------------------------------------------------------------------------


def _inspect(args: argparse.Namespace) -> int:
    from deltalog import DeltaError
    from deltalog.inspect import describe

    timestamp: str | int | None = args.timestamp
    if isinstance(timestamp, str) and timestamp.isdigit():
        timestamp = int(timestamp)  # epoch milliseconds
    try:
        result = describe(
            args.table_uri,
            version=args.version,
            timestamp=timestamp,
            include_files=args.files,
        )
    except (DeltaError, ValueError, OSError) as exc:
        return _fail(f"inspect: {exc}")
    _write(json.dumps(result, indent=2, default=str, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

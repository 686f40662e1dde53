"""`lakeshare recipients ...` and `lakeshare audit`: manage the recipients of a server's
store and read its audit trail. Every command takes `--config FILE`, the file `lakeshare
serve` reads, to find the store; changes reach running servers within the store's
`cacheSeconds`. Each command is one transaction: a failing command changes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.terminal import printable
from sharing.config import ConfigError, ServerConfig, load_config
from sharing.errors import SharingError
from sharing.recipients.audit import AuditEvent, query_events
from sharing.recipients.directory import RecipientDirectory
from sharing.recipients.hashing import hash_password, hash_token
from sharing.recipients.model import CredentialType
from sharing.recipients.names import (
    InvalidValue,
    parse_duration,
    parse_instant,
    property_assignment,
)
from sharing.recipients.profiles import (
    endpoint_url,
    is_loopback_host,
    local_only_warning,
    profile_for,
)
from sharing.recipients.repository import IssuedCredential, RecipientRepository
from sharing.recipients.views import recipient_json
from sharing.store import StoreError, open_store
from sharing.store.clock import now_ms

__all__ = ["add_recipient_commands", "anonymous_refusal"]

_TYPES = [t.value for t in CredentialType]


def anonymous_refusal(directory: RecipientDirectory, config: ServerConfig, host: str) -> str:
    """Empty when the server may start; else why not. (The loud warning itself is logged by
    the configuration loader, which sees no bearer token and no recipient.)"""
    if not directory.anonymous:
        return ""
    if config.allow_anonymous or is_loopback_host(host):
        return ""
    return (
        f"refusing to listen on {host!r} without authorization: configure "
        "'authorization.bearerToken' or recipients, or set 'allowAnonymous: true'"
    )


def add_recipient_commands(commands: Any) -> None:
    recipients = commands.add_parser(
        "recipients",
        help="manage recipients (credentials, grants) in the server's store",
        description="Create and manage recipients in the state store of a server config.",
    )
    sub = recipients.add_subparsers(dest="recipients_command", metavar="COMMAND", required=True)

    def command(name: str, help_text: str, handler: Any, *, named: bool = True) -> Any:
        parser = sub.add_parser(name, help=help_text, description=help_text)
        parser.add_argument("--config", metavar="FILE", required=True, help="server config")
        if named:
            parser.add_argument("name", metavar="NAME", help="recipient name")
        parser.set_defaults(handler=handler)
        return parser

    create = command("create", "create a recipient and print its profile", _create)
    create.add_argument("--share", action="append", default=[], help="grant a share (repeat)")
    create.add_argument("--type", choices=_TYPES, default="bearer", help="credential type")
    create.add_argument("--expires-in", metavar="DURATION", help="credential lifetime, e.g. 90d")
    create.add_argument("--recipient-expires", metavar="TIME", help="recipient expiry (ISO-8601)")
    create.add_argument("--ip", action="append", default=[], metavar="CIDR", help="allow-list")
    create.add_argument("--comment", default="", help="free-form comment")
    create.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a property, read by partition filters' current_recipient('KEY') (repeat)",
    )
    create.add_argument("--public-key", metavar="FILE", help="PEM/JWK (private-key-jwt)")
    create.add_argument("--key-id", help="key id of --public-key")
    create.add_argument(
        "--private-key-out",
        metavar="FILE",
        help="private-key-jwt without --public-key: write the generated private key here "
        "(0600; default <NAME>-private-key.pem beside the profile); the profile names it "
        "relative to its own directory",
    )
    create.add_argument(
        "--private-key-file",
        metavar="PATH",
        help="private-key-jwt with --public-key: where the recipient keeps the private key "
        "(written in the profile)",
    )
    _profile_options(create)
    create.add_argument(
        "--activation-link",
        action="store_true",
        help="print a one-time URL serving the profile (bearer) instead of the profile",
    )

    command("list", "list recipients", _list, named=False).add_argument(
        "--format", choices=("table", "json"), default="table"
    )
    command("show", "show a recipient and its credentials (never secrets)", _show)
    grant = command("grant", "grant shares", _grant)
    grant.add_argument("--share", action="append", required=True, help="share (repeat)")
    revoke = command(
        "revoke", "revoke credentials now (all, or --credential ID), or grants (--share)", _revoke
    )
    revoke.add_argument("--share", action="append", default=[], help="remove a grant")
    revoke.add_argument("--credential", metavar="ID", help="revoke this credential only")
    rotate = command("rotate", "issue a new credential; old ones end after --grace", _rotate)
    rotate.add_argument("--grace", default="0", metavar="DURATION", help="e.g. 1h (default 0)")
    rotate.add_argument("--type", choices=_TYPES, help="credential type (default: current)")
    rotate.add_argument("--expires-in", metavar="DURATION", help="new credential lifetime")
    _profile_options(rotate)
    set_properties = command(
        "set-properties",
        "set properties (read by partition filters' current_recipient('KEY'))",
        _set_properties,
    )
    set_properties.add_argument("assignments", nargs="+", metavar="KEY=VALUE")
    unset_properties = command("unset-properties", "remove properties", _unset_properties)
    unset_properties.add_argument("keys", nargs="+", metavar="KEY")
    command("disable", "cut a recipient off (keeps its data)", _disable)
    command("enable", "let a disabled recipient in again", _enable)
    command("delete", "delete a recipient, its grants and credentials", _delete)
    hash_help = "print the tokenHash and passwordHash of a secret read from stdin"
    sub.add_parser("hash-secret", help=hash_help, description=hash_help).set_defaults(handler=_hash)

    audit = commands.add_parser(
        "audit", help="read the audit trail", description="Read the audit trail of the store."
    )
    audit.add_argument("--config", metavar="FILE", required=True, help="server config")
    audit.add_argument("--recipient", help="only records verified to come from this recipient")
    audit.add_argument(
        "--claimed",
        metavar="RECIPIENT",
        help="only refusals of requests that claimed to be this recipient without proof",
    )
    audit.add_argument("--share", help="only this share")
    audit.add_argument("--since", metavar="TIME", help="ISO-8601 time or a duration ago (1h)")
    audit.add_argument(
        "--failed", action="store_true", help="only refused authentications (401/403)"
    )
    audit.add_argument("--limit", type=int, default=1000, help="newest N records (default 1000)")
    audit.add_argument("--format", choices=("table", "json"), default="table")
    audit.set_defaults(handler=_audit)


def _profile_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile-out", metavar="FILE", help="write the profile to FILE (0600)")
    parser.add_argument(
        "--profile-version",
        type=int,
        choices=(1, 2),
        default=1,
        help="bearer profiles: 1 (default; the official Python client 1.4.x reads only this) "
        "or 2 (type bearer_token, which 1.4.x parses but refuses)",
    )
    parser.add_argument("--endpoint", metavar="URL", help="endpoint URL written in the profile")


# --- plumbing ------------------------------------------------------------------------------


def _fail(message: str, code: int = 1) -> int:
    print(f"lakeshare: {message}", file=sys.stderr)
    return code


def _open(args: argparse.Namespace) -> tuple[ServerConfig, RecipientRepository]:
    config = load_config(Path(args.config))
    if not config.store.url:
        raise StoreError("no store is configured")
    store = open_store(config.store.url)
    directory = RecipientDirectory(config, store)
    assert directory.repository is not None
    return config, directory.repository


def _run(args: argparse.Namespace, body: Any) -> int:
    try:
        config, repository = _open(args)
        try:
            return int(body(config, repository) or 0)
        finally:
            repository.store.close()
    except ConfigError as exc:
        return _fail(f"invalid configuration: {exc}", 2)
    except (StoreError, InvalidValue) as exc:
        return _fail(str(exc))
    except SharingError as exc:
        return _fail(exc.message)


def _ms_in(duration: str | None) -> int | None:
    return None if not duration else now_ms() + parse_duration(duration) * 1000


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _profile_endpoint(args: argparse.Namespace, config: ServerConfig) -> str:
    """The endpoint the profile (or activation link) names; refused before anything is
    written when the server has no address a recipient could reach, and warned about when
    it names this machine only."""
    endpoint = endpoint_url(config, args.endpoint, how="--endpoint URL")
    warning = "" if args.endpoint else local_only_warning(endpoint)
    if warning:
        print(f"lakeshare: warning: {warning} (--endpoint URL)", file=sys.stderr)
    return endpoint


def _emit_profile(
    args: argparse.Namespace,
    config: ServerConfig,
    issued: IssuedCredential,
    name: str,
    endpoint: str,
) -> None:
    profile = profile_for(
        issued,
        name,
        endpoint,
        version=args.profile_version,
        config=config,
        private_key_file=getattr(args, "private_key_file", None),
    )
    text = json.dumps(profile, indent=2) + "\n"
    if args.profile_out:
        path = Path(args.profile_out)
        path.touch(mode=0o600, exist_ok=True)
        path.chmod(0o600)
        path.write_text(text, encoding="utf-8")
        print(f"profile written to {path} (credential {issued.credential.id})")
    else:
        sys.stdout.write(text)


# --- commands ------------------------------------------------------------------------------


def _create(args: argparse.Namespace) -> int:
    def body(config: ServerConfig, repository: RecipientRepository) -> int:
        if not args.share:
            raise InvalidValue("give at least one --share")
        if args.activation_link and args.profile_out:
            raise InvalidValue(
                "--profile-out does not apply with --activation-link: the link serves the "
                "profile to the recipient once, and no profile is written here; drop one of them"
            )
        endpoint = _profile_endpoint(args, config)
        kind = CredentialType(args.type)
        public_key = Path(args.public_key).read_text() if args.public_key else None
        generated = _generated_key(args, kind, public_key)
        if generated is not None:
            public_key = generated[1]
        if args.activation_link:
            from sharing.recipients.activation import create_link

            if kind is not CredentialType.BEARER:
                raise InvalidValue("--activation-link serves bearer-token profiles only")
            recipient, _ = repository.create(
                args.name,
                args.share,
                credential_type=None,
                expires_at=_recipient_expiry(args),
                ip_allow_list=args.ip,
                comment=args.comment,
                properties=_assignments(args.property),
            )
            url = create_link(
                repository,
                recipient.name,
                endpoint,
                credential_expires_at=_ms_in(args.expires_in),
            )
            print(url)
            return 0
        recipient, issued = repository.create(
            args.name,
            args.share,
            credential_type=kind,
            expires_at=_recipient_expiry(args),
            credential_expires_at=_ms_in(args.expires_in),
            ip_allow_list=args.ip,
            comment=args.comment,
            public_key=public_key,
            key_id=args.key_id,
            properties=_assignments(args.property),
        )
        assert issued is not None
        if generated is not None:
            _write_private_key(generated[2], generated[0], args.private_key_file)
        _emit_profile(args, config, issued, recipient.name, endpoint)
        return 0

    return _run(args, body)


def _generated_key(
    args: argparse.Namespace, kind: CredentialType, public_key: str | None
) -> tuple[str, str, Path] | None:
    """For a private-key-jwt recipient without --public-key: a new RS256 key pair and the
    file its private half goes to — (private PEM, public PEM, path). Checked before the
    recipient is created, written after, so a failing command leaves nothing behind.

    The key goes beside the profile by default, and the profile names it relative to its
    own directory (`args.private_key_file`; just the file name when the key was written
    elsewhere): a path on the provider's machine would mean nothing to the recipient."""
    if kind is not CredentialType.PRIVATE_KEY_JWT or public_key is not None:
        if args.private_key_out:
            raise InvalidValue("--private-key-out is for private-key-jwt without --public-key")
        return None
    from sharing.recipients.oauth.public_keys import generate_key_pair

    profile_dir = Path(args.profile_out).resolve().parent if args.profile_out else Path.cwd()
    path = Path(args.private_key_out or profile_dir / f"{args.name}-private-key.pem").resolve()
    if path.exists():
        raise InvalidValue(f"{path} exists: not overwriting a private key")
    if not path.parent.is_dir():
        raise InvalidValue(f"{path.parent} is not a directory")
    beside = path.is_relative_to(profile_dir)
    args.private_key_file = str(path.relative_to(profile_dir)) if beside else path.name
    private_pem, public_pem = generate_key_pair("RS256")
    return private_pem, public_pem, path


def _write_private_key(path: Path, pem: str, named_as: str) -> None:
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
        handle.write(pem)
    print(
        f"private key written to {path} (give it to the recipient; not kept). The profile "
        f"names it {named_as!r}, relative to the profile's directory: the recipient keeps "
        "the two files together (the official Python client opens the key relative to its "
        "working directory, so run it there, or make privateKeyFile absolute)",
        file=sys.stderr,
    )


def _recipient_expiry(args: argparse.Namespace) -> int | None:
    if not args.recipient_expires:
        return None
    return int(parse_instant(args.recipient_expires).timestamp() * 1000)


def _list(args: argparse.Namespace) -> int:
    def body(config: ServerConfig, repository: RecipientRepository) -> int:
        directory = RecipientDirectory(config, None)
        everyone = directory.config_recipients() + repository.all()
        if args.format == "json":
            print(json.dumps([recipient_json(r) for r in everyone], indent=2))
            return 0
        header = ("NAME", "SOURCE", "ENABLED", "EXPIRES", "SHARES", "COMMENT")
        rows = [
            (
                r.name,
                r.source.value,
                "yes" if r.enabled else "no",
                _iso(r.expires_at),
                ",".join(sorted(r.shares)) or "-",
                r.comment[:40],
            )
            for r in everyone
        ]
        _table(header, rows)
        return 0

    return _run(args, body)


def _show(args: argparse.Namespace) -> int:
    def body(config: ServerConfig, repository: RecipientRepository) -> int:
        recipient = repository.require(args.name)
        print(json.dumps(recipient_json(recipient, repository.credentials(args.name)), indent=2))
        return 0

    return _run(args, body)


def _grant(args: argparse.Namespace) -> int:
    def body(config: ServerConfig, repository: RecipientRepository) -> int:
        recipient = repository.grant(args.name, args.share)
        print(f"{recipient.name}: shares {', '.join(sorted(recipient.shares))}")
        return 0

    return _run(args, body)


def _revoke(args: argparse.Namespace) -> int:
    def body(config: ServerConfig, repository: RecipientRepository) -> int:
        if args.share:
            recipient = repository.ungrant(args.name, args.share)
            print(f"{recipient.name}: shares {', '.join(sorted(recipient.shares)) or '-'}")
            if not args.credential:
                return 0
        ids = repository.revoke(args.name, args.credential)
        print(f"revoked {len(ids)} credential(s): {', '.join(ids) or '-'}")
        return 0

    return _run(args, body)


def _rotate(args: argparse.Namespace) -> int:
    def body(config: ServerConfig, repository: RecipientRepository) -> int:
        endpoint = _profile_endpoint(args, config)
        issued = repository.rotate(
            args.name,
            grace_seconds=parse_duration(args.grace),
            credential_type=CredentialType(args.type) if args.type else None,
            expires_at=_ms_in(args.expires_in),
        )
        _emit_profile(args, config, issued, repository.require(args.name).name, endpoint)
        return 0

    return _run(args, body)


def _assignments(texts: list[str]) -> dict[str, str]:
    """KEY=VALUE arguments as a mapping (a key given twice: the last value)."""
    return dict(property_assignment(text) for text in texts)


def _print_properties(name: str, properties: tuple[tuple[str, str], ...]) -> None:
    shown = ", ".join(f"{k}={v}" for k, v in properties) or "-"
    print(f"{name}: properties {shown}")


def _set_properties(args: argparse.Namespace) -> int:
    def body(config: ServerConfig, repository: RecipientRepository) -> int:
        recipient = repository.set_properties(args.name, _assignments(args.assignments))
        _print_properties(recipient.name, recipient.properties)
        return 0

    return _run(args, body)


def _unset_properties(args: argparse.Namespace) -> int:
    def body(config: ServerConfig, repository: RecipientRepository) -> int:
        recipient = repository.unset_properties(args.name, args.keys)
        _print_properties(recipient.name, recipient.properties)
        return 0

    return _run(args, body)


def _set_enabled(args: argparse.Namespace, enabled: bool) -> int:
    def body(config: ServerConfig, repository: RecipientRepository) -> int:
        recipient = repository.set_enabled(args.name, enabled)
        print(f"{recipient.name}: {'enabled' if enabled else 'disabled'}")
        return 0

    return _run(args, body)


def _disable(args: argparse.Namespace) -> int:
    return _set_enabled(args, False)


def _enable(args: argparse.Namespace) -> int:
    return _set_enabled(args, True)


def _delete(args: argparse.Namespace) -> int:
    def body(config: ServerConfig, repository: RecipientRepository) -> int:
        repository.delete(args.name)
        print(f"deleted {args.name.lower()}")
        return 0

    return _run(args, body)


def _hash(args: argparse.Namespace) -> int:
    secret = sys.stdin.readline().rstrip("\r\n")
    if not secret:
        return _fail("give the secret on standard input")
    print(f"tokenHash: {hash_token(secret)}")
    print(f"passwordHash: {hash_password(secret)}")
    return 0


def _audit(args: argparse.Namespace) -> int:
    def body(config: ServerConfig, repository: RecipientRepository) -> int:
        since = None
        if args.since:
            text = args.since.strip()
            if text[-1:].isalpha() and text[:-1].isdigit():
                since = now_ms() - parse_duration(text) * 1000
            else:
                since = int(parse_instant(text).timestamp() * 1000)
        events = query_events(
            repository.store,
            recipient=args.recipient,
            claimed=args.claimed,
            share=args.share,
            since=since,
            failed=args.failed,
            limit=max(1, args.limit),
        )
        if args.format == "json":
            for event in events:
                print(json.dumps(event.to_json()))
            return 0
        header = (
            "TIME",
            "RECIPIENT",
            "CREDENTIAL",
            "CLIENT",
            "OPERATION",
            "TABLE",
            "VERSION",
            "FILES",
            "BYTES",
            "STATUS",
            "REASON",
            "CLAIMED",
        )
        rows = [
            (
                _iso(e.at),
                e.recipient or "-",
                e.credential_id or "-",
                e.client or "-",
                e.operation,
                _target(e),
                e.version or "-",
                "-" if e.files is None else str(e.files),
                "-" if e.bytes is None else str(e.bytes),
                str(e.status),
                e.reason or "-",
                _claimed(e),
            )
            for e in events
        ]
        _table(header, rows)
        return 0

    return _run(args, body)


def _target(event: AuditEvent) -> str:
    """share.schema.table, and /file for a signed file download."""
    table = ".".join(p for p in (event.share, event.schema, event.table) if p) or "-"
    return f"{table}/{event.file}" if event.file else table


def _claimed(event: AuditEvent) -> str:
    """recipient/credential a refused request claimed without proof; "-" when none."""
    if event.claimed_recipient is None and event.claimed_credential_id is None:
        return "-"
    return f"{event.claimed_recipient or '?'}/{event.claimed_credential_id or '-'}"


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    """Aligned columns; every cell escaped (`app.terminal.printable`): names, paths and user
    agents come from requests, and a newline or an escape sequence must not reach the
    terminal as such."""
    shown = [tuple(printable(cell) for cell in row) for row in [header, *rows]]
    widths = [max(len(row[i]) for row in shown) for i in range(len(header))]
    for row in shown:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())

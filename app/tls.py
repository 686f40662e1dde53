"""TLS material for `ssl.selfSigned: true`: a throwaway certificate made at start-up.

Good for trying HTTPS clients against a development server, never for production (clients
must disable verification). The key never leaves the private temporary directory.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from pathlib import Path

__all__ = ["write_self_signed_certificate"]


def write_self_signed_certificate(directory: Path, hostname: str) -> tuple[Path, Path]:
    """Write a fresh self-signed certificate and key for `hostname`; return their paths."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname or "localhost")])
    alt_names: list[x509.GeneralName] = [x509.DNSName("localhost")]
    for candidate in {hostname, "127.0.0.1", "::1"}:
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(candidate)))
        except ValueError:
            if candidate and candidate != "localhost":
                alt_names.append(x509.DNSName(candidate))
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert_path = directory / "self-signed.crt"
    key_path = directory / "self-signed.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return cert_path, key_path

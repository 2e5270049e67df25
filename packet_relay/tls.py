"""TLS contexts: real certificates from files, or a self-signed one for development."""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

DEV_NAMES = ("localhost", "127.0.0.1", "::1")


def generate_self_signed(tls_dir: str, names: tuple[str, ...] = DEV_NAMES) -> tuple[str, str]:
    """Create (or reuse) `<tls_dir>/relay.crt` + `relay.key`: ECDSA P-256, one year, names as SANs."""
    d = Path(tls_dir)
    cert_path, key_path = d / "relay.crt", d / "relay.key"
    if cert_path.exists() and key_path.exists():
        return str(cert_path), str(key_path)
    d.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for n in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            sans.append(x509.DNSName(n))
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    cert = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(cert_path), str(key_path)


def server_context(cert: str, key: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
    except OSError as exc:  # the file names, so the one-line start-up error says which files
        why = "not a PEM certificate chain and matching key" if isinstance(exc, ssl.SSLError) else exc.strerror
        raise OSError(exc.errno, f"cannot load the TLS certificate {cert} and key {key}: {why}") from exc
    ctx.set_alpn_protocols(["http/1.1"])
    # No TLS 1.3 session tickets: DERP clients do not resume, and each ticket costs memory and CPU.
    ctx.num_tickets = 0
    return ctx

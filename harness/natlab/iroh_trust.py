"""A certificate the `iroh` Python wheel trusts, for a relay inside the NAT lab.

The wheel (PyPI iroh 1.2) checks relay certificates, for its relay connection and for QUIC address
discovery (QAD), only against the Mozilla roots compiled into libiroh_ffi.so (the `webpki-roots` crate,
iroh's default `CaTlsConfig::embedded()`); its Python API has no way to add a root or skip the check, and
it does not read the system's trust store. So the lab gives it a root the way a trust store would hold
one: a copy of the package whose library has one compiled-in anchor swapped for the lab's own.

webpki-roots stores each anchor as raw DER slices (the subject name, the SubjectPublicKeyInfo, the name
constraints). ISRG Root X2 has no name constraints and an ECDSA P-384 key, and every P-384 SPKI has the
same length, so replacing its SPKI bytes with a fresh P-384 key's (same subject name) makes that key a
trusted root. Certificates it signs, with ISRG Root X2's subject as issuer, then verify in the patched
copy only; the installed package is never touched.
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LIBRARY = "libiroh_ffi.so"
# ISRG Root X2 as webpki-roots 1.0 stores it: the subject Name's contents (no outer SEQUENCE header), and
# the SubjectPublicKeyInfo's contents (algorithm ecPublicKey/secp384r1, then the key as a BIT STRING)
ANCHOR_SUBJECT = bytes.fromhex(
    "310b3009060355040613025553"
    "31293027060355040a1320496e7465726e65742053656375726974792052657365617263682047726f7570"
    "311530130603550403130c4953524720526f6f74205832")
ANCHOR_SPKI = bytes.fromhex(
    "301006072a8648ce3d020106052b81040022036200"
    "04cd9bd59f80830aec094af3164a3e5ccf77acde67050d1d07b6dc16fb5a8b14dbe27160c4ba4595"
    "11898eea06dff72a161ca4b9c5c532e003e01e8218388bd745d80a6a6ee60077fb02517d22d80a6e9a"
    "5b77dff0fa41ec39dc75ca68070c1fea")
ISSUER = x509.Name([
    x509.NameAttribute(NameOID.COUNTRY_NAME, "US", _type=_ASN1Type.PrintableString),
    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Internet Security Research Group",
                       _type=_ASN1Type.PrintableString),
    x509.NameAttribute(NameOID.COMMON_NAME, "ISRG Root X2", _type=_ASN1Type.PrintableString),
])


class TrustError(RuntimeError):
    """The wheel's library does not hold the anchor exactly once (another iroh version?)."""


@dataclass
class LabTrust:
    root_key: ec.EllipticCurvePrivateKey
    pythonpath: Path  # put first on PYTHONPATH: `import iroh` then loads the patched copy

    def issue(self, directory: Path, names: list[str]) -> tuple[Path, Path]:
        """A server certificate for `names` (host names or IP addresses) signed by the lab's root:
        (certificate PEM, key PEM) in `directory`."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        sans = [x509.IPAddress(ipaddress.ip_address(n)) if _is_ip(n) else x509.DNSName(n) for n in names]
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
                .issuer_name(ISSUER)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.SubjectAlternativeName(sans), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .sign(self.root_key, hashes.SHA384()))
        cert_path, key_path = directory / "relay-cert.pem", directory / "relay-key.pem"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        return cert_path, key_path


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def spki_contents(key: ec.EllipticCurvePrivateKey) -> bytes:
    """The SubjectPublicKeyInfo without its outer SEQUENCE header, as webpki-roots stores it."""
    der = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert der[0] == 0x30 and der[1] == len(der) - 2, "a P-384 SPKI has a one-byte length"
    return der[2:]


def patched_iroh(directory: Path) -> LabTrust:
    """Copy the installed `iroh` package into `directory`/iroh with a lab root in place of ISRG Root X2."""
    import iroh  # the installed wheel (a test dependency)

    assert ISSUER.public_bytes()[2:] == ANCHOR_SUBJECT  # our issuer name is byte-identical to the anchor's
    src = Path(iroh.__file__).parent
    dst = directory / "iroh"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    lib = (dst / LIBRARY).read_bytes()
    if lib.count(ANCHOR_SPKI) != 1 or lib.count(ANCHOR_SUBJECT) != 1:
        raise TrustError(f"{src / LIBRARY} does not hold ISRG Root X2 exactly once as webpki-roots stores it")
    key = ec.generate_private_key(ec.SECP384R1())
    spki = spki_contents(key)
    assert len(spki) == len(ANCHOR_SPKI)
    (dst / LIBRARY).write_bytes(lib.replace(ANCHOR_SPKI, spki))
    return LabTrust(key, directory)

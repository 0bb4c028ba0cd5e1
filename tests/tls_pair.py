"""Certificates for tests, from a CA made for the test (`TestCA`), and a TLS server and client pair
for tests of outgoing HTTPS (A2A push, webhooks): a certificate for a DNS name and the server names
the server was asked for (SNI). One home for every test that needs a certificate: the one port's
TLS, mutual TLS to Substrate, the egress proxy's TLS origination, push and webhooks."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class TestCA:
    """A CA valid for a day, with the extensions strict verifiers ask of one (key usage, key
    identifiers); `issue` signs leaf certificates."""

    __test__ = False  # a test module that imports it would otherwise have pytest collect it

    def __init__(self, cn: str = "sessionq test CA") -> None:
        now = dt.datetime.now(dt.UTC)
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.cert = (
            x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256()))

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, cn: str, *, dns: Sequence[str] = (), ips: Sequence[str] = (),
              server: bool | None = None) -> tuple[bytes, bytes]:
        """A leaf certificate for `cn` with those DNS names and IP addresses: (key PEM, certificate
        PEM). `server`: its extended key usage (True: server auth, False: client auth, None: none)."""
        now = dt.datetime.now(dt.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(self.cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False))
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        if server is not None:
            usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
            builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return _key_pem(key), cert.public_bytes(serialization.Encoding.PEM)

    def write(self, directory: Path, stem: str, cn: str, **names: Sequence[str]) -> tuple[Path, Path]:
        """A server certificate (`issue`) written as `stem`.crt and `stem`.key in `directory`."""
        key, cert = self.issue(cn, server=True, **names)
        cert_file, key_file = directory / f"{stem}.crt", directory / f"{stem}.key"
        cert_file.write_bytes(cert)
        key_file.write_bytes(key)
        return cert_file, key_file


def tls_pair(tmp_path: Path, dns: str) -> tuple[ssl.SSLContext, ssl.SSLContext, list[str | None]]:
    """A server context with a certificate for `dns` (from a CA of its own), a client context that
    trusts that CA only, and the list of server names the server was asked for (SNI)."""
    ca = TestCA("test CA")
    cert_file, key_file = ca.write(tmp_path, "server", dns, dns=[dns])
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_file, key_file)
    names: list[str | None] = []
    server.sni_callback = lambda _sock, name, _ctx: names.append(name)  # type: ignore[assignment,func-returns-value]
    client = ssl.create_default_context(cadata=ca.pem.decode())
    return server, client, names

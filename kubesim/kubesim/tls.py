"""A throwaway CA and serving certificate, generated at start (kubectl only sends bearer tokens
over HTTPS, so kubesim must serve TLS with a CA the kubeconfig names)."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Certificates:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def server_context(self, directory: Path) -> ssl.SSLContext:
        """An SSL context serving the certificate (files are written under `directory`)."""
        directory.mkdir(parents=True, exist_ok=True)
        cert_file = directory / "serving.crt"
        key_file = directory / "serving.key"
        cert_file.write_bytes(self.cert_pem + self.ca_pem)
        key_file.write_bytes(self.key_pem)
        key_file.chmod(0o600)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(cert_file), str(key_file))
        return context


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kubesim"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def generate(hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> Certificates:
    now = datetime.datetime.now(datetime.UTC)
    not_before = now - datetime.timedelta(hours=1)
    not_after = now + datetime.timedelta(days=365)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("kubesim-ca")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    alt_names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alt_names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("kubesim"))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return Certificates(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )

"""Throw-away PKI for a local control plane: a CA, the apiserver's serving cert, client certs."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


class CertificateAuthority:
    """A CA kept on disk as ``<dir>/<name>.crt`` and ``<dir>/<name>.key``."""

    def __init__(self, directory: Path, name: str = "ca") -> None:
        self.dir = directory
        self.pair = KeyPair(directory / f"{name}.crt", directory / f"{name}.key")
        if self.pair.cert.exists() and self.pair.key.exists():
            self._key = serialization.load_pem_private_key(self.pair.key.read_bytes(), None)
            self._cert = x509.load_pem_x509_certificate(self.pair.cert.read_bytes())
            return
        directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(f"cloudloop-{name}"))
            .issuer_name(_name(f"cloudloop-{name}"))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
            .sign(key, hashes.SHA256())
        )
        _write_key(self.pair.key, key)
        self.pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self._key, self._cert = key, cert

    def issue(
        self,
        name: str,
        *,
        common_name: str,
        organization: str | None = None,
        server_hosts: tuple[str, ...] = (),
    ) -> KeyPair:
        """Issue a leaf cert: a server cert when ``server_hosts`` is given, else a client cert."""
        pair = KeyPair(self.dir / f"{name}.crt", self.dir / f"{name}.key")
        if pair.cert.exists() and pair.key.exists():
            return pair
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organization))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if server_hosts:
            alt: list[x509.GeneralName] = []
            for host in server_hosts:
                try:
                    alt.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    alt.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
            usage = ExtendedKeyUsageOID.SERVER_AUTH
        else:
            usage = ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        assert isinstance(self._key, ec.EllipticCurvePrivateKey)
        cert = builder.sign(self._key, hashes.SHA256())
        _write_key(pair.key, key)
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return pair


def service_account_keys(directory: Path) -> KeyPair:
    """An RSA key pair that signs and verifies service-account tokens."""
    pair = KeyPair(directory / "sa.pub", directory / "sa.key")
    if pair.cert.exists() and pair.key.exists():
        return pair
    directory.mkdir(parents=True, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(pair.key, key)
    pair.cert.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pair

"""A pipeline's credentials for worker traffic: mutual TLS under a CA of its own.

Why mutual TLS and not a token: the handshake both encrypts and
authenticates before a single byte of a call reaches the server, so a
caller without the pipeline's certificate never gets as far as an action
name, and there is no bearer secret to leak through a header, a log line or
a retry. Each pipeline (each run of ``ftpipeline run``; on Kubernetes each
FTPipeline, issued again when its run restarts) gets its own CA, and one
leaf certificate signed by it that every member presents, as server and as
client: a member of another pipeline holds a certificate of another CA,
which this pipeline's servers refuse in the handshake. Arrow Flight
supports both ends natively (``verify_client``, ``root_certificates``), so
no middleware sits in the call path.

Workers are reached by address (a pod IP), which no certificate can name
ahead of time, so the leaf names ``SERVER_NAME`` and clients check the
server against that name (``override_hostname``) and this pipeline's CA.

The files, as a Kubernetes Secret of type ``kubernetes.io/tls`` names them:
``ca.crt``, ``tls.crt``, ``tls.key``. The CA's own key is not kept: nothing
signs again, a restart issues a new CA.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature

from ftpipeline.embedded.private import write_private

SERVER_NAME = "ftpipeline-worker"
FILES = ("ca.crt", "tls.crt", "tls.key")
VALID_DAYS = 397  # the longest a public leaf may live; a pipeline's are issued again on every restart


@dataclass(frozen=True)
class Credentials:
    ca: bytes    # PEM: the pipeline's CA certificate
    cert: bytes  # PEM: the leaf every member presents
    key: bytes   # PEM: its private key

    def server_options(self) -> dict[str, Any]:
        """Keyword arguments of a ``FlightServerBase`` that serves only this pipeline's members."""
        import pyarrow.flight as flight

        return {"tls_certificates": [flight.CertKeyPair(cert=self.cert, key=self.key)],
                "verify_client": True, "root_certificates": self.ca}

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments of a ``FlightClient`` that trusts only this pipeline's servers."""
        return {"tls_root_certs": self.ca, "cert_chain": self.cert, "private_key": self.key,
                "override_hostname": SERVER_NAME}

    def write(self, directory: Path) -> Path:
        """The three files in ``directory`` (created 0700), each readable by its owner alone."""
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(directory, 0o700)
        for name, data in zip(FILES, (self.ca, self.cert, self.key)):
            write_private(directory / name, data)
        return directory

    def as_secret_data(self) -> dict[str, bytes]:
        return dict(zip(FILES, (self.ca, self.cert, self.key)))

    def as_secret_body(self) -> dict[str, str]:
        """The ``data`` of a Kubernetes Secret holding them (base64, keyed by file name)."""
        return {k: base64.b64encode(v).decode() for k, v in self.as_secret_data().items()}

    @classmethod
    def from_secret_body(cls, data: Mapping[str, str | bytes]) -> Credentials:
        """Read back from a Secret's ``data`` (every key of ``FILES`` present)."""
        return cls(*(base64.b64decode(data[k]) for k in FILES))


def load(directory: Path) -> Credentials:
    """The credentials written by ``Credentials.write`` (or a mounted Secret); names the file that is missing."""
    data = []
    for name in FILES:
        path = directory / name
        try:
            data.append(path.read_bytes())
        except FileNotFoundError:
            raise FileNotFoundError(f"pipeline credentials: {path} is missing") from None
    return Credentials(*data)


def problems(credentials: Credentials) -> list[str]:
    """Why credentials brought by their owner (not issued by ``generate``) would fail every handshake: the
    leaf must name ``SERVER_NAME``, be signed by the CA and match the key. Empty when they will do."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        ca = x509.load_pem_x509_certificate(credentials.ca)
        leaf = x509.load_pem_x509_certificate(credentials.cert)
        key = serialization.load_pem_private_key(credentials.key, password=None)
    except ValueError as exc:
        return [f"not PEM certificates and an unencrypted PEM key: {exc}"]
    found = []
    try:
        names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
            x509.DNSName)
    except x509.ExtensionNotFound:
        names = []
    if SERVER_NAME not in names:
        found.append(f"tls.crt names {', '.join(names) or 'nothing'}, not {SERVER_NAME} (a DNS name of its SAN)")
    try:
        leaf.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        found.append("tls.crt is not signed by ca.crt")
    if key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo) != \
            leaf.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo):
        found.append("tls.key is not the key of tls.crt")
    return found


def generate(pipeline: str, names: tuple[str, ...] = (SERVER_NAME,)) -> Credentials:
    """A new CA for ``pipeline`` and the leaf its members present (EC P-256), naming ``names`` (the first is
    its common name): a pipeline's workers are all ``SERVER_NAME``; the operator's webhook is its Service."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.timezone.utc)
    until = now + dt.timedelta(days=VALID_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"ftpipeline CA {pipeline}"[:64])])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(until)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0][:64])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(until)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return Credentials(
        ca=ca.public_bytes(pem),
        cert=leaf.public_bytes(pem),
        key=key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )

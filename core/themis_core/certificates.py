"""The cluster's mTLS material: one CA per cluster, one leaf certificate per shard.

Pure functions over PEM bytes (no files, no clock beyond "now") so the operator can put the
result into a Secret and ``themis up`` can write it to disk. Keys are EC P-256: small, fast
to generate in the operator's reconcile loop, and accepted by every TLS stack we use.
Leaf certificates carry both serverAuth and clientAuth because every shard is both the
server and the client of its peers.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: CA lifetime; shard certificates are re-issued by the operator long before this runs out.
CA_VALIDITY = datetime.timedelta(days=3650)
SHARD_VALIDITY = datetime.timedelta(days=365)
#: Tolerate clocks of peers that run slightly behind the issuer.
_BACKDATE = datetime.timedelta(minutes=5)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def generate_ca(cluster: str) -> tuple[bytes, bytes]:
    """A self-signed CA for ``cluster``: ``(cert_pem, key_pem)``."""
    key = _new_key()
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "themisdb.io"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"{cluster} cluster CA"),
        ]
    )
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + CA_VALIDITY)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def issue_shard_cert(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    shard_id: str,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    validity: datetime.timedelta = SHARD_VALIDITY,
) -> tuple[bytes, bytes]:
    """A leaf certificate for ``shard_id`` signed by the CA: ``(cert_pem, key_pem)``.

    The common name is the shard id (peers log it); the SANs are what TLS verification checks,
    so they must list every name a peer dials (pod DNS name, service names, loopback).
    """
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the cluster CA key must be an EC key")
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dict.fromkeys([shard_id, *dns_names])]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    key = _new_key()
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "themisdb.io"),
                    x509.NameAttribute(NameOID.COMMON_NAME, shard_id),
                ]
            )
        )
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(min(now + validity, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                content_commitment=False,
                data_encipherment=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)

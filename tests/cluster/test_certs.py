"""The cluster CA and shard certificates: what a TLS peer will check."""

import ipaddress
import socket
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from themis_core.certificates import generate_ca, issue_shard_cert


@pytest.fixture(scope="module")
def ca():
    return generate_ca("demo")


def test_ca_is_a_self_signed_p256_ca(ca):
    cert = x509.load_pem_x509_certificate(ca[0])
    assert cert.subject == cert.issuer
    assert "demo" in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert cert.public_key().curve.name == "secp256r1"
    cert.verify_directly_issued_by(cert)
    assert ca[1].startswith(b"-----BEGIN PRIVATE KEY-----")


def test_shard_cert_is_signed_by_the_ca_with_sans_and_both_usages(ca):
    pem, key = issue_shard_cert(*ca, "demo-1", ["demo-1.demo-headless.ns.svc", "demo.ns.svc"], ["127.0.0.1"])
    cert = x509.load_pem_x509_certificate(pem)
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca[0]))
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "demo-1"
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["demo-1", "demo-1.demo-headless.ns.svc", "demo.ns.svc"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert cert.public_key().curve.name == "secp256r1"
    assert key != ca[1]


def test_a_foreign_ca_does_not_verify_the_shard_cert(ca):
    pem, _ = issue_shard_cert(*ca, "demo-0", ["demo-0"])
    other = x509.load_pem_x509_certificate(generate_ca("other")[0])
    with pytest.raises((ValueError, InvalidSignature)):
        x509.load_pem_x509_certificate(pem).verify_directly_issued_by(other)


def test_two_shards_complete_a_mutual_tls_handshake(ca, tmp_path):
    """The real check: Python's ssl accepts these files for server and client auth."""
    files = {}
    for sid in ("demo-0", "demo-1"):
        cert, key = issue_shard_cert(*ca, sid, ["localhost"], ["127.0.0.1"])
        (tmp_path / f"{sid}.crt").write_bytes(cert)
        (tmp_path / f"{sid}.key").write_bytes(key)
        files[sid] = (str(tmp_path / f"{sid}.crt"), str(tmp_path / f"{sid}.key"))
    (tmp_path / "ca.crt").write_bytes(ca[0])

    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(tmp_path / "ca.crt"))
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    server_ctx.load_cert_chain(*files["demo-0"])
    client_ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(tmp_path / "ca.crt"))
    client_ctx.load_cert_chain(*files["demo-1"])

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    seen = {}

    def serve():
        conn, _ = listener.accept()
        with server_ctx.wrap_socket(conn, server_side=True) as tls:
            seen["peer"] = tls.getpeercert()["subject"]
            tls.sendall(b"ok")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    with (
        socket.create_connection(("127.0.0.1", port)) as raw,
        client_ctx.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        assert tls.recv(2) == b"ok"
    thread.join(5)
    listener.close()
    assert (("commonName", "demo-1"),) in seen["peer"]

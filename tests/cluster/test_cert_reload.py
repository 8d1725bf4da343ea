"""Spec: renewed certificate files reach a live TLS listener without a restart."""

from __future__ import annotations

import asyncio
import datetime
import ssl

from cryptography import x509
from themis_core.certificates import generate_ca, issue_shard_cert
from themis_shard.cluster.security.cert_reload import CertFiles, CertReloader


def write_pair(tmp_path, ca, validity_days: int) -> int:
    cert, key = issue_shard_cert(
        ca[0], ca[1], "s-0", ["localhost"], ["127.0.0.1"], validity=datetime.timedelta(days=validity_days)
    )
    (tmp_path / "ca.crt").write_bytes(ca[0])
    (tmp_path / "s-0.crt").write_bytes(cert)
    (tmp_path / "s-0.key").write_bytes(key)
    return x509.load_pem_x509_certificate(cert).serial_number


async def served_serial(server_ctx: ssl.SSLContext, ca_pem: bytes) -> int:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    client = ssl.create_default_context(cadata=ca_pem.decode())
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="localhost")
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        return x509.load_der_x509_certificate(der).serial_number
    finally:
        server.close()
        await server.wait_closed()


def test_renewed_files_are_served_by_the_same_context_after_a_check(tmp_path):
    ca = generate_ca("test")
    first = write_pair(tmp_path, ca, 30)
    files = CertFiles(tmp_path / "ca.crt", tmp_path / "s-0.crt", tmp_path / "s-0.key")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(files.cert), str(files.key))
    reloader = CertReloader(files, lambda: [ctx])
    assert asyncio.run(served_serial(ctx, ca[0])) == first
    assert not reloader.check()  # nothing changed
    renewed = write_pair(tmp_path, ca, 365)
    assert reloader.check() and reloader.reloads == 1
    assert asyncio.run(served_serial(ctx, ca[0])) == renewed != first
    assert not reloader.check()


def test_a_half_written_pair_keeps_the_old_certificate(tmp_path):
    ca = generate_ca("test")
    first = write_pair(tmp_path, ca, 30)
    files = CertFiles(tmp_path / "ca.crt", tmp_path / "s-0.crt", tmp_path / "s-0.key")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(files.cert), str(files.key))
    reloader = CertReloader(files, lambda: [ctx])
    other, _ = issue_shard_cert(ca[0], ca[1], "s-0", ["localhost"])
    files.cert.write_bytes(other)  # the new certificate arrived, its key not yet
    assert not reloader.check()
    assert asyncio.run(served_serial(ctx, ca[0])) == first


def test_a_tls_shard_that_fails_to_start_exits_without_waiting_for_the_reload_interval(tmp_path):
    """The reload loop ends with the listeners: a crash-looping pod restarts at once, not after
    one reload interval (here ten minutes, far past the subprocess timeout)."""
    import os
    import subprocess
    import sys

    write_pair(tmp_path, generate_ca("test"), 30)
    env = {
        **os.environ,
        "THEMIS_SHARD_ID": "s-0",
        "THEMIS_PORT": "0",
        "THEMIS_INTERNAL_PORT": "0",
        "THEMIS_DATA_DIR": str(tmp_path / "data"),
        "THEMIS_TLS_CA_PATH": str(tmp_path / "ca.crt"),
        "THEMIS_TLS_CERT_PATH": str(tmp_path / "s-0.crt"),
        "THEMIS_TLS_KEY_PATH": str(tmp_path / "s-0.key"),
        "THEMIS_TLS_RELOAD_INTERVAL_S": "600",
        "THEMIS_LLM_MODEL_PATH": str(tmp_path / "missing.gguf"),  # start-up fails on this
    }
    done = subprocess.run(
        [sys.executable, "-m", "themis_shard", "--log-level", "warning"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "missing.gguf" in done.stdout + done.stderr

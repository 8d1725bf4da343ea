"""Spec: every failure gets a true, clear answer, as a client sees it from real shard processes.

* A full disk: a write the disk refused is a 507 ``insufficient_storage`` (nothing written), the
  shard is unready while it cannot write and says why (``/v1/cluster/status``, a metric), and
  it is ready again, with nothing lost, once space is back (a small tmpfs as the data volume).
* A body is bounded on every route, public and ``/internal``, while it streams (chunked too):
  413 past the limit; an unsigned ``/internal`` request is a 401 before its body is read.
* Bad input gets a 4xx that names it: AQL values and literals nested past the document depth
  limit, a lone UTF-16 surrogate.
* With API keys on, the API description (``/openapi.json``, ``/docs``, ``/redoc``) needs a key
  unless ``THEMIS_AUTH_DOCS_OPEN``.
* A peer paused past its signatures' age limit costs no client a 401 (auth off): a refused
  shard-to-shard signature is a peer fault, retried with a fresh one.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from .conftest import E2E_SECRET

pytestmark = pytest.mark.e2e

LIMIT = 64 * 1024  # THEMIS_MAX_REQUEST_BYTES of the shard under test
PAD = "x" * (512 << 10)


def code_of(r: httpx.Response) -> str:
    return r.json()["error"]["code"]


def poll(predicate, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    """One shard (no model) with the cluster secret (so /internal demands signatures)."""
    from .conftest import free_port, shard_process

    data = tmp_path_factory.mktemp("answers") / "shard"
    data.mkdir()
    port = free_port()
    env = {"THEMIS_MAX_REQUEST_BYTES": str(LIMIT), "THEMIS_CLUSTER_GOSSIP_SECRET": E2E_SECRET}
    with shard_process(data, port, extra_env=env):
        yield f"http://127.0.0.1:{port}"


def raw_request(url: str, head: str, body_chunks, *, read_first: bool = False) -> tuple[int, bytes]:
    """Send ``head`` then the chunks (chunked encoding) on a raw socket; the status and body.
    ``read_first``: read the answer before sending any body (it must come without one)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(head.encode())
        if not read_first:
            try:
                for chunk in body_chunks:
                    s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                s.sendall(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the shard answered and closed before reading it all: what we want
        data = b""
        while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 4 + _length(data):
            piece = s.recv(65536)
            if not piece:
                break
            data += piece
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1]


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 0


# -- body limits --------------------------------------------------------------------------------


def test_an_unsigned_internal_request_is_a_401_before_its_body_is_read(shard):
    head = (
        "POST /internal/gossip HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
        "transfer-encoding: chunked\r\n\r\n"
    )
    status, body = raw_request(shard, head, [], read_first=True)
    assert status == 401 and json.loads(body)["error"]["code"] == "unauthenticated"


def test_an_oversized_chunked_internal_body_is_a_413_not_a_500(shard):
    head = (
        "POST /internal/gossip HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
        f"transfer-encoding: chunked\r\nx-themis-peer: shard-9\r\nx-themis-timestamp: {int(time.time())}\r\n"
        "x-themis-nonce: n1\r\nx-themis-signature: 00\r\n\r\n"
    )
    status, body = raw_request(shard, head, [b"x" * 16384] * (4 * LIMIT // 16384))
    assert status == 413 and json.loads(body)["error"]["code"] == "payload_too_large"


def test_an_oversized_chunked_public_body_is_a_413(shard):
    head = (
        "PUT /v1/collections/big/documents/a HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
        "transfer-encoding: chunked\r\n\r\n"
    )
    status, body = raw_request(shard, head, [b'{"t": "', b"x" * (2 * LIMIT), b'"}'])
    assert status == 413 and json.loads(body)["error"]["code"] == "payload_too_large"
    assert httpx.get(f"{shard}/health", timeout=10).status_code == 200


# -- bad input named ------------------------------------------------------------------------------


def nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [255, 1000])
def test_an_aql_bind_value_nested_too_deep_is_a_400(shard, depth):
    r = httpx.post(
        f"{shard}/v1/aql", json={"query": "RETURN @v", "bind_vars": {"v": nested(depth)}}, timeout=30
    )
    assert r.status_code == 400 and code_of(r) == "bind_value_too_deep", r.text
    assert "limit is 128" in r.json()["error"]["message"]


@pytest.mark.parametrize("depth", [256, 300])
def test_an_aql_literal_nested_too_deep_is_a_400(shard, depth):
    r = httpx.post(f"{shard}/v1/aql", json={"query": "RETURN " + "[" * depth + "1" + "]" * depth}, timeout=30)
    assert r.status_code == 400 and code_of(r) in ("result_too_deep", "query_too_complex"), r.text


def test_aql_values_within_the_limit_still_come_back(shard):
    r = httpx.post(
        f"{shard}/v1/aql", json={"query": "RETURN @v", "bind_vars": {"v": nested(100)}}, timeout=30
    )
    assert r.status_code == 200 and r.json()["result"] == [nested(100)]


@pytest.mark.parametrize(
    ("method", "path", "raw"),
    [
        ("PUT", "/v1/collections/uni/documents/a", '{"t": "\\ud800"}'),
        ("PUT", "/v1/collections/uni/documents/a", '{"t": "ok \\udc00 then"}'),
        ("POST", "/v1/aql", '{"query": "RETURN @v", "bind_vars": {"v": "\\udbff"}}'),
    ],
)
def test_a_lone_utf16_surrogate_is_a_400_that_says_so(shard, method, path, raw):
    r = httpx.request(
        method, f"{shard}{path}", content=raw, headers={"content-type": "application/json"}, timeout=30
    )
    assert r.status_code == 400, r.text
    assert code_of(r) == "invalid_unicode" and "lone UTF-16 surrogate" in r.json()["error"]["message"]


def test_a_surrogate_pair_is_text(shard):
    r = httpx.put(
        f"{shard}/v1/collections/uni/documents/pair",
        content='{"t": "\\ud83d\\ude00"}',
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    assert httpx.get(f"{shard}/v1/collections/uni/documents/pair", timeout=30).json()["document"]["t"] == "😀"


# -- the API description with keys on ------------------------------------------------------------


@pytest.mark.parametrize("docs_open", [False, True])
def test_with_keys_on_the_api_description_needs_a_key_unless_configured_open(
    tmp_path, port, spawn_shard, docs_open
):
    from themis_core.access_policy import Role
    from themis_core.api_keys import entry_for, new_key

    key = new_key()
    env = {
        "THEMIS_AUTH_ENABLED": "true",
        "THEMIS_AUTH_KEYS": entry_for(key, Role.client).line(),
        "THEMIS_AUTH_DOCS_OPEN": str(docs_open).lower(),
    }
    data = tmp_path / "shard"
    data.mkdir()
    url = f"http://127.0.0.1:{port}"
    with spawn_shard(data, port, extra_env=env):
        for path in ("/openapi.json", "/docs", "/redoc"):
            anonymous = httpx.get(url + path, timeout=10)
            assert anonymous.status_code == (200 if docs_open else 401), (path, anonymous.text)
            keyed = httpx.get(url + path, headers={"Authorization": f"Bearer {key}"}, timeout=10)
            assert keyed.status_code == 200, path


# -- a full disk ---------------------------------------------------------------------------------


@pytest.fixture
def small_volume(tmp_path):
    """A 160 MiB tmpfs as the data volume (root only; skipped where mounting is not permitted):
    RocksDB resumes after a full disk only once a write buffer's worth (64 MiB) is free."""
    mount = tmp_path / "volume"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=160m", "tmpfs", str(mount)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(volume: Path) -> Path:
    """Fill the volume to the last byte; the filler file (delete it to free the space)."""
    filler = volume / "filler"
    with open(filler, "wb", buffering=0) as f:  # unbuffered: close has nothing left to write
        try:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
        except OSError:
            pass
        try:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        except OSError:
            pass
    return filler


def test_a_full_disk_is_a_507_an_unready_shard_and_recovers_with_nothing_lost(
    small_volume, port, spawn_shard
):
    data = small_volume / "shard"
    data.mkdir()
    url = f"http://127.0.0.1:{port}"
    with spawn_shard(data, port):
        c = httpx.Client(base_url=url, timeout=30)
        for i in range(20):
            assert c.put(f"/v1/collections/books/documents/k{i}", json={"i": i}).status_code == 200
        filler = fill(small_volume)
        # Where RocksDB reserved its log ahead (fallocate), writes go on into it until the
        # memtable must be flushed to a new file: 512 KiB documents get there within ~70 MiB.
        answers: list[httpx.Response] = []
        for i in range(400):
            answers.append(c.put(f"/v1/collections/books/documents/full{i}", json={"i": i, "pad": PAD}))
            if answers[-1].status_code != 200:
                break
        refused = answers[-1]
        assert refused.status_code == 507, refused.text
        assert code_of(refused) == "insufficient_storage"
        assert "nothing was written" in refused.json()["error"]["message"]
        assert c.get(f"/v1/collections/books/documents/full{len(answers) - 1}").status_code == 404
        for i in range(len(answers) - 1):  # every acknowledged one is there
            assert c.get(f"/v1/collections/books/documents/full{i}").status_code == 200
        assert c.get("/ready").status_code == 503
        storage = c.get("/v1/cluster/status").json()["storage"]
        assert storage["writable"] is False and storage["code"] == "insufficient_storage"
        assert "themis_storage_writable 0.0" in c.get("/metrics").text
        assert c.get("/health").json()["status"] == "degraded"
        assert c.delete("/v1/collections/books/documents/k0").status_code == 507

        filler.unlink()
        assert poll(lambda: c.get("/ready").status_code == 200), c.get("/v1/cluster/status").json()["storage"]
        assert c.get("/v1/cluster/status").json()["storage"] == {
            "writable": True,
            "code": None,
            "reason": None,
            "unwritable_s": 0.0,
        }
        assert "themis_storage_writable 1.0" in c.get("/metrics").text
        assert c.put("/v1/collections/books/documents/after", json={"ok": True}).status_code == 200
        for i in range(20):
            assert c.get(f"/v1/collections/books/documents/k{i}").json()["document"] == {"i": i}


# -- a paused peer and internal signatures ----------------------------------------------------


def test_a_peer_paused_past_the_signature_age_limit_costs_no_client_a_401(local_cluster):
    """Signatures here expire after 1 s (the default is 300 s) and the owner is paused for 4:
    the forwarded writes it reads late are refused by signature, and the client still gets
    only true answers (the write, or a 503 naming the peer) and never a 401."""
    env = {"THEMIS_CLUSTER_INTERNAL_SIGNATURE_MAX_AGE_S": "1", "THEMIS_CLUSTER_INTERNAL_CLOCK_SKEW_S": "0"}
    cluster = local_cluster(3, "raid0", env=env)
    from themis_shard.cluster.placement.owners import Topology

    topo = Topology.of(cluster.plan, "shard-0")
    owned = [k for k in (f"k{i}" for i in range(200)) if topo.owners("c", k)[0] == "shard-1"][:3]
    entry = cluster.url("shard-0")
    paused = cluster.procs["shard-1"]
    os.kill(paused.pid, signal.SIGSTOP)
    try:
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            futures = [
                pool.submit(httpx.put, f"{entry}/v1/collections/c/documents/{k}", json={"k": k}, timeout=60)
                for k in owned
            ]
            time.sleep(4)
            os.kill(paused.pid, signal.SIGCONT)
            answers = [f.result() for f in futures]
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    for k, r in zip(owned, answers, strict=True):
        assert r.status_code != 401, r.text
        assert r.status_code in (200, 503), r.text
        stored = httpx.get(f"{entry}/v1/collections/c/documents/{k}", timeout=30).status_code
        if r.status_code == 200:
            assert stored == 200
        elif code_of(r) == "write_outcome_unknown":
            # The owner refuses an expired signature from the headers alone and may close the
            # connection while the body is still on its way: the coordinator then saw a torn
            # connection, not the refusal, and says the outcome is unknown (true, and named).
            assert "shard-1" in r.json()["error"]["message"] and stored in (200, 404), r.text
        else:  # refused by signature before it ran: a peer fault, named, and nothing written
            assert code_of(r) in ("coordinator_unavailable", "peer_auth_failed"), r.text
            assert "peer_auth" in r.json()["error"]["message"] and stored == 404


def test_in_a_cluster_a_full_owner_is_a_definite_answer_never_an_unknown_outcome(small_volume, local_cluster):
    """RAID1 over 3 shards (2 copies, default w=all); shard-2's data volume is full. A write it
    coordinates is 507 and undone on the other owner; a write it should replicate is a 503
    that says nothing was written (or, at w=1, acknowledged with the other copy); reads agree."""
    from themis_shard.cluster.placement.owners import Topology

    cluster = local_cluster(
        3, "raid1", shard_env={"shard-2": {"THEMIS_DATA_DIR": str(small_volume / "shard-2")}}
    )
    topo = Topology.of(cluster.plan, "shard-0")
    keys = [f"k{i}" for i in range(400)]
    led = [k for k in keys if topo.owners("c", k)[0] == "shard-2"][:2]
    replica = [k for k in keys if topo.owners("c", k)[0] == "shard-0" and "shard-2" in topo.owners("c", k)][
        :2
    ]
    c = httpx.Client(timeout=60)
    entry = cluster.url("shard-0")
    for k in led + replica:
        assert c.put(f"{entry}/v1/collections/c/documents/{k}", json={"v": 1}).status_code == 200
    filler = fill(small_volume)  # (a small write may still fit in a page the log holds: pad them)
    for k in led:  # forwarded to the full coordinator: refused, nothing written anywhere
        r = c.put(f"{entry}/v1/collections/c/documents/{k}", json={"v": 2, "pad": PAD})
        assert r.status_code == 507 and code_of(r) == "insufficient_storage", r.text
        r = c.delete(f"{entry}/v1/collections/c/documents/{k}")
        assert r.status_code == 507 and code_of(r) == "insufficient_storage", r.text
    r = c.put(f"{entry}/v1/collections/c/documents/{replica[0]}", json={"v": 2, "pad": PAD})
    assert r.status_code == 503 and code_of(r) == "replicas_unavailable", r.text
    assert "nothing was written" in r.json()["error"]["message"]
    r = c.put(f"{entry}/v1/collections/c/documents/{replica[1]}?w=1", json={"v": 2, "pad": PAD})
    assert r.status_code == 200, r.text
    assert poll(lambda: c.get(f"{cluster.url('shard-2')}/ready").status_code == 503)
    status = c.get(f"{cluster.url('shard-2')}/v1/cluster/status").json()["storage"]
    assert status["code"] == "insufficient_storage"
    for k, v in [(led[0], 1), (led[1], 1), (replica[0], 1), (replica[1], 2)]:
        for sid in ("shard-0", "shard-1"):
            got = c.get(f"{cluster.url(sid)}/v1/collections/c/documents/{k}")
            assert got.status_code == 200 and got.json()["document"]["v"] == v, (k, sid, got.status_code)

    filler.unlink()
    assert poll(lambda: c.get(f"{cluster.url('shard-2')}/ready").status_code == 200, timeout=90)
    for k in led:
        assert c.put(f"{entry}/v1/collections/c/documents/{k}", json={"v": 3}).status_code == 200

"""Spec: `themis backup create` takes a consistent backup of a running cluster to a directory or an
S3-compatible store (moto's server, started here), and `themis up --restore-from DEST/ID` starts a
new cluster with another shard count from it, where every document, version, tombstone and
vector-search answer is the source's at the cut. A backup taken while cross-shard transfers run
restores to a state where the bank's total holds. A corrupt or partial backup is refused before
anything starts, and a non-empty data root is refused by name."""

from __future__ import annotations

import random
import shutil
import threading
from pathlib import Path

import pytest
from themis_client import NO_RETRY, NotFound, Operation, ThemisClient, ThemisError
from themis_testing.s3 import moto_s3, s3_env

from .conftest import run_themis

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DIM = 8


themis = run_themis


def up(cwd: Path, shards: int, *extra: str, env: dict | None = None) -> list[str]:
    done = themis("up", "--shards", str(shards), "--no-llm", "--base-port", "0", *extra, cwd=cwd, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return [line.split()[1] for line in done.stdout.strip().splitlines() if line.startswith("shard-")]


def vector(i: int) -> list[float]:
    rng = random.Random(i)
    return [round(rng.uniform(-1, 1), 4) for _ in range(DIM)]


KEYS = [("books", f"b{i}") for i in range(150)] + [("notes", f"n{i}") for i in range(40)]
QUERIES = [vector(10_000 + q) for q in range(8)]


def load(url: str) -> None:
    with ThemisClient(url) as db:
        db.declare_collection("books", dimension=DIM, index="flat")
        for collection, key in KEYS:
            i = int(key[1:])
            doc = {"i": i, "embedding": vector(i)} if collection == "books" else {"text": f"note {i}"}
            db.put(collection, key, doc)
        for i in range(0, 150, 7):
            db.put("books", f"b{i}", {"i": i, "rev": 2, "embedding": vector(i + 500)})
        for i in range(0, 150, 11):
            db.delete("books", f"b{i}")
        db.delete("notes", "n3")
        db.put("notes", "n3", {"text": "again"})  # version 3 after a tombstone
        db.transaction([Operation.put("notes", f"n{i}", {"txn": True}) for i in range(30, 40)])


def state(url: str) -> tuple[dict, list]:
    """Every key's (version, document) or None, and the answers of the vector queries."""
    found: dict = {}
    with ThemisClient(url) as db:
        for collection, key in KEYS:
            try:
                d = db.get(collection, key)
                found[(collection, key)] = (d.version, d.document)
            except NotFound:
                found[(collection, key)] = None
        answers = [
            [(h.urn, round(h.score, 5)) for h in db.search("books", vector=q, k=10).results] for q in QUERIES
        ]
        settings = db.collection("books")
    return found | {"settings": (settings.dimension, settings.index)}, answers


@pytest.fixture(scope="module")
def s3(tmp_path_factory) -> dict:
    """moto's S3 server with a bucket ``backups``, and the environment that points boto3 there."""
    with moto_s3(tmp_path_factory.mktemp("moto")) as endpoint:
        yield s3_env(endpoint)


@pytest.fixture(scope="module")
def source(tmp_path_factory, s3) -> dict:
    """A 3-shard cluster loaded, its state read, backed up to a directory and to S3, then destroyed."""
    cwd = tmp_path_factory.mktemp("source")
    urls = up(cwd, 3)
    try:
        load(urls[0])
        expected = state(urls[1])
        to_dir = themis("backup", "create", "--to", str(cwd / "backups"), cwd=cwd)
        assert to_dir.returncode == 0, to_dir.stdout + to_dir.stderr
        to_s3 = themis("backup", "create", "--to", "s3://backups/nightly", cwd=cwd, env=s3)
        assert to_s3.returncode == 0, to_s3.stdout + to_s3.stderr
    finally:
        themis("down", cwd=cwd)
    shutil.rmtree(cwd / "data")  # the source cluster is gone
    return {
        "dir": f"{cwd / 'backups'}/{to_dir.stdout.strip().splitlines()[-1]}",
        "s3": f"s3://backups/nightly/{to_s3.stdout.strip().splitlines()[-1]}",
        "expected": expected,
    }


def test_a_directory_backup_restores_onto_two_shards_with_every_version_and_search_answer(
    source, tmp_path
) -> None:
    urls = up(tmp_path, 2, "--restore-from", source["dir"])
    try:
        assert state(urls[0]) == source["expected"]
        assert state(urls[1]) == source["expected"]  # every shard answers the same
        with ThemisClient(urls[0]) as db:  # and the restored cluster takes writes on top
            assert db.put("books", "b7", {"i": 7, "embedding": vector(1)}).version == 3
    finally:
        themis("down", cwd=tmp_path)


def test_an_s3_backup_restores_onto_four_shards(source, s3, tmp_path) -> None:
    listed = themis("backup", "list", "--to", "s3://backups/nightly", cwd=tmp_path, env=s3)
    assert source["s3"].rsplit("/", 1)[1] in listed.stdout and "INCOMPLETE" not in listed.stdout
    urls = up(tmp_path, 4, "--restore-from", source["s3"], env=s3)
    try:
        assert state(urls[3]) == source["expected"]
    finally:
        themis("down", cwd=tmp_path)


def test_a_corrupt_or_partial_backup_is_refused_before_anything_starts(source, tmp_path) -> None:
    backup = Path(source["dir"])
    copy = tmp_path / "copy"
    shutil.copytree(backup.parent, copy)
    sst = sorted((copy / backup.name / "shards" / "shard-1" / "db").glob("*.sst"))[0]
    raw = bytearray(sst.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    sst.write_bytes(bytes(raw))
    refused = themis(
        "up", "--shards", "2", "--no-llm", "--restore-from", f"{copy}/{backup.name}", cwd=tmp_path
    )
    assert refused.returncode != 0 and f"{sst.name} is corrupt" in refused.stderr, refused.stderr
    assert not (tmp_path / "data").exists() and not (tmp_path / ".themis" / "cluster.json").exists()
    (copy / backup.name / "manifest.json").unlink()
    partial = themis(
        "up", "--shards", "2", "--no-llm", "--restore-from", f"{copy}/{backup.name}", cwd=tmp_path
    )
    assert partial.returncode != 0 and "no complete backup" in partial.stderr
    (tmp_path / "data" / "shard-0" / "documents").mkdir(parents=True)
    (tmp_path / "data" / "shard-0" / "documents" / "CURRENT").write_text("x")
    busy = themis("up", "--shards", "2", "--no-llm", "--restore-from", source["dir"], cwd=tmp_path)
    assert busy.returncode != 0 and "is not empty (shard-0 hold data)" in busy.stderr, busy.stderr


def test_a_backup_taken_during_cross_shard_transfers_restores_a_consistent_bank(tmp_path) -> None:
    accounts, start = [f"acc-{i}" for i in range(12)], 100
    urls = up(tmp_path, 3)
    stop = threading.Event()
    committed = [0]
    try:
        with ThemisClient(urls[0]) as db:
            for a in accounts:
                db.put("bank", a, {"balance": start})

        def transfer(seed: int) -> None:
            rng = random.Random(seed)
            with ThemisClient(urls[seed % len(urls)], retry=NO_RETRY) as db:
                while not stop.is_set():
                    a, b = rng.sample(accounts, 2)
                    try:
                        x, y = db.get("bank", a), db.get("bank", b)
                        amount = rng.randint(1, 10)
                        db.transaction(
                            [
                                Operation.put(
                                    "bank",
                                    a,
                                    {"balance": x.document["balance"] - amount},
                                    if_version=x.version,
                                ),
                                Operation.put(
                                    "bank",
                                    b,
                                    {"balance": y.document["balance"] + amount},
                                    if_version=y.version,
                                ),
                            ]
                        )
                        committed[0] += 1
                    except ThemisError:
                        pass  # a conflict or a lock held by another transfer: nothing applied

        workers = [threading.Thread(target=transfer, args=(s,)) for s in range(3)]
        for w in workers:
            w.start()
        while committed[0] < 20:
            threading.Event().wait(0.1)
        taken = themis("backup", "create", "--to", str(tmp_path / "backups"), cwd=tmp_path)
        assert taken.returncode == 0, taken.stdout + taken.stderr
        backup_id = taken.stdout.strip().splitlines()[-1]
        during = committed[0]
        while committed[0] < during + 20:  # transfers went on after the backup
            threading.Event().wait(0.1)
    finally:
        stop.set()
        for w in workers:
            w.join(30)
        themis("down", cwd=tmp_path)
    restored = tmp_path / "restored"
    restored.mkdir()
    urls = up(restored, 2, "--restore-from", f"{tmp_path / 'backups'}/{backup_id}")
    try:
        with ThemisClient(urls[1]) as db:
            balances = {a: db.get("bank", a).document["balance"] for a in accounts}
        assert sum(balances.values()) == start * len(accounts), balances
        assert balances != dict.fromkeys(accounts, start)  # transfers before the cut are in it
    finally:
        themis("down", cwd=restored)

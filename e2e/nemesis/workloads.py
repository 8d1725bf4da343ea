"""The client workloads, each a loop of one worker over ``themis_client`` (sync, no retries:
a retried conditional write would turn an applied write into a 409 and falsify the history).

* ``register``: read a register, then ``put(if_match=version)`` a unique value.
* ``bank``: transfer between two accounts of one group with one transaction conditioned on
  both versions (``if_version``); read a whole group and prove the read consistent with a
  conditioned no-op transaction over the versions read. A group is the accounts sharing a
  primary while cross-shard transactions are refused (400 ``cross_shard_transaction``), all
  accounts once they are accepted (``Bank.probe`` finds out at run time).
* ``set``: add a unique element to an append-only list with ``put(if_match=version)``.

Each worker sends each operation to a shard chosen at random.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence

import httpx
from themis_client import Operation, ThemisClient, ThemisError
from themis_client.retry import NO_RETRY

from .history import History

REGISTERS = "reg"
ACCOUNTS = "bank"
SETS = "sets"
START_BALANCE = 100


def clients(urls: Sequence[str], timeout: float) -> list[ThemisClient]:
    return [ThemisClient(u, retry=NO_RETRY, timeout=timeout) for u in urls]


class Worker:
    def __init__(
        self, process: int, history: History, urls: Sequence[str], seed: int, timeout: float
    ) -> None:
        self.process = process
        self.history = history
        self.dbs = clients(urls, timeout)
        self.rng = random.Random(seed * 1000 + process)
        self.counter = 0

    def db(self) -> ThemisClient:
        return self.rng.choice(self.dbs)

    def unique(self) -> str:
        self.counter += 1
        return f"p{self.process}-{self.counter}"

    def loop(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                self.step()
                stop.wait(self.rng.uniform(0.0, 0.05))
        finally:
            for db in self.dbs:
                db.close()

    def step(self) -> None:
        raise NotImplementedError


class RegisterWorker(Worker):
    def __init__(self, *args, keys: Sequence[str], **kw) -> None:
        super().__init__(*args, **kw)
        self.keys = list(keys)

    def step(self) -> None:
        key = self.rng.choice(self.keys)
        db = self.db()
        read = self.history.run(self.process, "register", "read", key, None, lambda: _version_value(db, key))
        if read.result is None or self.rng.random() < 0.3:
            return
        value = self.unique()
        db = self.db()
        self.history.run(
            self.process,
            "register",
            "cas",
            key,
            (read.result[0], value, read.result[1]),
            lambda: db.put(REGISTERS, key, {"value": value}, if_match=read.result[0]).version,
        )


def _version_value(db: ThemisClient, key: str) -> tuple[int, str]:
    doc = db.get(REGISTERS, key)
    return doc.version, doc.document["value"]


class Bank:
    """The accounts, their groups and each group's total."""

    def __init__(self, groups: dict[str, list[str]]) -> None:
        self.groups = groups
        self.totals = {g: START_BALANCE * len(accounts) for g, accounts in groups.items()}

    @staticmethod
    def probe(db: ThemisClient, by_primary: dict[str, list[str]]) -> Bank:
        """One conditioned no-op transaction over accounts of two primaries: refused with
        ``cross_shard_transaction`` → one group per primary; committed → one group."""
        a, b = (accounts[0] for accounts in list(by_primary.values())[:2])
        ops = [Operation.put(ACCOUNTS, k, {"balance": START_BALANCE}, if_version=1) for k in (a, b)]
        try:
            db.transaction(ops)
        except ThemisError as exc:
            if exc.code != "cross_shard_transaction":
                raise
            return Bank(dict(by_primary))
        return Bank({"all": sorted(k for accounts in by_primary.values() for k in accounts)})


class BankWorker(Worker):
    def __init__(self, *args, bank: Bank, **kw) -> None:
        super().__init__(*args, **kw)
        self.bank = bank

    def step(self) -> None:
        group = self.rng.choice(sorted(self.bank.groups))
        accounts = self.bank.groups[group]
        if self.rng.random() < 0.3:
            db = self.db()
            self.history.run(self.process, "bank", "read", group, None, lambda: _validated_read(db, accounts))
            return
        a, b = self.rng.sample(accounts, 2)
        db = self.db()
        try:
            da, dbb = db.get(ACCOUNTS, a), db.get(ACCOUNTS, b)
        except (ThemisError, httpx.HTTPError):  # a failed read sends no transfer
            return
        amount = min(da.document["balance"], self.rng.randint(1, 10))
        if amount <= 0:
            return
        ops = [
            Operation.put(ACCOUNTS, a, {"balance": da.document["balance"] - amount}, if_version=da.version),
            Operation.put(ACCOUNTS, b, {"balance": dbb.document["balance"] + amount}, if_version=dbb.version),
        ]
        db = self.db()
        self.history.run(
            self.process, "bank", "transfer", group, (a, b, amount), lambda: db.transaction(ops).committed
        )


def _validated_read(db: ThemisClient, accounts: Sequence[str]) -> dict[str, int]:
    docs = {k: db.get(ACCOUNTS, k) for k in accounts}
    db.transaction([Operation.put(ACCOUNTS, k, d.document, if_version=d.version) for k, d in docs.items()])
    return {k: d.document["balance"] for k, d in docs.items()}


class SetWorker(Worker):
    def __init__(self, *args, keys: Sequence[str], **kw) -> None:
        super().__init__(*args, **kw)
        self.keys = list(keys)

    def step(self) -> None:
        key = self.rng.choice(self.keys)
        db = self.db()
        try:
            doc = db.get(SETS, key)
        except (ThemisError, httpx.HTTPError):  # a failed read sends no add
            return
        element = self.unique()
        elements = [*doc.document["elements"], element]
        db = self.db()
        self.history.run(
            self.process,
            "set",
            "add",
            key,
            element,
            lambda: db.put(SETS, key, {"elements": elements}, if_match=doc.version).version,
        )

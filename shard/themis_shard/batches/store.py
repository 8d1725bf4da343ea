"""Files, batches and per-line results as documents in reserved collections.

Everything the Batch API keeps is an ordinary document, so it is replicated, survives restarts
and ``kill -9`` like any other, and any shard answers for it:

* ``_openai_files/{file_id}``: the file object; its bytes in ``_openai_file_parts/{file_id}.{i}``
  (text chunks that keep each document under the size limit). The parts are written first and
  the object last, so a file is visible only whole.
* ``_openai_batches/{batch_id}``: the batch object, OpenAI's shape; updated by read, change,
  write ``If-Match`` so a cancel and the runner never overwrite each other.
* ``_openai_batch_lines/{batch_id}.{index}``: one line's result, written as soon as it is known,
  so a runner that resumes after a restart runs only the lines without one; deleted once the
  batch has ended and its output and error files hold them.

Lists are AQL scans over the cluster (``FOR f IN _openai_files ...``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import NotFound, ThemisError
from ..storage.documents import Change, StoredDocument, Write
from ..storage.names import KEY_RE
from . import model

FILES = "_openai_files"
PARTS = "_openai_file_parts"
BATCHES = "_openai_batches"
LINES = "_openai_batch_lines"
#: Characters per part: at most 4 bytes each in UTF-8, well under the 1 MiB document limit.
PART_CHARS = 128 * 1024
#: Tries of a read-change-write that lost a race (another writer changed the batch meanwhile).
UPDATE_TRIES = 20


#: The cluster's routed commit and linearizable read of one key.
Commit = Callable[[list[Write]], Awaitable[list[Change]]]
Get = Callable[[str, str], Awaitable[StoredDocument]]
#: An AQL statement with its bind variables → the result rows.
Query = Callable[[str, dict[str, Any]], Awaitable[list[dict[str, Any]]]]


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def public(row: dict[str, Any]) -> dict[str, Any]:
    """A scanned document without AQL's system attributes (``_key``, ``_urn``, ``_version``)."""
    return {k: v for k, v in row.items() if not k.startswith("_")}


def parts_of(text: str) -> list[str]:
    return [text[i : i + PART_CHARS] for i in range(0, len(text), PART_CHARS)] or [""]


class BatchStore:
    def __init__(self, commit: Commit, get: Get, query: Query) -> None:
        self._commit = commit
        self._read = get
        self._query = query

    async def _found(self, collection: str, key: str, what: str) -> StoredDocument:
        missing = NotFound(f"{what} {key!r} does not exist", code=f"{what}_not_found")
        if not KEY_RE.fullmatch(key):  # no file or batch is stored under a name like that
            raise missing
        try:
            return await self._read(collection, key)
        except NotFound:
            raise missing from None

    async def _scan(
        self, collection: str, where: str = "", binds: dict[str, Any] | None = None
    ) -> list[dict]:
        text = f"FOR d IN @@c {where} SORT d.created_at DESC, d.id DESC RETURN d"
        try:
            rows = await self._query(text, {"@c": collection, **(binds or {})})
        except ThemisError as exc:
            if exc.code == "aql_unknown_collection":  # nothing was ever written there
                return []
            raise
        return [public(r) for r in rows]

    # -- files -------------------------------------------------------------------------------
    async def put_file(
        self, file_id: str, data: bytes, filename: str, purpose: str, created_at: int | None = None
    ) -> dict[str, Any]:
        """Store ``data`` (UTF-8 text) under ``file_id``: parts first, then the object."""
        parts = parts_of(data.decode())
        await asyncio.gather(
            *(self._commit([Write(PARTS, f"{file_id}.{i}", {"data": p})]) for i, p in enumerate(parts))
        )
        obj = model.file_object(file_id, len(data), created_at or now(), filename, purpose)
        await self._commit([Write(FILES, file_id, {**obj, "parts": len(parts)})])
        return obj

    async def file(self, file_id: str) -> dict[str, Any]:
        doc = await self._found(FILES, file_id, "file")
        return {k: v for k, v in doc.document.items() if k != "parts"}

    async def content(self, file_id: str) -> bytes:
        doc = await self._found(FILES, file_id, "file")
        parts = await asyncio.gather(
            *(self._read(PARTS, f"{file_id}.{i}") for i in range(doc.document["parts"]))
        )
        return "".join(p.document["data"] for p in parts).encode()

    async def delete_file(self, file_id: str) -> dict[str, Any]:
        doc = await self._found(FILES, file_id, "file")
        await self._commit([Write(FILES, file_id, None)])
        for i in range(doc.document["parts"]):
            await self._commit([Write(PARTS, f"{file_id}.{i}", None)])
        return {"id": file_id, "object": "file", "deleted": True}

    async def files(self, purpose: str | None) -> list[dict[str, Any]]:
        where, binds = ("FILTER d.purpose == @purpose", {"purpose": purpose}) if purpose else ("", {})
        return [{k: v for k, v in f.items() if k != "parts"} for f in await self._scan(FILES, where, binds)]

    # -- batches -----------------------------------------------------------------------------
    async def create_batch(self, batch: dict[str, Any]) -> dict[str, Any]:
        await self._commit([Write(BATCHES, batch["id"], batch, 0)])
        return batch

    async def batch(self, batch_id: str) -> dict[str, Any]:
        return (await self._found(BATCHES, batch_id, "batch")).document

    async def batches(self) -> list[dict[str, Any]]:
        return await self._scan(BATCHES)

    async def update(
        self, batch_id: str, change: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        """Apply ``change`` to the stored batch (read, change, write If-Match; retried when
        another writer came first). An unchanged batch is not written."""
        for _ in range(UPDATE_TRIES):
            doc = await self._found(BATCHES, batch_id, "batch")
            updated = change(doc.document)
            if updated == doc.document:
                return updated
            try:
                await self._commit([Write(BATCHES, batch_id, updated, doc.version)])
            except ThemisError as exc:
                if exc.status != 409:
                    raise
                continue
            return updated
        raise ThemisError(f"batch {batch_id} kept changing under the update", code="batch_busy", status=409)

    # -- per-line results --------------------------------------------------------------------
    async def put_result(self, batch_id: str, index: int, line: dict[str, Any]) -> None:
        await self._commit(
            [Write(LINES, f"{batch_id}.{index}", {"batch_id": batch_id, "index": index, **line})]
        )

    async def drop_results(self, batch_id: str, indices: list[int], at_once: int = 16) -> None:
        """Delete the per-line results of a batch that ended (its files hold them now), so the
        results of later batches are not scanned past them."""
        keys = [f"{batch_id}.{i}" for i in indices]
        for start in range(0, len(keys), at_once):
            await asyncio.gather(
                *(self._commit([Write(LINES, k, None)]) for k in keys[start : start + at_once])
            )

    async def results(self, batch_id: str) -> dict[int, dict[str, Any]]:
        """index → the result line, for every line that has one."""
        rows = await self._scan(LINES, "FILTER d.batch_id == @id", {"id": batch_id})
        return {r["index"]: {k: v for k, v in r.items() if k not in ("batch_id", "index")} for r in rows}

"""What the Batch API routes do, without HTTP: upload and validate files, create and cancel
batches. Any shard answers; the batch's coordinator (``runner``) does the running."""

from __future__ import annotations

from typing import Any

from ..errors import BadRequest, PayloadTooLarge
from . import model
from .runner import BatchRunner
from .settings import BatchSettings
from .store import BatchStore, new_id, now


class BatchService:
    def __init__(self, store: BatchStore, runner: BatchRunner, settings: BatchSettings) -> None:
        self.store = store
        self._runner = runner
        self._settings = settings

    async def upload(self, data: bytes, filename: str, purpose: str) -> dict[str, Any]:
        """Store an input file; its lines are checked now (JSON objects with custom_id, method,
        a supported url and a body), so a bad file is refused here with the line that is wrong."""
        if purpose not in model.UPLOAD_PURPOSES:
            raise BadRequest(
                f"purpose {purpose!r} is not supported: files here are Batch API input (purpose 'batch')",
                code="unsupported_purpose",
            )
        if len(data) > self._settings.max_file_bytes:
            raise PayloadTooLarge(
                f"the file is {len(data)} bytes; at most {self._settings.max_file_bytes} are taken "
                "(THEMIS_BATCH_MAX_FILE_BYTES)",
                code="file_too_large",
            )
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise model.invalid_file(None, "the file is not UTF-8 text") from None
        model.parse_input(text, None, self._settings.max_lines)
        return await self.store.put_file(new_id("file-"), data, filename, purpose)

    async def create(self, req: model.CreateBatch) -> dict[str, Any]:
        """A batch over an uploaded file: every line must target ``endpoint``."""
        meta = await self.store.file(req.input_file_id)
        if meta["purpose"] != "batch":
            raise BadRequest(
                f"file {req.input_file_id!r} has purpose {meta['purpose']!r}; a batch input needs 'batch'",
                code="invalid_input_file",
            )
        text = (await self.store.content(req.input_file_id)).decode()
        model.parse_input(text, req.endpoint, self._settings.max_lines)
        batch = await self.store.create_batch(model.new_batch(new_id("batch_"), req, now()))
        self._runner.wake()
        return batch

    async def cancel(self, batch_id: str) -> dict[str, Any]:
        batch = await self.store.update(batch_id, lambda b: model.cancel_requested(b, now()))
        self._runner.wake()
        return batch

    async def batches(self, after: str | None, limit: int) -> dict[str, Any]:
        return model.page(await self.store.batches(), after, limit)

    async def files(self, purpose: str | None, after: str | None, limit: int) -> dict[str, Any]:
        return model.page(await self.store.files(purpose), after, limit)

"""Fetching model and adapter files from ``http(s)://`` sources onto the weights volume.

A Kubernetes shard gets its GGUF model (``model.source``) and its LoRA adapters
(``LoRAAdapter.source``) from URLs: each is downloaded once into ``THEMIS_WEIGHTS_DIR`` (the
pod's weights PVC), streamed to a ``.part`` file while its sha256 is computed, checked against
the expected digest, size-limited, and renamed into place only when complete. A file already
there is reused when its digest matches. Transient failures (connection errors, timeouts, 5xx,
429) are retried with exponential backoff; answers that cannot improve (4xx, a wrong sha256, a
file over the limit) fail at once with a message that names the reason — that message is what
``kubectl get lora -o yaml`` and the ThemisCluster's Degraded condition show.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from ..errors import ThemisError
from .model import resolve_model_path
from .settings import LLMSettings

log = logging.getLogger(__name__)


class FetchError(ThemisError):
    """A source that could not be fetched (the message says why)."""

    status, code = 502, "source_unavailable"


class FetchSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="THEMIS_FETCH_", extra="ignore")

    #: Extra attempts after a transient failure (so at most 1 + retries downloads).
    retries: int = Field(3, ge=0, le=20)
    #: Backoff before attempt n (n ≥ 1): backoff_s · 2^(n-1), capped at 30 s.
    backoff_s: float = Field(1.0, ge=0)
    connect_timeout_s: float = Field(10.0, gt=0)
    #: Longest silence while reading (not the whole download: models take minutes).
    read_timeout_s: float = Field(60.0, gt=0)
    #: Largest file accepted, in bytes: a generation model, and a LoRA adapter.
    max_model_bytes: int = Field(64 << 30, ge=1)
    max_adapter_bytes: int = Field(2 << 30, ge=1)


def is_url(source: str) -> bool:
    return source.startswith(("http://", "https://"))


def target_name(url: str, sha256: str | None) -> str:
    """A stable file name for a source: its digest when known, else a hash of the URL (so two
    URLs with the same basename never collide), keeping the basename for people reading ls."""
    base = url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1] or "file"
    key = sha256 or hashlib.sha256(url.encode()).hexdigest()
    return f"{key[:16]}-{base}"


def retry_delay(attempt: int, backoff_s: float) -> float:
    """Seconds to wait before retry ``attempt`` (1-based)."""
    return min(30.0, backoff_s * (2 ** (attempt - 1)))


def _sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


class _Transient(Exception):
    """Worth another attempt."""


@dataclass(frozen=True)
class SourceFetcher:
    """Downloads ``http(s)`` sources into ``directory`` (on the weights volume)."""

    directory: Path
    settings: FetchSettings
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    async def fetch(self, url: str, *, sha256: str | None, max_bytes: int, what: str = "file") -> Path:
        """The local path of ``url``'s content, verified; raises :class:`FetchError`."""
        if not is_url(url):
            raise FetchError(f"{what} source {url!r} is not an http(s) URL", status=400, code="bad_source")
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.directory / target_name(url, sha256)
        if target.is_file():
            if sha256 is None or await asyncio.to_thread(_sha256_of, target) == sha256:
                return target
            target.unlink()  # a file that no longer matches (corrupt volume): fetch again
        last = ""
        for attempt in range(self.settings.retries + 1):
            if attempt:
                await self.sleep(retry_delay(attempt, self.settings.backoff_s))
            try:
                await self._download(url, target, sha256=sha256, max_bytes=max_bytes, what=what)
                return target
            except _Transient as exc:
                last = str(exc)
                log.warning("fetching %s %s failed (attempt %d): %s", what, url, attempt + 1, last)
        raise FetchError(
            f"{what} {url} could not be fetched after {self.settings.retries + 1} attempts: {last}"
        )

    async def _download(
        self, url: str, target: Path, *, sha256: str | None, max_bytes: int, what: str
    ) -> None:
        part = target.with_name(target.name + ".part")
        s = self.settings
        timeout = httpx.Timeout(s.read_timeout_s, connect=s.connect_timeout_s)
        digest = hashlib.sha256()
        size = 0
        try:
            async with (
                httpx.AsyncClient(timeout=timeout, follow_redirects=True) as client,
                client.stream("GET", url) as resp,
            ):
                if resp.status_code >= 500 or resp.status_code == 429:
                    raise _Transient(f"HTTP {resp.status_code}")
                if resp.status_code >= 400:
                    raise FetchError(f"{what} {url} could not be fetched: HTTP {resp.status_code}")
                declared = int(resp.headers.get("content-length") or 0)
                if declared > max_bytes:
                    raise FetchError(
                        f"{what} {url} is {declared} bytes, over the limit of {max_bytes}",
                        code="source_too_large",
                        status=413,
                    )
                with part.open("wb") as out:
                    async for chunk in resp.aiter_bytes(1 << 20):
                        size += len(chunk)
                        if size > max_bytes:
                            raise FetchError(
                                f"{what} {url} is over the limit of {max_bytes} bytes",
                                code="source_too_large",
                                status=413,
                            )
                        digest.update(chunk)
                        out.write(chunk)
                    out.flush()
                    os.fsync(out.fileno())
        except httpx.HTTPError as exc:
            part.unlink(missing_ok=True)
            raise _Transient(f"{type(exc).__name__}: {exc}") from exc
        except BaseException:
            part.unlink(missing_ok=True)
            raise
        got = digest.hexdigest()
        if sha256 is not None and got != sha256:
            part.unlink(missing_ok=True)
            raise FetchError(
                f"sha256 mismatch for {what} {url}: expected {sha256}, got {got}",
                code="sha256_mismatch",
                status=400,
            )
        os.replace(part, target)
        log.info("fetched %s %s (%d bytes, sha256 %s)", what, url, size, got)


async def _checked(source: str, sha: str | None, fetcher: SourceFetcher, what: str) -> str | None:
    """The local file for ``source`` (fetched when a URL), its sha256 checked; None: unchanged."""
    if is_url(source):
        path = await fetcher.fetch(source, sha256=sha, max_bytes=fetcher.settings.max_model_bytes, what=what)
        return str(path)
    if sha is not None:
        path = await asyncio.to_thread(resolve_model_path, source)
        got = await asyncio.to_thread(_sha256_of, path)
        if got != sha:
            raise FetchError(
                f"sha256 mismatch for {what} {source}: expected {sha}, got {got}",
                code="sha256_mismatch",
                status=400,
            )
    return None


async def fetch_llm_sources(llm: LLMSettings, fetcher: SourceFetcher) -> LLMSettings:
    """The engine's settings with every ``http(s)`` model source replaced by its fetched file.

    The ``*_sha256`` settings are checked for every kind of source (fetched, mounted, bundled,
    RAID-assembled), so a wrong file is refused by name before llama.cpp loads it.
    """
    update: dict[str, str] = {}
    for field, sha_field, what, skip in (
        ("model_path", "model_sha256", "model", ()),
        ("draft_model_path", "draft_model_sha256", "draft model", ("",)),
        ("embedding_model", "embedding_model_sha256", "embedding model", ("none",)),
    ):
        source = getattr(llm, field)
        if source in skip:
            continue
        if (local := await _checked(source, getattr(llm, sha_field) or None, fetcher, what)) is not None:
            update[field] = local
    return llm.model_copy(update=update) if update else llm

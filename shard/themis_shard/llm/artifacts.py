"""First-use artifacts (the assembled model, the converted embedding GGUF, CPU-probe outcomes),
made once per cache however many processes ask at the same moment.

Three shards of a fresh `make up` (or pods sharing a volume) all find the cache empty and would
all write the same file. Here exactly one writer builds under an exclusive ``flock`` on a lock
file next to the artifact, into a temporary name in the same directory, checks it, fsyncs it and
renames it into place; everyone else waits on the lock (saying so), then checks what it finds.
A file that fails its check (a corrupt volume, a partial write of an older release) is rebuilt,
never served. The kernel drops a dead writer's lock, and its temporary file is never read.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

log = logging.getLogger(__name__)


class CacheSettings(BaseSettings):
    """Where first-use artifacts live (``THEMIS_CACHE_DIR``; the llama.cpp wheel cache is apart)."""

    model_config = SettingsConfigDict(env_prefix="THEMIS_", extra="ignore")

    #: "" = $XDG_CACHE_HOME/themis, else ~/.cache/themis.
    cache_dir: str = ""


class ArtifactError(Exception):
    """An artifact that was built but fails its own check (the message names it)."""


def cache_root(settings: CacheSettings | None = None) -> Path:
    """The root of every first-use artifact of this user (or this pod's volume)."""
    chosen = (settings or CacheSettings()).cache_dir
    if chosen:
        return Path(chosen).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "themis"


def sha256_of(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def exclusive(lock_path: Path, what: str) -> Iterator[None]:
    """Hold ``lock_path``'s exclusive lock; log once that we wait when someone else holds it.
    On a read-only cache (a pod's baked-in models) nobody can write, so nobody needs the lock."""
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fh = lock_path.open("a+")
    except OSError as exc:
        log.warning("cannot lock %s (%s): %s without a lock", lock_path, exc.strerror, what)
        yield
        return
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning("waiting for another process to finish %s (lock %s)", what, lock_path)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _digest_file(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


def intact(target: Path, expected_sha256: str | None) -> bool:
    """``target`` is complete: its sha256 is the expected one, or (none known) the one its writer
    recorded next to it after building it."""
    if not target.is_file():
        return False
    want = expected_sha256
    if want is None:
        try:
            want = _digest_file(target).read_text().strip()
        except OSError:
            return False
    return sha256_of(target) == want


def materialise(
    target: Path,
    build: Callable[[Path], None],
    *,
    what: str,
    expected_sha256: str | None = None,
) -> Path:
    """``target``, built by ``build(tmp_path)`` if it is missing or fails its check.

    ``expected_sha256`` is the digest the file must have when one is known (a bundled model);
    otherwise the writer records the digest of what it built and readers compare against that.
    """
    if intact(target, expected_sha256):
        return target
    with exclusive(target.with_name(target.name + ".lock"), f"building {what}"):
        if intact(target, expected_sha256):  # built while we waited
            return target
        if target.exists():
            log.warning("%s at %s fails its checksum: rebuilding it", what, target)
            target.unlink()
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            log.info("building %s at %s (once for this cache)", what, target)
            build(tmp)
            with tmp.open("rb+") as fh:
                os.fsync(fh.fileno())
            got = sha256_of(tmp)
            if expected_sha256 is not None and got != expected_sha256:
                raise ArtifactError(f"{what} built at {tmp} has sha256 {got}, expected {expected_sha256}")
            digest = _digest_file(target)
            digest_tmp = digest.with_name(f".{digest.name}.{os.getpid()}.tmp")
            digest_tmp.write_text(got + "\n")
            os.replace(digest_tmp, digest)
            os.replace(tmp, target)
            _fsync_dir(target.parent)
        finally:
            tmp.unlink(missing_ok=True)
    return target

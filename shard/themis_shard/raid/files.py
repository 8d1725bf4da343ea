"""File edges of RAID weight storage: GGUF check, positioned writes, atomic copies."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..errors import ThemisError


def check_gguf(path: Path, source: str) -> None:
    """Only model files are striped (not whatever file a path or URL happens to name)."""
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ThemisError(f"{source} is not a GGUF file (magic {magic!r})", code="not_gguf", status=400)


def pwrite_all(fd: int, buffers: list, offset: int) -> None:
    """Write the buffers back to back at ``offset`` (one pwritev, finishing short writes)."""
    views = [memoryview(b).cast("B") for b in buffers]
    done = os.pwritev(fd, views, offset)
    total = sum(v.nbytes for v in views)
    if done < total:  # rare (signals, huge writes): finish from a joined copy
        rest = b"".join(views)[done:]
        while rest:
            n = os.pwrite(fd, rest, offset + done)
            done, rest = done + n, rest[n:]


def copy_file(src: Path, dst: Path) -> None:
    tmp = dst.with_suffix(".part")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)

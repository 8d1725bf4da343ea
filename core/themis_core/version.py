"""The one version of every Themis distribution: the repository's ``VERSION`` file.

Each pyproject reads it at build time (setuptools dynamic version; ``core/VERSION``,
``operator/VERSION`` and ``client/VERSION`` link to it), so installed metadata carries it; a bare
checkout reads the file.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

#: ``VERSION`` at the repository root, seen from a source checkout.
CHECKOUT_VERSION_FILE = Path(__file__).resolve().parents[2] / "VERSION"


def distribution_version(name: str, checkout_file: Path = CHECKOUT_VERSION_FILE) -> str:
    """The installed distribution's version; from a bare checkout, the ``VERSION`` file's."""
    try:
        return version(name)
    except PackageNotFoundError:
        try:
            return checkout_file.read_text().strip()
        except OSError:  # neither installed nor a checkout
            return "0+unknown"

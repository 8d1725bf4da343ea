"""The ``themis`` and ``themis-shard`` commands: name the missing extra before importing the engine.

Without ``[cpu]`` or ``[gpu]`` (see ``extras``) the commands say which extra to install instead of
failing on an ImportError deep in the app.
"""

from __future__ import annotations

import sys

from .extras import ENGINE_MODULES, INSTALL_HINT, missing_extra_message, missing_modules


def _require(command: str) -> None:
    message = missing_extra_message(command, missing_modules(ENGINE_MODULES))
    if message:
        raise SystemExit(message)


def shard() -> None:
    _require("themis-shard")
    from .__main__ import main

    main()


def cli() -> int:
    if sys.argv[1:] == ["--version"]:  # answers without the engine, like every --version
        from . import __version__

        print(f"themis {__version__}")
        return 0
    if sys.argv[1:] in ([], ["-h"], ["--help"]) and missing_modules(ENGINE_MODULES):
        from .cli_help import brief_help

        print(brief_help(INSTALL_HINT))
        return 0
    _require("themis")
    from .local_cluster import main

    return main()

"""``python -m themis_shard`` / ``themis-shard``: run one shard process on uvicorn."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import uvicorn

from .app import create_app
from .settings import Settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run one Themis shard (settings also from THEMIS_* env).")
    parser.add_argument("--shard-id")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--plan", type=Path, dest="plan_path")
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if v is not None and k != "log_level"}
    settings = Settings(**overrides)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=args.log_level,
                timeout_graceful_shutdown=10)


if __name__ == "__main__":
    main()

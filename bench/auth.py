"""What API keys cost per request: one shard app (documents only), in process over ASGI, the same
GET and PUT with keys off and on (a valid key, a wrong key), interleaved request by request. Prints a
table of medians (this 2-core machine is shared: compare rows, not runs).

Run: `.venv/bin/python bench/auth.py [--n 1000]`
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from themis_core.access_policy import Role
from themis_core.api_keys import entry_for, new_key
from themis_shard.app import create_app
from themis_shard.auth.settings import AuthSettings
from themis_shard.llm.settings import LLMSettings
from themis_shard.settings import Settings

KEY = new_key()


async def measure(apps: list, headers: list[dict[str, str]], n: int) -> list[tuple[list[float], list[float]]]:
    """The modes interleaved request by request, so each sees the same machine load."""
    async with contextlib.AsyncExitStack() as stack:
        clients = []
        for app in apps:
            await stack.enter_async_context(app.router.lifespan_context(app))
            # Raw httpx on purpose: the server's cost per request, 401s included, without a client's.
            transport = httpx.ASGITransport(app=app)
            clients.append(
                await stack.enter_async_context(httpx.AsyncClient(transport=transport, base_url="http://s"))
            )
        out: list[tuple[list[float], list[float]]] = [([], []) for _ in apps]
        for i in range(n):
            for c, h, (gets, puts) in zip(clients, headers, out, strict=True):
                t = time.perf_counter()
                await c.get("/v1/collections/b/documents/k0", headers=h)
                gets.append((time.perf_counter() - t) * 1e6)
                t = time.perf_counter()
                await c.put(f"/v1/collections/b/documents/k{i % 50}", json={"i": i}, headers=h)
                puts.append((time.perf_counter() - t) * 1e6)
        return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000)
    args = parser.parse_args()
    keys = "; ".join(entry_for(new_key(), Role.client).line() for _ in range(15))
    keys += "; " + entry_for(KEY, Role.client).line()  # the valid key is the last of 16
    on = AuthSettings(enabled=True, keys=keys)
    modes = [
        ("keys off", AuthSettings(), {}),
        ("keys on, valid key (16 keys)", on, {"Authorization": f"Bearer {KEY}"}),
        ("keys on, wrong key → 401", on, {"Authorization": "Bearer nope"}),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        apps = [
            create_app(Settings(data_dir=Path(tmp) / f"shard-{i}", llm=LLMSettings(enabled=False), auth=auth))
            for i, (_, auth, _) in enumerate(modes)
        ]
        results = asyncio.run(measure(apps, [h for _, _, h in modes], args.n))
    rows = [
        (label, statistics.median(g), statistics.median(p))
        for (label, _, _), (g, p) in zip(modes, results, strict=True)
    ]
    print(f"{'mode':34} {'GET median µs':>14} {'PUT median µs':>14}")
    for label, g, p in rows:
        print(f"{label:34} {g:14.0f} {p:14.0f}")


if __name__ == "__main__":
    main()

"""OpenAI surface benchmark, through the official ``openai`` client against one real shard.

(1) Constrained decoding overhead: the same chat prompts as free text, as ``json_object`` and
    as ``json_schema`` (llama.cpp's grammar sampler, checked per token and applied to the whole
    262k vocabulary only when the free choice is rejected), in completion tokens per second.
(2) ``n=4`` in one request (one prefill, the cells copied to the other three sequences) vs four
    separate requests sent at once (four prefills), wall time and prompt tokens prefilled.

Defaults are small so that a run takes about a minute on 2 cores.

(Not named ``openai.py``: the script's folder comes first on sys.path and would shadow the
client package.)

Run: `.venv/bin/python bench/openai_surface.py [--requests 4] [--tokens 48] [--prompt-words 200]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import openai
from _local import themis
from themis_client import ThemisClient
from themis_core.plan import ClusterPlan

PROMPTS = [
    "Describe a person who lives in Paris.",
    "Describe a cat and its owner.",
    "Write about a famous painter.",
    "Tell me about a city by the sea.",
]
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer"},
        "city": {"type": "string", "maxLength": 24},
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 3},
    },
    "required": ["name", "age", "city", "hobbies"],
}


def prefilled(url: str) -> float:
    with ThemisClient(url) as shard:
        text = shard.metrics()
    for line in text.splitlines():
        if line.startswith("themis_llm_prompt_tokens_total{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def constrained(client: openai.OpenAI, n_requests: int, tokens: int) -> list[tuple[str, int, float, str]]:
    modes = {
        "free text": {},
        "json_object": {"response_format": {"type": "json_object"}},
        "json_schema": {
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}}
        },
    }
    rows = []
    for mode, extra in modes.items():
        out_tokens, valid, t0 = 0, 0, time.perf_counter()
        for i in range(n_requests):
            r = client.chat.completions.create(
                model="gemma3-270m",
                messages=[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
                max_tokens=tokens,
                temperature=0.7,
                seed=i,
                **extra,
            )
            out_tokens += r.usage.completion_tokens
            if extra and r.choices[0].finish_reason == "stop":
                json.loads(r.choices[0].message.content)
                valid += 1
        dt = time.perf_counter() - t0
        rows.append((mode, out_tokens, out_tokens / dt, f"{valid}/{n_requests}" if extra else "-"))
    return rows


async def n_vs_separate(url: str, tokens: int, words: int) -> list[tuple[str, float, float, int]]:
    prompt = "Background: " + " ".join(f"item{i}" for i in range(words)) + ". Continue the story:"
    kw = {"model": "gemma3-270m", "max_tokens": tokens, "temperature": 1.0}
    rows = []
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", timeout=600) as client:
        for label in ("n=4, one request", "4 requests at once"):
            p = f"{label}: {prompt}"  # a prompt of its own per row: no KV-prefix cache hit between rows
            before, t0 = prefilled(url), time.perf_counter()
            if label.startswith("n=4"):
                r = await client.completions.create(prompt=p, n=4, seed=1, **kw)
                done = r.usage.completion_tokens
            else:
                rs = await asyncio.gather(
                    *(client.completions.create(prompt=p, seed=i, **kw) for i in range(4))
                )
                done = sum(r.usage.completion_tokens for r in rs)
            dt = time.perf_counter() - t0
            rows.append((label, dt, done / dt, int(prefilled(url) - before)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=4, help="requests per decoding mode")
    ap.add_argument("--tokens", type=int, default=48, help="max_tokens per request")
    ap.add_argument("--prompt-words", type=int, default=200, help="prompt length for the n=4 comparison")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        themis(cwd, "up", "--shards", "1", "--base-port", "0", "--raid-mode", "raid0")
        try:
            url = ClusterPlan.load(cwd / ".themis" / "plan.json").members[0].url
            with openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=600) as client:
                client.completions.create(model="gemma3-270m", prompt="warm up", max_tokens=2)
                rows = constrained(client, args.requests, args.tokens)
            print(f"\nConstrained decoding ({args.requests} chat requests, max_tokens {args.tokens}, T 0.7)")
            print(f"{'mode':<14} {'tokens':>7} {'tok/s':>8} {'vs free':>8} {'valid JSON':>11}")
            base = rows[0][2]
            for mode, n, tps, valid in rows:
                print(f"{mode:<14} {n:>7} {tps:>8.1f} {tps / base:>7.2f}x {valid:>11}")
            n_rows = asyncio.run(n_vs_separate(url, args.tokens, args.prompt_words))
            print(f"\nn=4 vs 4 requests (prompt ≈ {args.prompt_words} words, max_tokens {args.tokens})")
            print(f"{'how':<20} {'wall s':>8} {'tok/s':>8} {'prompt tokens prefilled':>24}")
            for label, dt, tps, pre in n_rows:
                print(f"{label:<20} {dt:>8.2f} {tps:>8.1f} {pre:>24}")
        finally:
            themis(cwd, "down")


if __name__ == "__main__":
    main()

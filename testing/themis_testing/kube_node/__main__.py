"""``python -m themis_testing.kube_node --kubeconfig K --root DIR``: run the node (composition root)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from .addresses import HostsFile
from .client import Api, server_of
from .image import code_dirs, masked_modules, parse_dockerfile, write_masks
from .kubelet import KubeletConfig
from .node import Node, NodeSettings

REPO = Path(__file__).resolve().parents[3]


def build(kubeconfig: Path, root: Path, dockerfile: Path, settings: NodeSettings) -> Node:
    repo = dockerfile.resolve().parent
    image = parse_dockerfile(dockerfile.read_text())
    masks = write_masks(root / "image" / "masked", masked_modules(image, repo))
    kubelet = KubeletConfig(
        root=root,
        image=image,
        venv=Path(sys.prefix),
        pythonpath=[str(masks), *code_dirs(image, repo)],
        node_name=settings.node_name,
        backoff=Node.backoff(settings),
        probe_period_max_s=settings.probe_period_max_s,
    )
    return Node(Api(server_of(kubeconfig)), settings, kubelet, HostsFile(settings.hosts_file))


async def serve(node: Node) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, node.stop)
    await node.run()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="themis-kube-node", description=__doc__)
    ap.add_argument("--kubeconfig", type=Path, required=True)
    ap.add_argument("--root", type=Path, required=True, help="pods' root directories, PVC directories, logs")
    ap.add_argument("--dockerfile", type=Path, default=REPO / "Dockerfile.shard", help="what the image holds")
    ap.add_argument("--log-level", default="INFO")
    args = ap.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    args.root.mkdir(parents=True, exist_ok=True)
    node = build(args.kubeconfig, args.root.resolve(), args.dockerfile, NodeSettings())
    print(f"kube node up: pods on {node.addresses.subnet}.0/24, root {args.root}", flush=True)
    asyncio.run(serve(node))


if __name__ == "__main__":
    main()

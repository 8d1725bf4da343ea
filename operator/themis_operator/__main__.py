"""``python -m themis_operator``: run the operator (kubeconfig or in-cluster config)."""

from __future__ import annotations

import argparse
import logging
import os

from .images import operator_version as _version


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="themis-operator", description=__doc__)
    parser.add_argument("--version", action="version", version=f"themis-operator {_version()}")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        help="watch this namespace (repeatable; globs allowed)",
    )
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch the whole cluster")
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)"
    )
    parser.add_argument(
        "--peering",
        metavar="NAME",
        help="kopf peering object for running several replicas (default: standalone)",
    )
    parser.add_argument(
        "--liveness", metavar="URL", help="liveness endpoint, e.g. http://0.0.0.0:8081/healthz"
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)

    if args.kubeconfig:
        os.environ["KUBECONFIG"] = args.kubeconfig
        # The kubernetes client reads its default path at import time; keep it in step.
        from kubernetes.config import kube_config

        kube_config.KUBE_CONFIG_DEFAULT_LOCATION = args.kubeconfig
    from themis_core.logs import LogSettings, configure_logging

    configure_logging(logging.DEBUG if args.verbose else logging.INFO, LogSettings().format)
    if not args.verbose:  # not a line per status probe and per lease (several a second)
        logging.getLogger("httpx").setLevel(logging.WARNING)

    import kopf

    from . import handlers  # noqa: F401  (registers the handlers)

    namespaces = args.namespace or (
        [] if args.all_namespaces else [os.environ.get("WATCH_NAMESPACE", "default")]
    )
    kopf.run(
        clusterwide=args.all_namespaces,
        namespaces=namespaces,
        standalone=args.peering is None,
        peering_name=args.peering,
        liveness_endpoint=args.liveness,
    )


if __name__ == "__main__":
    main()

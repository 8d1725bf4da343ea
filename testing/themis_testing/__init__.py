"""Test support for the operator: an in-memory ``Kube``, a kmock-based API server, and a local
Kubernetes node (``kube_node``) that runs pods as real shard processes.

A package of its own so that none of it ships in the operator image (Dockerfile.operator copies
only core/ and operator/); tests, e2e and manual runs import it from the source tree.
"""

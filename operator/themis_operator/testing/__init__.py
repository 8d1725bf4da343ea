"""Test support shipped with the operator: an in-memory ``Kube`` and a kmock-based API server."""

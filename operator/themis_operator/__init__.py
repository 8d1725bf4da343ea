"""Themis Kubernetes operator: ThemisCluster and LoRAAdapter → shards, plan, TLS, PDB."""

GROUP = "themisdb.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

"""Domains: which domain a request is about (detection), the shipped per-domain sets (held-out
validation, training texts) that adapters are evaluated and trained on."""

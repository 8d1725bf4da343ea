"""Tenants: who an API key belongs to, what that tenant may use, and fair sharing between them.

``policy`` (the typed policy and its keys-file lines; stdlib only, the operator writes them),
``limiter`` (token buckets, clock injected), ``fair`` (weighted fair queueing over tenants),
``gate`` (the admission decision a node makes per request) and ``metrics``. Pure: the HTTP edge
is ``api/tenants.py``."""

"""RAID model-weight storage: striped units with XOR / Reed–Solomon parity across shards.

Pure cores — :mod:`layout` (where every unit lives), :mod:`parity` (codecs), :mod:`manifest`
(what a correct model is) — and I/O at the edges: :mod:`store` (one shard's unit files) and
:mod:`service` (ingest, assembly, rebuild over the RemoteExecutor).
"""

"""Cluster backups and restores (see ``cut.py`` for why a backup is one consistent cut).

Kept free of imports: the operator imports ``orchestrate``, ``manifest``, ``destinations`` and
``retention`` (httpx, pydantic, boto3) and must not pull the storage engine in with them.
"""

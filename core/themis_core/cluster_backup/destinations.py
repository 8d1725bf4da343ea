"""Where backups go: a directory (a PVC, a local disk) or any S3-compatible object store.

A destination stores opaque objects under keys (``<backup id>/...``). S3 goes through boto3
(its signing, retries and multipart uploads, never our own); the endpoint, region and
credentials come from boto3's own environment (``AWS_ENDPOINT_URL`` for MinIO, Ceph, SeaweedFS
or moto; ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``; ``AWS_DEFAULT_REGION``).
Writes to a directory land under a temporary name and are renamed into place, so a crash never
leaves a half file under a real name.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Protocol


class ObjectMissing(Exception):
    """No object under that key."""


class Destination(Protocol):
    url: str

    def put_file(self, key: str, path: Path) -> None: ...

    def put_bytes(self, key: str, data: bytes) -> None: ...

    def get_file(self, key: str, path: Path) -> None: ...

    def get_bytes(self, key: str) -> bytes: ...

    def backups(self) -> list[str]:
        """The backup ids (top-level names) present, complete or not, sorted."""
        ...

    def delete(self, backup_id: str) -> int:
        """Remove everything under ``backup_id/``; how many objects went."""
        ...


class DirectoryDestination:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.url = str(self.root)

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root.resolve()):
            raise ValueError(f"key {key!r} leaves {self.root}")
        return path

    def put_file(self, key: str, path: Path) -> None:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".part")
        shutil.copyfile(path, tmp)
        os.replace(tmp, target)

    def put_bytes(self, key: str, data: bytes) -> None:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".part")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)

    def get_file(self, key: str, path: Path) -> None:
        source = self._path(key)
        if not source.is_file():
            raise ObjectMissing(f"{source} does not exist")
        shutil.copyfile(source, path)

    def get_bytes(self, key: str) -> bytes:
        source = self._path(key)
        if not source.is_file():
            raise ObjectMissing(f"{source} does not exist")
        return source.read_bytes()

    def backups(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir())

    def delete(self, backup_id: str) -> int:
        target = self._path(backup_id)
        if not target.is_dir():
            return 0
        count = sum(1 for p in target.rglob("*") if p.is_file())
        shutil.rmtree(target)
        return count


class S3Destination:
    def __init__(self, bucket: str, prefix: str = "", client: Any = None) -> None:
        """``client``: a boto3 S3 client (default: one from boto3's environment)."""
        if client is None:
            import boto3  # only S3 destinations need it

            client = boto3.client("s3")
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def put_file(self, key: str, path: Path) -> None:
        self.client.upload_file(str(path), self.bucket, self._key(key))

    def put_bytes(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def _missing(self, exc: Exception) -> bool:
        code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
        return code in ("404", "NoSuchKey", "NotFound")

    def get_file(self, key: str, path: Path) -> None:
        try:
            self.client.download_file(self.bucket, self._key(key), str(path))
        except Exception as exc:
            if self._missing(exc):
                raise ObjectMissing(f"{self.url}/{key} does not exist") from None
            raise

    def get_bytes(self, key: str) -> bytes:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
        except Exception as exc:
            if self._missing(exc):
                raise ObjectMissing(f"{self.url}/{key} does not exist") from None
            raise

    def _pages(self, **kw: Any):
        return self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, **kw)

    def backups(self) -> list[str]:
        base = self._key("")
        found = set()
        for page in self._pages(Prefix=base, Delimiter="/"):
            for p in page.get("CommonPrefixes", []):
                found.add(p["Prefix"][len(base) :].strip("/"))
        return sorted(found)

    def delete(self, backup_id: str) -> int:
        count = 0
        for page in self._pages(Prefix=self._key(backup_id + "/")):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": keys, "Quiet": True})
                count += len(keys)
        return count


def open_destination(url: str, s3_client: Any = None) -> Destination:
    """``s3://bucket/prefix`` → S3 (through boto3); ``file:///path`` or a path → a directory."""
    if url.startswith("s3://"):
        bucket, _, prefix = url[len("s3://") :].partition("/")
        if not bucket:
            raise ValueError(f"{url!r} names no bucket (s3://bucket/prefix)")
        return S3Destination(bucket, prefix, s3_client)
    if "://" in url and not url.startswith("file://"):
        raise ValueError(f"{url!r}: a destination is a directory or an s3://bucket/prefix URL")
    return DirectoryDestination(Path(url.removeprefix("file://")))


def split_ref(ref: str) -> tuple[str, str]:
    """``DEST/ID`` → (DEST, ID): the backup id is the last path segment."""
    dest, _, backup_id = ref.rstrip("/").rpartition("/")
    if not dest or not backup_id:
        raise ValueError(f"{ref!r} is not DEST/ID (a directory or s3://bucket/prefix, then the backup id)")
    return dest, backup_id

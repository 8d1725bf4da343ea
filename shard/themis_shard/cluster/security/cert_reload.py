"""Certificate rotation without a restart: reload renewed PEM files into the live TLS contexts.

The operator renews leaf certificates at two thirds of their lifetime and rewrites the TLS
Secret; the kubelet swaps the mounted files. An ``ssl.SSLContext`` takes a new certificate
chain on the same object (``load_cert_chain``), and new handshakes use it — so the servers'
contexts (uvicorn's, public and mTLS listeners) and the client context of the shard-to-shard
executor are updated in place. Connections already open keep their session, as TLS intends.

``load_cert_chain`` is not atomic: on a key that does not match it has already replaced the
certificate, leaving the context broken. So the files are first copied into a private snapshot
(the kubelet may swap them meanwhile), loaded into a scratch context, and only a pair that
loads there goes into the live contexts; a half-written or mismatched pair keeps the old one.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import ssl
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CertFiles:
    ca: Path
    cert: Path
    key: Path

    def digest(self) -> str | None:
        """One digest of the three files' contents (None while one is missing)."""
        h = hashlib.sha256()
        try:
            for path in (self.ca, self.cert, self.key):
                h.update(path.read_bytes())
        except OSError:
            return None
        return h.hexdigest()


class CertReloader:
    """``check()`` reloads the files into every context when their contents changed."""

    def __init__(self, files: CertFiles, contexts: Callable[[], Sequence[ssl.SSLContext]]) -> None:
        self.files = files
        self._contexts = contexts
        self._digest = files.digest()
        self.reloads = 0

    def check(self) -> bool:
        digest = self.files.digest()
        if digest is None or digest == self._digest:
            return False
        contexts = list(self._contexts())
        with tempfile.TemporaryDirectory(prefix="themis-tls-") as tmp:
            ca, cert, key = (Path(tmp) / n for n in ("ca.pem", "cert.pem", "key.pem"))
            try:
                for src, dst in ((self.files.ca, ca), (self.files.cert, cert), (self.files.key, key)):
                    shutil.copyfile(src, dst)
                scratch = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                scratch.load_cert_chain(str(cert), str(key))
                scratch.load_verify_locations(cafile=str(ca))
            except (OSError, ssl.SSLError) as exc:  # mid-swap or mismatched: try again next time
                log.warning("certificate files changed but do not load (keeping the old ones): %s", exc)
                return False
            for ctx in contexts:
                ctx.load_cert_chain(str(cert), str(key))
                ctx.load_verify_locations(cafile=str(ca))
        self._digest = digest
        self.reloads += 1
        log.info("reloaded TLS certificate %s into %d contexts", self.files.cert, len(contexts))
        return True

"""Client workloads that run in threads beside a test's actions: started when the ``with`` block
is entered, told to stop (``stop``) and joined when it is left."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Background:
    def __init__(self, *targets: Callable[[], None], join_s: float | None = 30) -> None:
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=t, daemon=True) for t in targets]
        self.join_s = join_s

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(self.join_s)

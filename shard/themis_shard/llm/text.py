"""Incremental detokenisation with stop strings (pure).

Tokens arrive as byte pieces that may split a UTF-8 character, and a stop string may span
several tokens. ``TextAssembler`` only releases text that is final: complete characters that
can no longer turn out to be the start of a stop string. The stop string itself is never
emitted, so streamed and non-streamed output are the same text.
"""

from __future__ import annotations

import codecs


class TextAssembler:
    def __init__(self, stop: tuple[str, ...] = ()) -> None:
        self._stop = tuple(s for s in stop if s)
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""  # decoded, not yet released (may begin a stop string)
        self.text = ""  # released so far
        self.stopped = False

    def feed(self, piece: bytes) -> str:
        """Add one token's bytes; returns the text that became final (possibly "")."""
        if self.stopped:
            return ""
        self._pending += self._decoder.decode(piece)
        if self._stop:
            cut = _first_stop(self._pending, self._stop)
            if cut is not None:
                self.stopped = True
                return self._release(self._pending[:cut])
            keep = _partial_stop_suffix(self._pending, self._stop, self._hold)
            return self._release(self._pending[: len(self._pending) - keep], rest=keep)
        return self._release(self._pending)

    def flush(self) -> str:
        """End of generation: release what was held back (an unfinished stop prefix is plain text)."""
        if self.stopped:
            return ""
        self._pending += self._decoder.decode(b"", final=True)
        return self._release(self._pending)

    def _release(self, out: str, rest: int = 0) -> str:
        self._pending = self._pending[len(self._pending) - rest :] if rest else ""
        self.text += out
        return out


def _first_stop(text: str, stops: tuple[str, ...]) -> int | None:
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(hits) if hits else None


def _partial_stop_suffix(text: str, stops: tuple[str, ...], hold: int) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of some stop string."""
    for n in range(min(hold, len(text)), 0, -1):
        tail = text[-n:]
        if any(s.startswith(tail) for s in stops):
            return n
    return 0

"""The demo corpus: ``corpus.txt`` parsed into documents. Pure apart from reading the file."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

CORPUS_PATH = Path(__file__).with_name("corpus.txt")
LICENSE = "CC0-1.0"


@dataclass(frozen=True)
class Paragraph:
    key: str
    topic: str
    title: str
    text: str

    def document(self) -> dict[str, str]:
        return {"topic": self.topic, "title": self.title, "text": self.text}


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def parse_corpus(text: str) -> list[Paragraph]:
    """``[topic]`` sections of ``Title: paragraph`` lines; keys are ``topic-title`` slugs."""
    out: list[Paragraph] = []
    topic = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            topic = line[1:-1]
            continue
        title, sep, body = line.partition(": ")
        if not sep or not topic:
            raise ValueError(f"corpus line {number}: expected 'Title: text' inside a [topic] section")
        out.append(Paragraph(f"{topic}-{slug(title)}", topic, title, body))
    keys = [p.key for p in out]
    if len(set(keys)) != len(keys):
        raise ValueError("corpus keys are not unique")
    return out


def load_corpus(path: Path = CORPUS_PATH) -> list[Paragraph]:
    return parse_corpus(path.read_text(encoding="utf-8"))

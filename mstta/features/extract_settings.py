"""`ExtractSettings`: everything that determines a feature file's content, as the file's header,
the work folder's marker and every shard's stamp record it (below `extract`, `shards` and
`extract_encode`, which all read it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class ExtractSettings:
    """Everything that determines a feature file's content; equal settings -> the same file."""

    dataset: str
    model: str
    pretrained: str
    weights: str  # pretrained_id: tag, checkpoint path+size+mtime, or seeded random init
    precision: str
    views: int
    augment: str
    seed: int
    template_hash: str
    limit: int | None
    stream_hash: str  # hash of the ordered (relative path, label) stream
    listing: str = "full"  # full | peer (`mstta.data.load_split`)

    def diff(self, meta: dict) -> list[str]:
        """'key: old -> new' for every setting that differs from a file's meta (files written before
        `listing` existed hold the full listing)."""
        old = {"listing": "full", **meta}
        return [f"{k}: {old.get(k)!r} -> {v!r}" for k, v in asdict(self).items() if old.get(k) != v]

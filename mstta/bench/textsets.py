"""The text classifiers of the field table (docs/field.md, "Text sets"): which set each method row
reads, and the [C, d] classifier of a set for one stored stream.

`peer` is the classifier stored in the feature file (the dataset's templates, as extracted);
`photo`, `tip7` and `cupl` are encoded with the backbone's text tower (class names from the
feature file, encodings cached under <store>/text/); `user` is the user's own `.npy`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..atomic import atomic_open
from ..data.templates import DEFAULT_TEMPLATES, TEXT_SETS, fill, official_sets, read_cupl, read_user_text, set_templates
from ..data.templates import templates_for as _templates_for
from ..engine.methods import Method
from ..errors import UserError
from ..features.format import FeatureSet

OFFICIAL = "official"
PEER = "peer"  # the default of `run` and `field`: the feature file's classifier, one for every row


def parse_text_sets(spec: str) -> list[str]:
    """`--text`: `official` (each row its own set) and/or set names, comma-separated."""
    items = [s.strip() for s in str(spec).split(",")]
    allowed = (OFFICIAL,) + TEXT_SETS
    for s in items:
        if s not in allowed:
            raise UserError(f"--text {spec!r}: unknown text set '{s}'; choose from: {', '.join(allowed)}")
    return list(dict.fromkeys(items))


def file_hash(path: Path | None) -> str | None:
    """Short hash of a prompt or classifier file's bytes (in each cell's fingerprint)."""
    if path is None:
        return None
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Choice:
    """The text set a row reads in a cell: the set, what was asked, and a mark when it is not the
    row's first official choice."""

    name: str
    requested: str
    mark: str | None = None


def choose(method: Method, requested: str, available: set[str]) -> Choice:
    """`official`: the row's first official set this run can make (`available`), else the set asked."""
    if requested != OFFICIAL:
        return Choice(requested, requested)
    prefs = official_sets(method.name, method.family)
    for i, name in enumerate(prefs):
        if name in available:
            mark = None if i == 0 else f"official text set {prefs[0]} not supplied: {name}"
            return Choice(name, requested, mark)
    return Choice("peer", requested, f"official text set {prefs[0]} not supplied: peer")


def peer_templates(dataset: str) -> list[str]:
    """The templates the dataset's stored classifier was built with (imagefolder: the defaults)."""
    return list(DEFAULT_TEMPLATES) if dataset.startswith("imagefolder:") else _templates_for(dataset)


class TextSets:
    """Builds (and caches) each set's classifier for a stored stream."""

    def __init__(self, models, store: Path, cupl: Path | None = None, user: Path | None = None):
        self.models, self.store, self.cupl, self.user = models, Path(store), cupl, user
        self._memo: dict[tuple, torch.Tensor] = {}

    @property
    def available(self) -> set[str]:
        out = {"peer", "photo", "tip7"}
        if self.cupl is not None:
            out.add("cupl")
        if self.user is not None:
            out.add("user")
        return out

    def check(self, name: str, classnames: list[str] | None, num_classes: int, dim: int | None = None) -> None:
        """Validate a set's inputs against a dataset before anything runs (bad files: UserError)."""
        if name == "cupl":
            if self.cupl is None:
                raise UserError("--text cupl needs --cupl FILE.json (CuPL prompts {class name: [prompts]})")
            read_cupl(self.cupl, classnames or [])
        elif name == "user":
            if self.user is None:
                raise UserError("--text user needs --text-classifier FILE.npy (a [C, d] float array)")
            read_user_text(self.user, num_classes, dim)
        elif name in ("photo", "tip7") and not classnames:
            raise UserError(f"--text {name}: the feature file holds no class names to prompt with; re-extract it")

    def classifier(self, name: str, fs: FeatureSet, dataset: str, backbone) -> torch.Tensor:
        """The [C, d] float32 unit-row classifier of set `name` for stream `fs`."""
        key = (name, dataset, backbone, fs.num_classes, fs.text.shape[1])
        if key not in self._memo:
            self._memo[key] = self._build(name, fs, dataset, backbone)
        return self._memo[key]

    def _build(self, name: str, fs: FeatureSet, dataset: str, backbone) -> torch.Tensor:
        C, d = fs.num_classes, fs.text.shape[1]
        if name == "peer":
            return fs.text.float()
        if name == "user":
            return read_user_text(self.user, C, d)
        self.check(name, fs.classnames, C, d)
        names = list(fs.classnames)
        if name == "cupl":
            extra = read_cupl(self.cupl, names)
            prompts = [[fill(t, c) for t in peer_templates(dataset)] + extra[i] for i, c in enumerate(names)]
        else:
            prompts = [[fill(t, c) for t in set_templates(name, peer_templates(dataset))] for c in names]
        text = self._encode(prompts, backbone)
        if text.shape != (C, d):
            raise UserError(
                f"--text {name}: the text tower gives {list(text.shape)}, the features [{C}, {d}]; "
                "the feature file was made by another backbone"
            )
        return text

    def _encode(self, prompts: list[list[str]], backbone) -> torch.Tensor:
        """Per class: the mean of its normalised prompt embeddings, re-normalised (cached on disk)."""
        blob = json.dumps(
            {"backbone": [backbone.name, backbone.pretrained], "prompts": prompts, "precision": self.models.precision},
            sort_keys=True,
        )
        path = self.store / "text" / f"set-{hashlib.sha256(blob.encode()).hexdigest()[:24]}.npy"
        if path.is_file():
            try:
                arr = np.load(path, allow_pickle=False)
                if arr.ndim == 2 and arr.shape[0] == len(prompts) and np.isfinite(arr).all():
                    return torch.from_numpy(arr.astype(np.float32))
            except (OSError, ValueError):
                pass
        clip = self.models.get(backbone)
        rows = []
        with torch.inference_mode():
            for plist in prompts:
                e = torch.nn.functional.normalize(clip.encode_text(plist).float(), dim=-1)
                rows.append(torch.nn.functional.normalize(e.mean(0), dim=-1).cpu())
        text = torch.stack(rows)
        if not torch.isfinite(text).all():
            raise UserError(f"backbone {backbone.name}: the text tower gave non-finite embeddings; check its weights")
        with atomic_open(path, "wb") as fh:
            np.save(fh, text.numpy())
        return text

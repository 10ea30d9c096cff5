"""The field table's per-cell measurements beyond one replay (docs/field.md): state bytes, the open
settings (withheld classes; another dataset mixed in) and stream orders, as functions of a stored
stream, a text classifier, a row and its engine config."""

from __future__ import annotations

import numpy as np
import torch

from ..engine.engine import Engine
from ..engine.replay import replay
from ..errors import UserError
from ..features.format import FeatureSet
from . import metrics as M

OPEN_SETTINGS = ("withheld", "mixed")


def _orders_perm(n: int, seed: int, r: int) -> np.ndarray:
    return np.random.default_rng([seed, r]).permutation(n)


def state_bytes(text: torch.Tensor, method, ecfg, device, tower=None) -> int:
    """Bytes of the tensors of a method's state right after it is made (preallocated to its bounds;
    a prompt-tuning row's text tower is no state: `state_dict` leaves it out)."""
    eng = Engine(text, method, ecfg, device=device, text_tower=tower)
    seen: set[int] = set()

    def walk(obj) -> int:
        if isinstance(obj, torch.Tensor):
            return obj.numel() * obj.element_size()
        if id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, bool)):
            return 0
        seen.add(id(obj))
        if isinstance(obj, dict):
            return sum(walk(v) for v in obj.values())
        if isinstance(obj, (list, tuple)):
            return sum(walk(v) for v in obj)
        return sum(walk(v) for v in vars(obj).values()) if hasattr(obj, "__dict__") else 0

    return int(walk(eng.state_dict()))


def replay_probs(feats, text, method, ecfg, device, probs=True, tower=None):
    return replay(feats, text, method, ecfg, device=device, keep_probs=probs, text_tower=tower)


def open_withheld(fs: FeatureSet, text: torch.Tensor, method, ecfg, device, seed: int, tower=None) -> dict[str, float]:
    """Half the classes withheld from the text classifier, their samples unknown (label -1)."""
    drop = M.withheld_classes(text.shape[0], seed)
    kept, labels = M.withhold(fs.labels, text.shape[0], drop)
    sub = tower and tower.subset(kept)  # the prompt-tuning rows' tower over the kept classes
    r = replay_probs(fs.features, text[torch.as_tensor(kept)], method, ecfg, device, tower=sub)
    return M.open_set(r.predictions, r.probs, labels)


def open_mixed(fs: FeatureSet, foreign: FeatureSet, text, method, ecfg, device, seed: int, share: float, tower=None):
    """Another dataset's samples (label -1) mixed into the stream at random places."""
    n_f = min(foreign.num_samples, max(1, round(share * fs.num_samples)))
    v = min(fs.num_views, foreign.num_views)
    own = fs.features if fs.features.dim() == 2 else fs.features[:, :v]
    other = foreign.features[:n_f] if foreign.features.dim() == 2 else foreign.features[:n_f, :v]
    if own.shape[-1] != other.shape[-1]:
        raise UserError(
            f"--mix-with: its features have {other.shape[-1]} dims, the stream's {own.shape[-1]}; "
            "mix datasets of one backbone"
        )
    pos = M.mix_positions(fs.num_samples, n_f, seed)
    pos_t = torch.as_tensor(pos)
    feats = torch.where(
        (pos_t >= 0).view(-1, *[1] * (own.dim() - 1)),
        own[pos_t.clamp_min(0)],
        other.to(own.dtype)[(-1 - pos_t).clamp_min(0)],
    )
    labels = np.where(pos >= 0, fs.labels[np.maximum(pos, 0)], -1)
    r = replay_probs(feats, text, method, ecfg, device, tower=tower)
    return M.open_set(r.predictions, r.probs, labels)


def order_accuracies(fs: FeatureSet, text, method, ecfg, device, seed: int, orders: int, acc: float, tower=None):
    """Accuracy over `orders` stream orders: the stored order's `acc`, then each seeded permutation's."""
    accs = [acc]
    for k in range(1, orders):
        perm = _orders_perm(fs.num_samples, seed, k)
        r = replay_probs(fs.features[torch.as_tensor(perm)], text, method, ecfg, device, probs=False, tower=tower)
        accs.append(M.accuracy(r.predictions, fs.labels[perm]))
    return accs


def open_set_metrics(
    fs: FeatureSet, text, method, ecfg, device, seed: int, opts, foreign: FeatureSet | None, tower=None
) -> dict[str, float | None]:
    """AUROC, FPR at 95% TPR and known-class accuracy per open setting (`mixed_` prefixed), None where not run."""
    rec: dict[str, float | None] = {}
    for name in OPEN_SETTINGS:
        got = None
        if name == "withheld" and name in opts.open:
            got = open_withheld(fs, text, method, ecfg, device, seed, tower)
        elif name == "mixed" and name in opts.open and foreign is not None:
            got = open_mixed(fs, foreign, text, method, ecfg, device, seed, opts.mix_share, tower)
        prefix = "" if name == "withheld" else "mixed_"
        for k in ("auroc", "fpr95", "known_accuracy"):
            rec[prefix + k] = None if got is None else got[k]
    return rec

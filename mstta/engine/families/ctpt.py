"""C-TPT, calibrated test-time prompt tuning (Yoon et al., ICLR 2024), as its official code runs it:
hee-suk-yoon/C-TPT @ 085e6c2e. TPT (`mstta.engine.families.tpt`, the same views, prompt, selection,
optimiser and reset; its `Params` are TPT's keys and defaults plus λ, `engine: ctpt:`) with the loss
avg_entropy - lam ATFD (`tpt_classification.py` `test_time_tuning`: `loss += -lambda_ *
model.l2_norm_mean_training`), ATFD = the mean distance of the normalised class text features from
their centroid (`clip/custom_clip.py` `ClipTestTimeTuning.inference`). AugMix views on every
dataset (`scripts/test_tpt_ctpt_ds.sh` sets `--I_augmix`: `augmix=len(set_id)>=1`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...checks import check_num
from . import tpt
from .base import Method, StepOut

NAME = "ctpt"
TOWER = True  # as TPT's: the runner puts the text tower in the state
PREDICTS, SELECTION, CLIP_FROM_VIEWS = tpt.PREDICTS, tpt.SELECTION, tpt.CLIP_FROM_VIEWS

METHODS = (
    Method(
        name="c-tpt",
        title="C-TPT",
        family=NAME,
        training_free=False,
        episodic=True,
        augment="augmix",
        views="augmix64",
        cost=tpt.COST,
        summary="C-TPT: TPT's prompt step with a text-feature dispersion bonus for calibration (ICLR-24)",
    ),
)

IMAGENET_LAMBDA = 20.0  # scripts/test_tpt_ctpt_ds.sh --lambda_term 20 (ImageNet and A/V/R/K)


@dataclass
class Params(tpt.Params):
    """C-TPT's hyperparameters (`engine: ctpt: {...}`): TPT's (`tpt.Params`, the same defaults) and λ."""

    lam: float = 50.0  # scripts/test_tpt_ctpt_fg.sh --lambda_term 50 (fine-grained sets); argparse default 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_num(self, "lam", 0.0, 1e6)


state_bytes = tpt.state_bytes
init = tpt.init


def step(state: dict, x: torch.Tensor, text: torch.Tensor, p: Params, logit_scale: float, shift) -> StepOut:
    """One sample of C-TPT: TPT's step with lam = p.lam."""
    return tpt.run(state, x, text, p, logit_scale, shift, p.lam)


def replay_tower(x: torch.Tensor, text: torch.Tensor, p: Params, logit_scale: float, tower) -> StepOut:
    """A whole stream of C-TPT, x [N, V, d] unit rows (no mean shift): TPT's `replay_stream` with lam = p.lam."""
    return tpt.replay_stream(x, text, p, logit_scale, tower, p.lam)

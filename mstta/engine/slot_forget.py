"""Forgetting on the memories of DMN-ZS and DPE (`forget.rule=timeliness|idle`; docs/engine.md,
"Forgetting"): the rule the family runner hands a slot family (`state[RULE_KEY]`, never saved), each
slot's insertion and last-use steps, and the two rules on one memory's host rows.

- timeliness: RoTTA's score (BIT-DA/RoTTA `core/utils/memory.py:104-105`, the replacement
  `:71-92`) on a full class row, as the cache family applies it (`forget.timeliness_slot`): a
  slot's score `weight ln_c sigma(age / horizon) + H`, the newcomer's `weight ln_c / 2 + h`, the
  highest-scoring slot replaced only when its score is strictly higher. Ties go as the family's own
  entropy rule breaks them, so `weight = 0` is that rule bit for bit.
- idle: DynaPrompt's least-recently-used reset (zzzx1224/DynaPrompt `dynap_classification.py:
  137-140, 394-400`) adapted to slots as the cache family's (`Cache._mark_used`; the project's
  adaptation): a slot is used at a step when it holds the largest kernel weight of its memory for
  that step's query (inserting counts as a use); before each step a slot unused for `idle` steps
  is emptied.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .cache_rules import EMPTY_TIME
from .forget import ForgetConfig, timeliness_slot

RULE_KEY = "forget"  # a slot family's state entry: its SlotRule, put there by the runner (never saved)
SOONEST_KEY = "forget_soonest"  # under idle: the host's bound, no slot expires before this step (never saved)
SLOT_RULES = ("timeliness", "idle")


@dataclass(frozen=True)
class SlotRule:
    """The `forget` settings a slot family's step reads (from `ForgetConfig`)."""

    rule: str  # "timeliness" or "idle"
    horizon: int  # timeliness N, steps
    weight: float  # timeliness lambda_t
    idle: int  # idle: steps a slot may go unused


def slot_rule(fg: ForgetConfig) -> SlotRule | None:
    """The slot rule of a `forget` section (None: no slot rule)."""
    return SlotRule(fg.rule, fg.steps, fg.weight, fg.idle) if fg.rule in SLOT_RULES else None


def ages(entropy: torch.Tensor) -> dict[str, torch.Tensor]:
    """The clocks a memory of [C, Q] slots keeps under a slot rule: each slot's insertion step
    (`time`) and last use (`used`), EMPTY_TIME where empty, and the stream's step counter."""
    like = {"dtype": torch.long, "device": entropy.device}
    return {
        "time": torch.full(entropy.shape, EMPTY_TIME, **like),
        "used": torch.full(entropy.shape, EMPTY_TIME, **like),
        "clock": torch.zeros((), **like),
    }


def timeliness_pick(entropy: list[float], time: list[int], h: float, t: int, rule: SlotRule, ln_c: float, order) -> int:
    """RoTTA's replacement on one full class row at step t, the cache family's
    (`forget.timeliness_slot`) with the family's own tie rule: of the highest-scoring slots the
    last by `order`, if its score beats the newcomer's; -1 = not inserted."""
    return timeliness_slot(entropy, time, h, t, rule.horizon, rule.weight, ln_c, order)


def mark_used(state: dict[str, torch.Tensor], weights: torch.Tensor, live: torch.Tensor) -> None:
    """The idle rule's use: the live slot of largest kernel weight (weights, live [C, L]: the first
    L <= Q slots of each class; the first on ties, class-major) is used at this step."""
    top = int(torch.where(live, weights, float("-inf")).flatten().argmax())
    row, col = divmod(top, weights.shape[1])
    if bool(live[row, col]):  # else nothing is live
        state["used"][row, col] = state["clock"]


def expiry_due(state: dict) -> bool:
    """Whether a slot may expire at this step: the clock has reached the bound `note_soonest` kept (0
    when none is kept: a fresh or loaded state). A bound stays one until the next expiry, as a use or
    an insertion only sets a slot's last use to the clock, which moves its deadline later."""
    return int(state["clock"]) >= state.get(SOONEST_KEY, 0)


def note_soonest(state: dict, live: torch.Tensor, rule: SlotRule) -> None:
    """After an expiry: the earliest step a slot can next expire, the least last use of the live slots
    (live [C, L], of the first L columns) plus `rule.idle`; with none live, the clock plus `rule.idle`."""
    clock = state["clock"]
    used = torch.where(live, state["used"][:, : live.shape[1]], clock) if live.numel() else clock
    state[SOONEST_KEY] = int(used.min()) + rule.idle


def idle_slots(state: dict[str, torch.Tensor], live: torch.Tensor, rule: SlotRule) -> torch.Tensor:
    """The slots the idle rule empties before this step: live ones unused for `rule.idle` steps, of
    the first L columns (live [C, L], L <= Q: a memory filled from slot 0 reads only those). [C, L] bool."""
    return live & (state["used"][:, : live.shape[1]] <= state["clock"] - rule.idle)

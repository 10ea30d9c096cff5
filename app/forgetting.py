"""The demo's "Forget old scenes" (issue 29): off, the engine's recommended rule, or that rule plus a
reset at each detected scene cut, as one `EngineConfig.forget` section (`mstta.engine.forget`).

    cfg = with_forget(engine_cfg, "recommended")      # --forget / Settings: every raced method follows it
    racer = parse_racer("ms-tta@recommended")         # one raced entry with its own choice (the bundled race)
    racer.config(cfg)                                  # the config its engine runs with

A raced entry is a registry name, or `NAME@CHOICE` to race the method with its own forgetting whatever
the page's choice is (so `ms-tta,ms-tta@recommended` races MS-TTA as the paper runs it against the same
method with the recommended forgetting). The choices only set `forget.rule` and `forget.detect`; the
horizon and the detector's keys stay the engine's recommended defaults (or `--set forget.KEY=...`).
Nothing here is tuned on a clip: the numbers are `mstta.engine.forget`'s.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mstta.engine.config import EngineConfig
from mstta.engine.families.base import Method
from mstta.engine.family_runner import forget_marks
from mstta.engine.forget import RECOMMENDED_HORIZON, ForgetConfig
from mstta.engine.methods import get_method
from mstta.errors import UserError

FLAG = "--forget"
SEP = "@"  # NAME@CHOICE in --methods: a raced entry with its own forgetting
RECOMMENDED_RULE = "timeliness"  # issue 29: `forget.rule=timeliness` alone is the recommended setting
# choice -> (forget.rule, forget.detect)
CHOICES = {"off": ("none", False), "recommended": (RECOMMENDED_RULE, False), "detect": (RECOMMENDED_RULE, True)}
LABELS = {  # what the page and the titles call each choice
    "off": "off (never forgets, as the paper runs it)",
    "recommended": f"the recommended rule (ages cache entries, horizon {RECOMMENDED_HORIZON} steps)",
    "detect": "the recommended rule + a reset at each detected scene cut",
}
SUFFIXES = {"off": " (no forgetting)", "recommended": " + forgetting", "detect": " + forgetting + cuts"}
DETECT_MARK = "scene cuts: the project's detector"  # not a published rule (issue 29), marked where it shows
BUNDLED_RACE = "ms-tta@off,ms-tta@recommended"  # the bundled demo's race (issue 29): the paper's MS-TTA, and forgetting


def check_choice(choice: str, flag: str = FLAG) -> str:
    """One of CHOICES; a one-line UserError naming `flag` otherwise."""
    if choice not in CHOICES:
        raise UserError(f"{flag} {str(choice)[:40]!r}: choose one of {', '.join(CHOICES)}")
    return choice


def with_forget(cfg: EngineConfig, choice: str | None, flag: str = FLAG) -> EngineConfig:
    """`cfg` with the choice's `forget.rule` and `forget.detect` (None: `cfg` as it is)."""
    if choice is None:
        return cfg
    rule, detect = CHOICES[check_choice(choice, flag)]
    return dataclasses.replace(cfg, forget=dataclasses.replace(cfg.forget, rule=rule, detect=detect))


def choice_of(cfg: EngineConfig) -> str:
    """The choice a config's forget section is (the page's control shows it); `--set` rules other than
    the recommended one read as the nearest choice: detect when it detects, else recommended."""
    if cfg.forget.detect:
        return "detect"
    return "off" if cfg.forget.rule == "none" else "recommended"


def keeps_state(method: Method) -> bool:
    """Whether a method carries state from one frame to the next (what forgetting acts on)."""
    return method.stateful


@dataclass(frozen=True)
class Racer:
    """One raced entry: a registry method and its own forgetting choice (None: the page's / --forget)."""

    method: Method
    forget: str | None = None

    @property
    def name(self) -> str:
        """The entry as --methods, the JSONL and the leaderboard name it: 'ms-tta', 'ms-tta@recommended'."""
        return self.method.name if self.forget is None else f"{self.method.name}{SEP}{self.forget}"

    @property
    def title(self) -> str:
        return self.method.title + (SUFFIXES[self.forget] if self.forget is not None else "")

    @property
    def marks(self) -> tuple[str, ...]:
        """The method's marks; under its own choice, the family's when its timeliness rule is the
        project's adaptation (`family_runner.forget_marks`: DOTA, BCA, OnZeta, DPE), and DETECT_MARK
        when it detects cuts (the project's design)."""
        own = []
        if self.forget is not None:
            rule, detect = CHOICES[self.forget]
            own = forget_marks(self.method, ForgetConfig(rule, detect=detect)) + ([DETECT_MARK] if detect else [])
        return tuple(self.method.marks) + tuple(own)

    @property
    def keeps_cache(self) -> bool:
        """Whether its method keeps the positive cache the page plots (`Method.keeps_cache`)."""
        return self.method.keeps_cache

    def config(self, cfg: EngineConfig) -> EngineConfig:
        """The config its engine runs with: `cfg`, with its own forgetting choice if it has one."""
        return with_forget(cfg, self.forget)


def parse_racer(entry: str, flag: str = "--methods") -> Racer:
    """'ms-tta' or 'ms-tta@recommended' -> Racer; one-line UserError naming `flag` otherwise."""
    name, sep, choice = str(entry).strip().partition(SEP)
    try:
        method = get_method(name.strip())
    except UserError as exc:
        raise UserError(f"{flag}: {exc}") from None
    if not sep:
        return Racer(method)
    choice = choice.strip()
    if choice not in CHOICES:
        raise UserError(
            f"{flag}: {entry}: after {SEP} choose one of {', '.join(CHOICES)} (e.g. {name}{SEP}recommended)"
        )
    if not keeps_state(method):
        raise UserError(f"{flag}: {entry}: {method.title} keeps no state across frames, there is nothing to forget")
    return Racer(method, choice)


def racer_title(entry: str) -> str:
    """Display name of a raced entry ('ms-tta@recommended' -> 'MS-TTA + forgetting'); the entry itself
    when it names no known method."""
    try:
        return parse_racer(entry).title
    except UserError:
        return entry


def run_marks(engines) -> list[str]:
    """What a run's forgetting is of the project's making, once each in raced order: every raced
    engine's `forget` marks (idle, the detector) and its family's (`family_runner.forget_marks`)."""
    marks: list[str] = []
    for e in engines:
        fg = e.config.forget
        marks += [m for m in fg.marks + forget_marks(e.method, fg) if m not in marks]
    return marks

"""`run_streams(domains, opts)`: the streams benchmark (docs/streams.md). Stored features of a few
domains with one class space (the digits' clean/camera/rotate/blur; ImageNet -> ImageNet-R/-Sketch
on their shared classes) are replayed in the orders of `streamorders`, for every stateful method of
the registry, under arms: CLIP zero-shot, never forgetting (today), an oracle reset at every true
segment start (each segment replayed from an empty state: benchmark only), and forgetting rules
(`--set`-style `forget.*` overrides). The per-step correctness and, for the cache family on scene
streams, the positive cache's stale share and the detected cuts, feed `streammetrics`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..checks import int_in
from ..engine.config import EngineConfig
from ..engine.families.base import CACHE
from ..engine.methods import Method, get_method, list_methods
from ..errors import UserError
from ..features.format import FeatureSet
from . import streammetrics as SM
from .streamarms import ORACLE, Outcome, Shared
from .streamorders import ORDERS, SCENE_DOMAINS, SCENES, Stream, build, scene

NEVER, ZERO = "never", "zero-shot"
MAX_SEEDS, MAX_STEPS, MAX_ARMS = 100, 1_000_000, 32
MAX_WINDOW = 10_000  # --window and --within: the curves hold 3 windows per cut and seed
# The forgetting arms: `--set`-style overrides of the engine's `forget` section (mstta.forget), each
# rule at two or three settings (shared/reference/streams-and-tpt.md §1.5, scaled to the digits'
# 200-sample lead-in and 599-sample scenes; a periodic reset never lands on a true cut there).
RULE_ARMS: tuple[str, ...] = (
    "forget.rule=timeliness forget.horizon=20",
    "forget.rule=timeliness forget.horizon=50",
    "forget.rule=timeliness forget.horizon=200",
    "forget.rule=idle forget.idle=100",
    "forget.rule=idle forget.idle=400",
    "forget.rule=periodic forget.every=150",
    "forget.rule=periodic forget.every=500",
    "forget.detect=true",
    "forget.rule=timeliness forget.detect=true",
)
# The arms of every other method: the recommended rule (its horizon unset: RECOMMENDED_HORIZON) and
# the detector (the one rule every family has).
SHORT_ARMS: tuple[str, ...] = ("forget.rule=timeliness", "forget.detect=true")


def stateful(m: Method) -> bool:
    """A method that carries state from one sample to the next (not zero-shot, not episodic)."""
    return m.stateful


def replayable(m: Method) -> bool:
    """A row that runs on stored features alone: not the prompt-tuning family (TPT, C-TPT: `TOWER`,
    they need the model's text tower, which the streams benchmark does not load)."""
    from ..engine.families import get_family

    return not getattr(get_family(m.family), "TOWER", False)


def stateful_methods() -> list[str]:
    """The default stateful rows (those that run on stored features)."""
    return [n for n in list_methods() if stateful(get_method(n)) and replayable(get_method(n))]


def episodic_methods() -> list[str]:
    """The default episodic rows (those that run on stored features)."""
    return [n for n in list_methods() if get_method(n).episodic and replayable(get_method(n))]


@dataclass
class StreamOptions:
    """What one `mstta-bench streams` run does (the CLI fills it in)."""

    methods: list[str] = field(default_factory=stateful_methods)
    all_arms_for: list[str] = field(default_factory=lambda: ["ms-tta", "tda"])  # every RULE_ARMS setting
    arms: list[str] = field(default_factory=lambda: list(RULE_ARMS))
    short_arms: list[str] = field(default_factory=lambda: list(SHORT_ARMS))
    kinds: list[str] = field(default_factory=lambda: list(ORDERS))
    short_kinds: list[str] | None = None  # the stream kinds of the methods outside all_arms_for (None: kinds)
    correlated_on: list[str] | None = None  # the domains of the label-correlated orders (None: every one)
    seeds: list[int] = field(default_factory=lambda: [1, 2, 3])
    lead: int = 200  # the first segment's samples
    segment: int = 599  # every later segment's samples (capped by its domain)
    window: int = 50  # the windowed accuracy's steps
    regret_steps: int = 200  # post-cut regret over these steps
    within: int = 30  # a detection this soon after a true cut finds it
    settings: dict[str, Any] = field(default_factory=dict)  # --set, every arm

    def __post_init__(self) -> None:
        for flag, v, hi in (
            ("--lead", self.lead, MAX_STEPS),
            ("--segment", self.segment, MAX_STEPS),
            ("--window", self.window, MAX_WINDOW),
            ("--regret-steps", self.regret_steps, MAX_STEPS),
            ("--within", self.within, MAX_WINDOW),
        ):
            int_in(v, flag, 1, hi)
        if not 1 <= len(self.seeds) <= MAX_SEEDS:
            raise UserError(f"--seeds: expected 1 to {MAX_SEEDS} seeds, got {len(self.seeds)}")
        if len(self.arms) + len(self.short_arms) > MAX_ARMS:
            raise UserError(f"--arms: at most {MAX_ARMS} forgetting arms")
        bad = [k for k in (*self.kinds, *(self.short_kinds or ())) if k not in ORDERS]
        if bad:
            raise UserError(f"--streams: unknown stream '{bad[0]}'; choose from: {', '.join(ORDERS)}")
        for name in self.methods:
            get_method(name)


@dataclass
class Domains:
    """The pooled stream material: features [N, V, d] of every domain in turn, labels [N] in the shared
    class space, each domain's size and name, the text classifier [C, d] (domain A's rows)."""

    features: torch.Tensor
    labels: np.ndarray
    sizes: list[int]
    names: list[str]
    text: torch.Tensor
    classnames: list[str]

    def labels_of(self, j: int) -> np.ndarray:
        a = sum(self.sizes[:j])
        return self.labels[a : a + self.sizes[j]]


def class_keys(names: list[str]) -> list[tuple[str, int]]:
    """Each class as (name, how many earlier classes bear that name): CLIP's ImageNet names repeat
    ('missile', 'sunglasses'), and files named from one wnid-sorted `classnames.txt` keep their order."""
    seen: dict[str, int] = {}
    out = []
    for n in names:
        out.append((n, seen.get(n, 0)))
        seen[n] = seen.get(n, 0) + 1
    return out


def shared_classes(lists: list[list[str]]) -> list[tuple[str, int]]:
    """The classes of the first list that every list has, matched by name (and occurrence); a repeated
    name whose count differs between two lists is ambiguous and left out."""
    counts = [{n: names.count(n) for n in set(names)} for names in lists]
    keys = [set(class_keys(names)) for names in lists]
    return [
        k
        for k in class_keys(lists[0])
        if all(k in ks for ks in keys[1:]) and (counts[0][k[0]] == 1 or all(c[k[0]] == counts[0][k[0]] for c in counts))
    ]


def align(sets: list[FeatureSet], names: list[str]) -> Domains:
    """Domains on their shared classes, matched by class name (ImageNet-R's 200 wnids are ImageNet
    classes, and `mstta.data.imagenet` names both from the same `classnames.txt`; `shared_classes`):
    domain A's order of those classes, its text rows; every other domain's labels mapped, its other
    classes' samples dropped."""
    if len(sets) < 2:
        raise UserError("--features: give at least two domains (A, then the shifted ones)")
    lists = [fs.classnames or [str(i) for i in range(fs.num_classes)] for fs in sets]
    for fs, name in zip(sets, names):
        if fs.labels is None:
            raise UserError(f"--features {name}: no labels, so no accuracy; extract it from a labelled dataset")
    shared = shared_classes(lists)
    if len(shared) < 2:
        raise UserError(f"--features: the domains share {len(shared)} class name(s); streams need 2 or more")
    index = {k: i for i, k in enumerate(shared)}
    views = min(fs.num_views for fs in sets)
    feats, labels, sizes = [], [], []
    for fs, cn in zip(sets, lists):
        keys = class_keys(cn)
        lab = np.array([index.get(keys[y], -1) if y >= 0 else -1 for y in fs.labels], dtype=np.int64)
        keep = np.flatnonzero(lab >= 0)
        x = fs.features if fs.features.dim() == 3 else fs.features.unsqueeze(1)
        feats.append(x[torch.as_tensor(keep), :views].float())
        labels.append(lab[keep])
        sizes.append(len(keep))
    rows = torch.as_tensor([class_keys(lists[0]).index(k) for k in shared])
    text = sets[0].text[rows].float()
    return Domains(torch.cat(feats), np.concatenate(labels), sizes, list(names), text, [k[0] for k in shared])


def streams_of(dom: Domains, opts: StreamOptions, seed: int) -> list[tuple[str, Stream]]:
    """Every stream of the run for one seed, each with its label: cut and return from A to each other
    domain, the chain through every domain in turn, the other kinds on each domain alone."""
    out: list[tuple[str, Stream]] = []
    n = len(dom.sizes)
    for kind in opts.kinds:
        if kind in SCENES:
            if kind == "chain":
                paths = [tuple(range(min(n, len(SCENE_DOMAINS["chain"]))))]
            else:
                paths = [(0, b) if kind == "cut" else (0, b, 0) for b in range(1, n)]
            for path in paths:
                label = "→".join(dom.names[d] for d in path)
                out.append((label, scene(dom.sizes, path, opts.lead, opts.segment, seed, kind)))
        else:
            labels = [dom.labels_of(j) for j in range(n)]
            on = range(n) if kind == "iid" or opts.correlated_on is None else map(dom.names.index, opts.correlated_on)
            out.extend((dom.names[j], build(kind, labels, seed, opts.lead, opts.segment, j)) for j in on)
    return out


def arms_for(method: str, opts: StreamOptions) -> list[str]:
    """The arms a method runs: never and the oracle, then every rule arm (--all-arms-for) or the short
    list, less the rules its family does not define (`arm_applies`)."""
    rules = opts.arms if method in opts.all_arms_for else opts.short_arms
    return [NEVER, ORACLE, *(a for a in dict.fromkeys(rules) if arm_applies(method, a))]


def arm_applies(method: str, arm: str) -> bool:
    """Whether a method's family defines an arm's rule: the slot rules (timeliness, idle) exist for
    the cache family and for a family module that lists them in `FORGET`; resets exist for every family."""
    from ..engine.families import get_family

    m = get_method(method)
    rule = next((kv.split("=", 1)[1] for kv in arm.split() if kv.startswith("forget.rule=")), "none")
    if rule not in ("timeliness", "idle") or m.family == CACHE:
        return True
    return rule in getattr(get_family(m.family), "FORGET", ())


def engine_config(method: str, arm: str, settings: dict[str, Any], path=None) -> EngineConfig:
    """A method's engine config under an arm: the dataset config (`path`; None = the defaults), the
    run's --set, then the arm's own space-separated `KEY=VALUE` overrides (a bad one: exit 2)."""
    from ..configfile import parse_overrides
    from .config import load_dataset_config
    from .context import Row, row_engine_config

    over = {} if arm in (NEVER, ORACLE, ZERO) else parse_overrides(arm.split())
    return row_engine_config(Row(method), load_dataset_config(path, {**settings, **over}))


def record(kind: str, label: str, seed: int, method: str, arm: str, stream: Stream, out: Outcome, opts) -> dict:
    """The numbers of one arm on one stream (curves stay in memory for the report)."""
    det = SM.detections(out.detected, stream.cuts, len(out.correct), opts.within)
    segs = stream.segments()
    stale = [None if np.isnan(out.stale[a:b]).all() else float(np.nanmean(out.stale[a:b])) for a, b in segs[1:]]
    return {
        "kind": kind,
        "stream": label,
        "seed": seed,
        "method": method,
        "arm": arm,
        "n": len(out.correct),
        "accuracy": float(100 * out.correct.mean()),
        "segments": SM.segment_accuracy(out.correct, stream.starts),
        "starts": list(stream.starts),
        "stale": stale,
        "detected": out.detected.tolist(),
        "delays": det["delays"],
        "false_cuts": det["false"],
    }


def plan(dom: Domains, opts: StreamOptions) -> list[tuple[str, str, Stream, list[tuple[str, str]]]]:
    """Every (kind, label, stream, [(method, arm)]) of the run, seed by seed: zero-shot once per
    stream; stateful methods with their arms; episodic methods on the i.i.d. streams only."""
    todo = []
    for seed in opts.seeds:
        for label, stream in streams_of(dom, opts, seed):
            cells = [(ZERO, ZERO)]
            for method in opts.methods:
                short = opts.short_kinds is not None and method not in opts.all_arms_for
                if short and stream.kind not in opts.short_kinds:
                    continue
                if stateful(get_method(method)):
                    cells += [(method, arm) for arm in arms_for(method, opts)]
                elif get_method(method).episodic and stream.kind == "iid":
                    cells.append((method, NEVER))
            todo.append((seed, label, stream, cells))
    return todo


def run_streams(
    dom: Domains, opts: StreamOptions, config_path=None, progress: bool = False, jobs: int = 1
) -> dict[str, Any]:
    """Every stream x method x arm: the records and the seed-wise windowed curves around each cut
    (each arm run by `streamarms`: pieces between resets, shared resets and runs; the (seed, method)
    jobs on `jobs` processes by `streamjobs`, the same records whatever the jobs)."""
    from .streamjobs import MAX_JOBS, Work, outcomes

    int_in(jobs, "--jobs", 1, MAX_JOBS)
    records: list[dict] = []
    curves: dict[str, dict[str, Any]] = {}
    todo = plan(dom, opts)
    configs = {cell: engine_config(*cell, opts.settings, config_path) for cell in {c for *_, cs in todo for c in cs}}
    shared = Shared(dom.features, dom.labels, dom.text)
    work = Work(shared, todo, configs, opts.seeds[0], frozenset(opts.all_arms_for))
    outcome = outcomes(work, jobs, progress)
    for seed, label, stream, cells in todo:
        outs = {(method, arm): outcome[(seed, stream.kind, label, method, arm)] for method, arm in cells}
        for (method, arm), out in outs.items():
            rec = record(stream.kind, label, seed, method, arm, stream, out, opts)
            oracle = outs.get((method, ORACLE))
            ends = [b for _, b in stream.segments()[1:]]
            rec["regret"] = [
                None if oracle is None else SM.regret(out.correct, oracle.correct, c, opts.regret_steps, e)
                for c, e in zip(stream.cuts, ends)
            ]
            records.append(rec)
            for i, (c, e) in enumerate(zip(stream.cuts, ends)):
                key = "|".join((stream.kind, label, method, arm, str(i)))
                cv = SM.curve(out.correct, c, opts.window * 2, e - c, opts.window, stream.starts[i])
                entry = curves.setdefault(key, {"pre": min(opts.window * 2, c - stream.starts[i]), "seeds": []})
                entry["seeds"].append([round(float(v), 3) for v in cv])
    return {"records": records, "curves": curves}


def settings_of(dom: Domains, opts: StreamOptions, paths) -> dict[str, Any]:
    """What a run was (results.json's `settings`, the report's header)."""
    return {
        "domains": dom.names,
        "files": [str(p) for p in paths],
        "sizes": dom.sizes,
        "classes": len(dom.classnames),
        **{k: v for k, v in dataclasses.asdict(opts).items()},
    }

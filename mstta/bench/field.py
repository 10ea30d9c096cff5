"""`run_field(cfg, opts)`: the field table (docs/field.md). Cells are backbone x dataset x method row x
text set x seed (x label-tuned); each replays its row over the stored features of the run's feature
store (`run`'s store and view kinds, extracted once when absent; a prompt-tuning row also gets its
backbone's text tower) and records accuracy, calibration (ECE, NLL), open-set detection (withheld
classes; another dataset mixed in), stability over stream orders and halves of the stream, speed and
state bytes. Rows come from the registry (`list_methods()`): nothing here knows a method by name. A
finished cell with the same settings is skipped on a rerun, as in `run`."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..checks import int_in
from ..engine.methods import get_method
from ..engine.protocol import clip_path
from ..errors import UserError
from ..features.format import FeatureSet, peek_features
from . import metrics as M
from . import paper
from .context import BenchmarkConfig, Cell, Row, RunContext, cell_fingerprint, dataset_config, load_stream, protocol
from .fieldmetrics import OPEN_SETTINGS, open_set_metrics, order_accuracies, replay_probs, state_bytes
from .results import FIELD_FILE, FIELD_KEY, predictions_path, save_predictions
from .store import Backbone, ensure_features
from .textsets import PEER, Choice, TextSets, choose, file_hash

MAX_ORDERS = 1000
LABEL_TUNED_FILE = Path(__file__).resolve().parent.parent / "resources" / "label_tuned.yaml"


@dataclass
class FieldOptions:
    """What the field table adds to a `BenchmarkConfig` (the CLI fills it in)."""

    texts: list[str] = field(default_factory=lambda: [PEER])  # set names and/or `official`
    cupl: Path | None = None  # --cupl: CuPL prompts JSON
    text_classifier: Path | None = None  # --text-classifier: a user's [C, d] .npy
    orders: int = 10  # R stream orders (order 0 = the stored one)
    ece_bins: int = M.ECE_BINS
    open: tuple[str, ...] = ("withheld", "mixed")
    mix_with: str | None = None  # the dataset mixed into every stream (mixed setting)
    mix_share: float = 0.5  # foreign samples per own sample
    label_tuned: bool = False  # also run the rows whose hyperparameters test labels chose

    def __post_init__(self) -> None:
        int_in(self.orders, "--orders", 1, MAX_ORDERS)
        M.ece(np.ones((1, 2)) / 2, np.zeros(1, dtype=int), self.ece_bins)  # the bins' bound, checked once
        bad = [o for o in self.open if o not in OPEN_SETTINGS]
        if bad:
            raise UserError(
                f"--open {','.join(self.open)}: unknown setting '{bad[0]}'; choose from: "
                f"{', '.join(OPEN_SETTINGS)} (or none)"
            )
        if not (isinstance(self.mix_share, (int, float)) and 0 < self.mix_share <= 10):
            raise UserError(f"--mix-share {self.mix_share}: expected a number in (0, 10]")

    @property
    def skipped(self) -> str | None:
        """The line that says an asked-for open setting cannot run (mixed without --mix-with), else None."""
        if "mixed" in self.open and self.mix_with is None:
            return "the mixed open-set setting needs --mix-with DATASET: skipped (its columns show —)"
        return None


def label_tuned_settings() -> dict[str, dict[str, dict[str, Any]]]:
    """resources/label_tuned.yaml: {method or family: {dataset: {--set key: value}}}: the values
    their authors chose on test labels (run only with --label-tuned, and marked)."""
    import yaml

    data = yaml.safe_load(LABEL_TUNED_FILE.read_text(encoding="utf-8")) or {}
    return data.get("settings") or {}


def tuned_for(method: str, dataset: str) -> dict[str, Any]:
    m = get_method(method)
    table = label_tuned_settings()
    entry = table.get(m.name, table.get(m.family, {})) or {}
    return dict(entry.get(dataset, {}) or {})


# ---------------------------------------------------------------------- one cell
@dataclass(frozen=True)
class FieldCell:
    cell: Cell
    text: Choice
    tuned: dict[str, Any]
    fingerprint: str

    @property
    def key(self) -> dict[str, Any]:
        return self.cell.key


def rounded(rec: dict[str, Any]) -> dict[str, Any]:
    """A record with its finite floats rounded to 4 places and its non-finite ones None."""
    return {
        k: (round(v, 4) if isinstance(v, float) and math.isfinite(v) else (None if isinstance(v, float) else v))
        for k, v in rec.items()
    }


def measure(
    fs: FeatureSet,
    text: torch.Tensor,
    fc: FieldCell,
    opts: FieldOptions,
    device,
    foreign: FeatureSet | None,
    out: Path | None,
    tower=None,
) -> dict[str, Any]:
    """Every metric of one cell (docs/field.md defines each)."""
    cell, method, ecfg, seed = fc.cell, fc.cell.row.method, fc.cell.ecfg, fc.cell.key["seed"]
    labels = fs.labels
    r = replay_probs(fs.features, text, method, ecfg, device, tower=tower)
    acc = M.accuracy(r.predictions, labels)
    f0 = fs.features if fs.features.dim() == 2 else fs.features[:, 0]
    zs = M.accuracy((f0.float().cpu() @ text.T.float().cpu()).argmax(-1).numpy(), labels)
    clip_views = M.accuracy(r.clip_predictions, labels)
    first, second = M.halves(r.predictions, labels)
    st = M.order_stats(order_accuracies(fs, text, method, ecfg, device, seed, opts.orders, acc, tower))
    rec: dict[str, Any] = {
        "accuracy": acc,
        "ece": M.ece(r.probs, labels, opts.ece_bins),
        "nll": M.nll(r.probs, labels),
        "zero_shot_accuracy": zs,
        "clip_view_accuracy": clip_views,
        "gain_over_clip": acc - zs,
        "gain_over_clip_views": acc - clip_views,
        "first_half": first,
        "second_half": second,
        "orders": st["orders"],
        "orders_mean": st["mean"],
        "orders_std": st["std"],
        "worst10": st["worst"],
        "samples_per_s": r.samples_per_s,
        "seconds": r.seconds,
        "state_bytes": state_bytes(text, method, ecfg, device, tower),
    }
    rec.update(open_set_metrics(fs, text, method, ecfg, device, seed, opts, foreign, tower))
    if out is not None:
        save_predictions(
            predictions_path(out, {**cell.key, "method": _pred_name(fc)}), r.predictions, r.clip_predictions, labels
        )
    return rounded(rec)


def _pred_name(fc: FieldCell) -> str:
    return f"{fc.cell.row.name}-{fc.text.name}{'-tuned' if fc.tuned else ''}"


# ---------------------------------------------------------------------- the run
class FieldRun:
    """One field run: the shared run context plus text sets and the foreign stream."""

    def __init__(self, cfg: BenchmarkConfig, opts: FieldOptions):
        self.cfg, self.opts = cfg, opts
        self.run = RunContext(cfg, FIELD_FILE, FIELD_KEY)
        self.texts = TextSets(self.run.models, cfg.store, opts.cupl, opts.text_classifier)
        self.hashes = {"cupl": file_hash(opts.cupl), "user": file_hash(opts.text_classifier)}
        self._foreign: dict[tuple, FeatureSet] = {}

    def cells(self, dataset: str, backbone: Backbone, seed: int) -> list[FieldCell]:
        out: list[FieldCell] = []
        seen: set[tuple] = set()
        for row in map(Row.parse, self.cfg.methods):
            m = get_method(row.method)
            variants = [{}]
            if self.opts.label_tuned and tuned_for(row.method, dataset):
                variants.append(tuned_for(row.method, dataset))
            for requested in self.opts.texts:
                choice = choose(m, requested, self.texts.available)
                for tuned in variants:
                    key = (row.name, choice.name, bool(tuned))
                    if key in seen:
                        continue
                    seen.add(key)
                    out.append(self._cell(dataset, backbone, row, seed, choice, tuned))
        return out

    def _cell(self, dataset, backbone, row, seed, choice: Choice, tuned) -> FieldCell:
        ecfg = None
        if tuned:
            dcfg = dataset_config(dataset, {**self.cfg.settings, **tuned})
            ecfg = dcfg.engine
        cell = self.run.cell(dataset, backbone, row, seed, ecfg, text=choice.name, label_tuned=bool(tuned))
        o = self.opts
        extra = {
            "text": choice.name,
            "text_file": self.hashes.get(choice.name),
            "orders": o.orders,
            "ece_bins": o.ece_bins,
            "open": list(o.open),
            "mix_with": o.mix_with if "mixed" in o.open else None,
            "mix_share": o.mix_share,
            "tuned": tuned,
            "field": 1,
        }
        return FieldCell(cell, choice, tuned, cell_fingerprint(cell.ecfg, cell.fkey, extra, cell.read, cell.scale))

    def foreign(self, fc: FieldCell) -> FeatureSet | None:
        """The mixed setting's other dataset, in the cell's view kind (extracted once when absent)."""
        o = self.opts
        if "mixed" not in o.open or o.mix_with is None or fc.cell.key["dataset"] == o.mix_with:
            return None  # a stream mixed with itself has no unknowns
        fkey = dataclasses.replace(fc.cell.fkey, dataset=o.mix_with)
        if fkey not in self._foreign:
            path = ensure_features(
                fkey,
                self.cfg.store,
                self.run.models,
                self.cfg.data_root,
                batch_size=self.cfg.batch_size,
                workers=self.cfg.workers,
                progress=self.cfg.progress,
            )
            self._foreign[fkey] = load_stream(path, fkey)
        return self._foreign[fkey]

    def precheck(self, backbone: Backbone, dataset: str) -> None:
        """Bad text files, open settings a dataset cannot hold, an unreadable mixed-in stream: before
        anything is written, one UserError for the whole run (never a warning per dataset, then it)."""
        cells = [fc for seed in self.cfg.seeds for fc in self.cells(dataset, backbone, seed)]
        for fc in cells:
            self.foreign(fc)  # extracted or loaded once per seed and view kind, kept for the cells
        found = self.describe(backbone, dataset)
        if found is None:
            return
        for name in {fc.text.name for fc in cells}:
            self.texts.check(name, *found)
        if "withheld" in self.opts.open:
            M.withheld_classes(found[1], 0)

    def describe(self, backbone: Backbone, dataset: str) -> tuple[list[str] | None, int, int | None] | None:
        """(class names, C, d) of a dataset: from a stored feature file, else from its split (d
        unknown); None when neither can be read (the dataset is then reported missing)."""
        from ..data import load_split

        for fc in self.cells(dataset, backbone, self.cfg.seeds[0]):
            path = fc.cell.fkey.path(self.cfg.store)
            if path.is_file():
                try:  # a damaged file: its dataset is reported (one line naming it) when it is read
                    return (peek := peek_features(path)).classnames, int(peek.text[0]), int(peek.text[1])
                except UserError:
                    return None
        try:
            split = load_split(dataset, self.cfg.data_root, self.cfg.listing)
        except UserError:
            return None
        return list(split.classnames), split.num_classes, None

    def dataset(self, backbone: Backbone, dataset: str) -> None:
        run = self.run
        for seed in self.cfg.seeds:
            groups: dict[Path, list[FieldCell]] = {}
            for fc in self.cells(dataset, backbone, seed):
                if not self._done(fc):
                    groups.setdefault(fc.cell.fkey.path(self.cfg.store), []).append(fc)
            for _, path, fs in run.streams([g[0].cell for g in groups.values()]):
                group = groups[path]
                for name in {fc.text.name for fc in group}:  # every text set checked before any cell
                    self.texts.check(name, fs.classnames, fs.num_classes, fs.text.shape[1])
                for fc in run.bar(group, desc=f"{dataset} seed {seed}", leave=False, unit="cell"):
                    self.record(fc, fs, path)

    def _done(self, fc: FieldCell) -> bool:
        if self.run.results.is_done(fc.key, fc.fingerprint):
            self.run.skipped += 1
            return True
        return False

    def record(self, fc: FieldCell, fs: FeatureSet, path: Path) -> None:
        cell, scale_from = fc.cell.scaled(fs, path)  # the checkpoint's logit scale unless --set gives one
        fc = dataclasses.replace(fc, cell=cell)
        text = self.texts.classifier(fc.text.name, fs, cell.key["dataset"], _backbone(cell))
        m = get_method(cell.row.method)
        marks = list(m.marks) + ([fc.text.mark] if fc.text.mark else [])
        if fc.tuned:
            marks.append("hyperparameters chosen on test labels: " + ", ".join(f"{k}={v}" for k, v in fc.tuned.items()))
        fs = cell.features(fs)  # the views this row reads of its file's (`context.view_spec`)
        augment, tower = cell.augment, self.run.models.tower(_backbone(cell), cell.row.method, fs.classnames)
        rec = {
            **cell.key,
            **measure(fs, text, fc, self.opts, self.run.device, self.foreign(fc), Path(self.cfg.out), tower),
            "marks": marks,
            "text_requested": fc.text.requested,
            "family": m.family,
            "benchmark": paper.benchmark_of(cell.key["dataset"]),
            "protocol": protocol(cell.row.method, cell.ecfg, cell.read, augment, fc.text.name),
            "view_mode": cell.ecfg.view_mode,
            "clip_path": clip_path(cell.row.method, cell.ecfg, cell.read, augment),
            "logit_scale": cell.ecfg.logit_scale,
            "logit_scale_from": scale_from,
            "n": int(fs.num_samples),
            "classes": int(fs.num_classes),
            "views": cell.read,
            "store_views": cell.fkey.views,
            "augment": augment,
            "precision": cell.fkey.precision,
            "limit": cell.fkey.limit,
            "device": str(self.run.device),
            "ece_bins": self.opts.ece_bins,
            "mix_with": self.opts.mix_with,
            "hyperparameters": dataclasses.asdict(cell.ecfg),
            "versions": self.run.versions,
            "features": str(path),
            "fingerprint": fc.fingerprint,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        self.run.results.record(rec)
        self.run.ran += 1


def plan_field(cfg: BenchmarkConfig, opts: FieldOptions) -> list[str]:
    """What `run_field` would do, as lines (feature files cached or to extract, cells done or to
    run with their text sets); writes nothing."""
    fr = FieldRun(cfg, opts)
    lines = [
        f"out: {cfg.out}; feature store: {cfg.store}; device: {fr.run.device}; orders {opts.orders}; "
        f"open: {', '.join(opts.open) or 'none'}" + (f" (mixed with {opts.mix_with})" if opts.mix_with else "")
    ] + ([opts.skipped] if opts.skipped else [])
    todo = 0
    for backbone in cfg.backbones:
        lines.append(f"backbone {backbone.label}")
        for dataset in cfg.datasets:
            for seed in cfg.seeds:
                files: dict[Path, list[str]] = {}
                for fc in fr.cells(dataset, backbone, seed):
                    done = fr.run.results.is_done(fc.key, fc.fingerprint)
                    todo += not done
                    name = f"{fc.cell.row.name}[{fc.text.name}]{'†' if fc.tuned else ''}"
                    files.setdefault(fc.cell.fkey.path(cfg.store), []).append(f"{name} {'done' if done else 'to run'}")
                for path, names in files.items():
                    lines.append(
                        f"  {dataset} seed {seed}: features {'cached' if path.is_file() else 'to extract'} "
                        f"({path}); " + ", ".join(names)
                    )
    lines.append(f"{todo} cell(s) to run")
    return lines


def _backbone(cell: Cell) -> Backbone:
    return cell.fkey.backbone


def run_field(cfg: BenchmarkConfig, opts: FieldOptions) -> dict[str, Any]:
    """Every unfinished field cell, then results.csv, report.md and the plots (`fieldreport`)."""
    from .fieldreport import write_field_reports

    if not cfg.datasets or not cfg.backbones or not cfg.methods or not cfg.seeds:
        raise UserError("nothing to run: give at least one dataset, backbone, method and seed")
    fr = FieldRun(cfg, opts)
    for backbone in cfg.backbones:  # bad text files / open settings: exit 2 before any cell
        for dataset in cfg.datasets:
            fr.precheck(backbone, dataset)
    if opts.skipped:  # after the checks: a refusal stays one line
        cfg.notify(opts.skipped)
    for backbone in cfg.backbones:
        fr.run.each_dataset(backbone, lambda d, b=backbone: fr.dataset(b, d), backbone.label)
    fr.run.finish()
    report = write_field_reports(Path(cfg.out), plots=cfg.plots)
    return {
        "ran": fr.run.ran,
        "skipped": fr.run.skipped,
        "missing": fr.run.missing,
        "out": str(cfg.out),
        "report": str(report),
    }

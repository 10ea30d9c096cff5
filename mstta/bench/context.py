"""The run context every benchmark command shares: what a run asks for (`BenchmarkConfig`), what
each report row is (`Row`), which engine config and which feature file a cell uses, the one cell
key, and `RunContext`, the state of one run (device, models, results file, per-dataset loop).

`runner` (run), `sweep` and `efficiency` all build on this module and never on each other.

Protocol per method (issue 9): every method reads the views its own code reads. BoostAdapter
builds crop views everywhere (`AugMixAugmenter(..., augmix=False)` in both `get_ood_preprocess`
and `get_cross_dataset_preprocess`, taolinzhang/BoostAdapter utils.py:112-133), so every method
with boosting (`Method.boosting_views`) reads `crop` views; TDA builds AugMix views for ImageNet-A/V2/R/S
(kdiAAA/TDA utils.py:94-105 via `build_test_data_loader`) and the original image elsewhere, so the
other methods read the dataset's `bench.augment` (augmix on OOD). `--augment` makes every method
read one kind.

A row whose authors' code reads other views names its view policy (`Method.views`, a key of
`VIEW_POLICIES`): per dataset group (the ImageNet family, the other sets) the kind, the store's view
count and how many of its views the row reads. `view_spec` resolves it, the one place that does;
docs/benchmark.md ("Which views each row reads") tabulates the result.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from ..configfile import parse_overrides
from ..data import LISTINGS
from ..engine.config import VIEW_MODES, EngineConfig
from ..engine.methods import get_method, list_methods
from ..engine.protocol import describe
from ..engine.scale import CHECKPOINT, SET, scale_set, with_file_scale
from ..errors import UserError, one_line
from ..features.devices import resolve_device
from ..features.extract_views import VIEWS_ON, view_path
from ..features.format import FeatureSet, load_features
from .config import DatasetConfig, dataset_config_path, load_dataset_config
from .results import RUN_KEY, ResultsStore, fingerprint, versions
from .store import Backbone, FeatureKey, Models, ensure_features, resolved_precision
from .viewpolicy import view_spec

log = logging.getLogger(__name__)

RESULTS_FILE = "results.json"
ROW_SEP = "@"  # `ms-tta+boost@original`: a method with its view mode forced
# The rows held against the paper's MS-TTA and baseline rows, per table (docs/benchmark.md, "Two
# readings"). On OOD, the paper's own λ = 0 evidence (ImageNet-A 49.86 ≈ CLIP on the original image
# 49.89; Flowers 66.99 = 66.99) says its MS-TTA predicts from the original image: the `+boost`
# reading on the original image. On the cross-dataset sets every reading predicts from it already.
# The others (`ms-tta+boost` on confident views, `ms-tta` in TDA's protocol) are shown beside them.
HELD_AGAINST_PAPER = {
    "ood": ("ms-tta+boost@original", "baseline+boost@original"),
    "cross": ("ms-tta+boost", "baseline+boost"),
}
EXTRA_ROWS = ("ms-tta+boost@original", "baseline+boost@original")


def held_rows(bench: str | None) -> tuple[str, ...]:
    """The rows held against the paper in a table ('ood', 'cross'); None: in either."""
    if bench is None:
        return tuple(r for rows in HELD_AGAINST_PAPER.values() for r in rows)
    return HELD_AGAINST_PAPER.get(bench, ())


@dataclass(frozen=True)
class Row:
    """One row of the reports: a registered method, optionally with its view mode forced."""

    method: str
    view_mode: str | None = None  # None: the dataset's (configs/<dataset>.yaml)

    @property
    def name(self) -> str:
        return self.method if self.view_mode is None else f"{self.method}{ROW_SEP}{self.view_mode}"

    @property
    def title(self) -> str:
        """The method's title (`Method.title`), plus the forced prediction path if any."""
        title = get_method(self.method).title
        if self.view_mode is None:
            return title
        return f"{title} ({'original image' if self.view_mode == 'original' else 'confident views'})"

    @classmethod
    def parse(cls, spec: str, flag: str = "--methods") -> "Row":
        """`NAME` or `NAME@original` / `NAME@confident`; a bad name lists the valid choices."""
        name, sep, mode = str(spec).partition(ROW_SEP)
        if name not in list_methods():
            raise UserError(
                f"{flag}: unknown method '{name}'; choose from: {', '.join(list_methods())} "
                f"(optionally with {ROW_SEP}original or {ROW_SEP}confident to force the view mode)"
            )
        if sep and mode not in VIEW_MODES:
            raise UserError(f"{flag}: unknown view mode '{mode}' in '{spec}'; choose one of: {', '.join(VIEW_MODES)}")
        return cls(name, mode if sep else None)


def default_methods() -> list[str]:
    """`run`'s default rows: every method, plus the +boost reading on the original image."""
    return list_methods() + list(EXTRA_ROWS)


def row_title(name: str) -> str:
    """The display title of a row name as stored in results (`method` field)."""
    try:
        return Row.parse(name).title
    except UserError:
        return name


def row_order(names: Iterable[str]) -> list[str]:
    """Row names in the reports' order (the registry's, the extra rows after their method)."""
    order = default_methods()
    return sorted(set(names), key=lambda n: (order.index(n) if n in order else len(order), n))


@dataclass
class BenchmarkConfig:
    """Everything one `mstta-bench run` / `sweep` does (the CLI only fills this in)."""

    datasets: list[str]  # dataset keys (see runner.parse_datasets)
    backbones: list[Backbone]
    methods: list[str] = field(default_factory=default_methods)  # row names (Row.parse)
    seeds: list[int] = field(default_factory=lambda: [1])
    data_root: Path | None = None
    out: Path = Path("results")
    store: Path = Path("features")
    overrides: list[str] = field(default_factory=list)  # --set KEY=VALUE (engine or bench keys)
    listing: str = "full"  # full | peer (the peers' file lists)
    views_on: str = "auto"  # auto | cpu | device: where many views are made
    augment: str | None = None  # --augment: every method reads this view kind
    device: str = "auto"
    precision: str | None = None
    batch_size: int | None = None  # extraction: images per forward (None: extractor's)
    workers: int | None = None  # extraction data-loader workers (None: extractor's)
    limit: int | None = None  # only the first N samples of each stream (quick runs)
    fps_samples: int = 0  # end-to-end speed samples per method; 0 = skip
    fps_dataset: str | None = None  # dataset to time on (default: the first that ran)
    plots: bool = True
    progress: bool = False  # tqdm bars (the CLI turns them on)
    notify: Callable[[str], None] = log.warning  # one line per skipped dataset, as it happens

    settings: dict[str, Any] = field(init=False, repr=False)  # `overrides`, parsed once

    def __post_init__(self) -> None:
        if self.listing not in LISTINGS:
            raise UserError(f"--listing {self.listing}: unknown listing; choose one of: {', '.join(LISTINGS)}")
        if self.views_on not in VIEWS_ON:
            raise UserError(f"--views-on {self.views_on}: choose one of {', '.join(VIEWS_ON)}")
        self.settings = parse_overrides(self.overrides)


# ---------------------------------------------------------------------- per-cell settings
def dataset_config(dataset: str, settings: dict[str, Any]) -> DatasetConfig:
    """`configs/<dataset>.yaml` (built-in defaults for datasets without one) + the parsed `--set`
    overrides (`BenchmarkConfig.settings`)."""
    path = dataset_config_path(dataset) if not dataset.startswith("imagefolder:") else None
    return load_dataset_config(path if path is not None and path.is_file() else None, settings)


def row_engine_config(row: Row, dcfg: DatasetConfig) -> EngineConfig:
    """The engine config a row runs with: the dataset's, except that zero-shot CLIP always scores
    the original image (view 0), as the paper's CLIP rows do, and a forced view mode."""
    if row.method == "zero-shot":
        return dataclasses.replace(dcfg.engine, view_mode="original")
    if row.view_mode is not None:
        return dataclasses.replace(dcfg.engine, view_mode=row.view_mode)
    return dcfg.engine


def redundant(row: Row, dcfg: DatasetConfig) -> bool:
    """A forced view mode that changes nothing here: the row would repeat its method's cell."""
    return row.view_mode is not None and row_engine_config(row, dcfg) == row_engine_config(Row(row.method), dcfg)


def protocol(method: str, ecfg: EngineConfig, views: int, augment: str | None, text: str = "peer") -> str:
    """A cell's protocol in words, from its row's family (`mstta.engine.protocol.describe`): the views it
    reads, what it predicts from, its text set."""
    return describe(method, ecfg, views, augment, text)


def feature_key(
    dataset: str,
    backbone: Backbone,
    precision: str,
    dcfg: DatasetConfig,
    seed: int,
    limit: int | None = None,
    listing: str = "full",
    augment: str | None = None,
    views_made: str = "pil",
    views: int | None = None,
) -> FeatureKey:
    """The feature file a cell reads (`augment`: the view kind; None = the dataset's; `views_made`:
    `mstta.features.extract_views.view_path` of --views-on on the run's device; `views`: the views per
    sample, None = the dataset's)."""
    n = dcfg.bench.views if views is None else views
    return FeatureKey(dataset, backbone, precision, n, augment or dcfg.bench.augment, seed, limit, listing, views_made)


def cell_key(dataset: str, backbone: Backbone, row: str, seed: int, **extra: Any) -> dict[str, Any]:
    """The one key of a results cell (RUN_KEY fields; a sweep adds param and value)."""
    key = dict(zip(RUN_KEY, (dataset, backbone.name, backbone.pretrained, row, seed)))
    return {**key, **extra}


def cell_fingerprint(
    ecfg: EngineConfig,
    fkey: FeatureKey,
    extra: dict[str, Any] | None = None,
    views: int | None = None,
    scale: str = SET,
) -> str:
    """What decides a cell's result besides its key: rerun when it changes (`views`: the views the
    cell reads of its file's, when fewer; `scale` CHECKPOINT: the file's recorded logit scale)."""
    read = {"views_read": views} if views is not None and views < fkey.views else {}
    hyper = dataclasses.asdict(ecfg)
    if scale != SET:
        hyper["logit_scale"] = scale  # the file's (one per backbone): known once the file is
    return fingerprint(
        {
            "hyperparameters": hyper,
            "views": fkey.views,
            **read,
            "augment": fkey.augment if fkey.views > 1 else None,
            "precision": fkey.precision,
            "limit": fkey.limit,
            "listing": fkey.listing,
            **(extra or {}),
        }
    )


def load_stream(path: Path, fkey: FeatureKey) -> FeatureSet:
    """A feature file of the store, checked against what the benchmark expects of it."""
    fs = load_features(path)
    if fs.labels is None or not (fs.labels >= 0).any():
        raise UserError(f"{path}: no labels, so no accuracy; re-extract it (delete the file) from a labelled dataset")
    if fs.num_views != fkey.views:
        raise UserError(
            f"{path}: holds {fs.num_views} views per sample but the config asks for {fkey.views}; "
            "delete the file to re-extract it"
        )
    return fs


def read_views(fs: FeatureSet, views: int) -> FeatureSet:
    """The first `views` views of each sample of a stream (itself when it holds no more)."""
    if fs.features.dim() != 3 or fs.features.shape[1] <= views:
        return fs
    return dataclasses.replace(fs, features=fs.features[:, :views])


@dataclass(frozen=True)
class Cell:
    """One planned cell: its row, key, engine config, feature file and the views it reads of it."""

    row: Row
    key: dict[str, Any]
    ecfg: EngineConfig
    fkey: FeatureKey
    views: int | None = None  # the first `views` views of each sample; None: all the file's
    scale: str = SET  # SET: `ecfg.logit_scale` as given; CHECKPOINT: the feature file's (`scaled`)

    @property
    def read(self) -> int:
        """The views per sample this cell reads."""
        return self.fkey.views if self.views is None else min(self.views, self.fkey.views)

    @property
    def augment(self) -> str | None:
        """The view kind it reads; None for a one-view stream."""
        return self.fkey.augment if self.read > 1 else None

    def features(self, fs: FeatureSet) -> FeatureSet:
        """The views of a loaded stream (its file's) this cell reads."""
        return read_views(fs, self.read)

    @property
    def fingerprint(self) -> str:
        return cell_fingerprint(self.ecfg, self.fkey, views=self.read, scale=self.scale)

    def scaled(self, fs: FeatureSet, path: Path) -> tuple["Cell", str]:
        """(the cell with its stream's logit scale, where it came from): the file's (the checkpoint's,
        `mstta.engine.scale`) unless `--set logit_scale=` gave one."""
        ecfg, source = with_file_scale(self.ecfg, fs.meta, self.scale == SET, str(path))
        return dataclasses.replace(self, ecfg=ecfg), source


# ---------------------------------------------------------------------- one run's state
class RunContext:
    """The state of one run or sweep: resolved configs, device, models, results file, counters."""

    def __init__(self, cfg: BenchmarkConfig, results_file: str = RESULTS_FILE, key: tuple[str, ...] = RUN_KEY):
        self.cfg = cfg
        self.configs = {d: dataset_config(d, cfg.settings) for d in cfg.datasets}  # bad --set fails here
        self.device = resolve_device(cfg.device)
        self.precision = resolved_precision(self.device, cfg.precision)
        self.models = Models(self.device, cfg.precision)
        self.results = ResultsStore(Path(cfg.out) / results_file, key)
        self.versions = versions()
        self.ran = self.skipped = 0
        self.missing: list[dict[str, str]] = []
        self.ok: dict[Backbone, list[str]] = {}

    def bar(self, items, **kw):
        from tqdm.auto import tqdm

        # disable=None: drawn on a terminal only, so a log file gets no bar debris (`[A`)
        return tqdm(items, disable=None if self.cfg.progress else True, dynamic_ncols=True, **kw)

    def cell(
        self, dataset: str, backbone: Backbone, row: Row, seed: int, ecfg: EngineConfig | None = None, **extra: Any
    ) -> Cell:
        """The cell of (dataset, backbone, row, seed); `ecfg` replaces the row's engine config (sweeps)."""
        dcfg = self.configs[dataset]
        ecfg = ecfg if ecfg is not None else row_engine_config(row, dcfg)
        kind, store, read = view_spec(row.method, dcfg, self.cfg.augment, dataset, "views" in self.cfg.settings)
        fkey = feature_key(
            dataset,
            backbone,
            self.precision,
            dcfg,
            seed,
            self.cfg.limit,
            self.cfg.listing,
            kind,
            view_path(self.cfg.views_on, self.device),
            store,
        )
        chosen = scale_set(self.cfg.settings) or extra.get("param") == "logit_scale"
        key = cell_key(dataset, backbone, row.name, seed, **extra)
        return Cell(row, key, ecfg, fkey, read, SET if chosen else CHECKPOINT)

    def each_dataset(self, backbone: Backbone, work: Callable[[str], None], desc: str) -> list[str]:
        """`work(dataset)` for every dataset; a UserError skips that dataset (one warning line, listed
        as missing) and the others still run. Returns the datasets that ran."""
        done: list[str] = []
        for dataset in self.bar(self.cfg.datasets, desc=desc, unit="dataset"):
            try:
                work(dataset)
            except UserError as exc:
                self.skip(backbone, dataset, exc)
                continue
            done.append(dataset)
            self.results.set_missing(dataset, backbone.name, backbone.pretrained, None)
        self.ok[backbone] = done
        return done

    def pending(self, cells: Iterable[Cell]) -> list[Cell]:
        """The cells not yet finished with the same settings (the others count as skipped)."""
        todo = []
        for c in cells:
            if self.results.is_done(c.key, c.fingerprint):
                self.skipped += 1
            else:
                todo.append(c)
        return todo

    def streams(self, cells: list[Cell]) -> Iterable[tuple[list[Cell], Path, FeatureSet]]:
        """Cells grouped by feature file, each file extracted if needed and loaded once:
        (cells, path, features) per file, one file in memory at a time."""
        groups: dict[Path, list[Cell]] = {}  # one-view keys of either kind share one file
        for c in cells:
            groups.setdefault(c.fkey.path(self.cfg.store), []).append(c)
        for group in groups.values():
            fkey = group[0].fkey
            path = ensure_features(
                fkey,
                self.cfg.store,
                self.models,
                self.cfg.data_root,
                batch_size=self.cfg.batch_size,
                workers=self.cfg.workers,
                progress=self.cfg.progress,
            )
            yield group, path, load_stream(path, fkey)

    def skip(self, backbone: Backbone, dataset: str, exc: Exception) -> None:
        """Report a dataset that cannot run (as it happens, unless it is the run's only one: then
        the final error says it) and go on with the others."""
        reason = one_line(exc)
        self.missing.append(
            {"dataset": dataset, "backbone": backbone.name, "pretrained": backbone.pretrained, "reason": reason}
        )
        if len(self.cfg.datasets) * len(self.cfg.backbones) > 1:
            self.cfg.notify(f"dataset {dataset} skipped for {backbone.label}: {reason}")

    def finish(self) -> None:
        """Raise when no dataset ran at all; else record the missing ones in the results file."""
        if not any(self.ok.values()):
            first = self.missing[0]["reason"] if self.missing else "nothing ran"
            raise UserError(f"no dataset could run: {first}")
        for m in self.missing:
            self.results.set_missing(m["dataset"], m["backbone"], m["pretrained"], m["reason"])

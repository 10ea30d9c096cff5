"""Run `mstta-bench` in-process, as a user would from the shell."""

from __future__ import annotations

from pathlib import Path

from mstta.cli import main


def run_bench(capsys, *argv) -> tuple[int, str, str]:
    """`mstta-bench ARGV...` -> (exit code, stdout, stderr); arguments may be paths."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def default_views_suffix() -> str:
    """The file-name suffix of the views a run makes with the default `--views-on auto` on the default
    device: none on a CPU (PIL), `-gpuviews` on a GPU, so a test of the default path passes on either."""
    from mstta.bench.store import VIEW_SUFFIX
    from mstta.features.devices import resolve_device
    from mstta.features.extract_views import view_path

    return VIEW_SUFFIX.get(view_path("auto", resolve_device("auto")), "")


def default_model_dir(backbone: str = "mstta-tiny", pretrained: str = "none") -> str:
    """The store folder a run writes with the default device and precision (fp16 on a GPU, fp32 on a
    CPU), so a test of the default path passes on either."""
    from mstta.bench.store import Backbone, FeatureKey, resolved_precision
    from mstta.features.devices import resolve_device

    precision = resolved_precision(resolve_device("auto"), None)
    return FeatureKey("d", Backbone(backbone, pretrained), precision, 1, "crop", 1).path(Path(".")).parts[0]

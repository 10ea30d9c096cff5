"""mstta: MS-TTA, mean-shift guided training-free test-time adaptation of CLIP, and its peers.

    from mstta import Engine, EngineConfig
    engine = Engine(text_classifier, method="ms-tta", config=EngineConfig(k=2, alpha=0.8))
    for f in features:            # [d] or [V, d] CLIP image features, in stream order
        result = engine.step(f)   # result.prediction, result.clip_prediction, result.topk()

The engine keeps its state on the text classifier's device and, on CUDA, captures its step as a
CUDA graph (`Engine(..., cuda_graph=None|True|False)`); `list_methods()` gives the methods in the
paper's order, then the field's families (ZERO, MTA, DMN-ZS, DOTA, OnZeta, BCA, DPE and their `+ms`
rows, `mstta.engine.families`), `get_method(name).title` their human titles. Every one runs through the
same `Engine(text, name)`; OnZeta's schedule reads `Engine(..., stream_length=N)` when N is known.
`MultiEngine(text, method, config, streams=S)` steps S independent streams together, equal to S
engines. Semantics: docs/engine.md.
"""

from ._version import __version__
from .bench.config import BenchConfig, DatasetConfig, load_dataset_config
from .engine.config import EngineConfig
from .engine.engine import Engine, StepResult
from .engine.forget import ForgetConfig
from .engine.methods import Method, get_method, list_methods
from .engine.multi import MultiEngine
from .engine.replay import ReplayResult, mean_shifted, replay
from .errors import UserError
from .features.format import FeatureSet, load_features, save_features

__all__ = [
    "BenchConfig",
    "DatasetConfig",
    "Engine",
    "EngineConfig",
    "ForgetConfig",
    "FeatureSet",
    "Method",
    "MultiEngine",
    "ReplayResult",
    "StepResult",
    "UserError",
    "get_method",
    "list_methods",
    "load_dataset_config",
    "load_features",
    "mean_shifted",
    "replay",
    "save_features",
    "__version__",
]

# The model layer imports open_clip on first use only (the engine needs neither open_clip nor a model).


def __getattr__(name: str):
    if name in ("load_clip", "build_text_classifier"):
        from .features import models

        return getattr(models, name)
    if name == "extract_features":
        from .features.extract import extract_features

        return extract_features
    raise AttributeError(f"module 'mstta' has no attribute {name!r}")

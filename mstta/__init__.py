"""mstta: MS-TTA, mean-shift guided training-free test-time adaptation of CLIP, and its peers.

    from mstta import Engine, EngineConfig
    engine = Engine(text_classifier, method="ms-tta", config=EngineConfig(k=2, alpha=0.8))
    for f in features:            # [d] or [V, d] CLIP image features, in stream order
        result = engine.step(f)   # result.prediction, result.clip_prediction, result.topk()
"""
from .config import BenchConfig, DatasetConfig, EngineConfig, load_dataset_config
from .engine import Engine, StepResult
from .errors import UserError
from .features import FeatureSet, load_features, save_features
from .methods import Method, get_method, list_methods
from .replay import ReplayResult, replay

__version__ = "0.1.0"

__all__ = [
    "BenchConfig", "DatasetConfig", "Engine", "EngineConfig", "FeatureSet", "Method", "ReplayResult",
    "StepResult", "UserError", "get_method", "list_methods", "load_dataset_config", "load_features",
    "replay", "save_features", "__version__",
]

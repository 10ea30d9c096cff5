"""The README's Python API section runs as written (issue 33): the block between its markers is
executed on a generated feature file named as the snippet names it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from synthetic import make_stream

from mstta.features.format import save_features

README = Path(__file__).resolve().parent.parent / "README.md"


def snippet() -> str:
    """The Python block between `<!-- api-snippet -->` and `<!-- /api-snippet -->`."""
    text = README.read_text(encoding="utf-8")
    block = re.search(r"<!-- api-snippet -->\n```python\n(.*?)```\n<!-- /api-snippet -->", text, re.S)
    assert block is not None, "README.md lost its API snippet markers"
    return block.group(1)


def test_the_readme_api_snippet_runs_on_a_feature_file(tmp_path, monkeypatch, capsys):
    code = snippet()
    assert "load_features(" in code and "view_mode=" in code and "logit_scale=" in code  # said explicitly
    s = make_stream(n=60, classes=4, dim=16, views=4, seed=2)
    save_features(tmp_path / "features.npz", s["features"], s["text"], s["labels"], list("abcd"), {"logit_scale": 20.0})
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, str(README), "exec"), scope)
    assert scope["cfg"].logit_scale == 20.0 and scope["cfg"].view_mode == "original"
    assert len(scope["whole"].predictions) == 60 and np.asarray(scope["out"].predictions).shape == (2,)
    assert "MS-TTA" in capsys.readouterr().out

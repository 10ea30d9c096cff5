"""The Settings tab's model choice: the offered list, the switch, the shared bounded cache, refusals."""

from __future__ import annotations

import pytest

from app.ui import models as choice
from mstta.engine.config import EngineConfig
from mstta.errors import UserError
from mstta.features import models, weights

LABELS = "\n".join(str(i) for i in range(10))
DIGITS = ("mstta-digits", "bundled")


def form(model="", views=1, **kw):
    return (
        dict(labels=LABELS, template="", method="ms-tta", k=2, alpha=0.8, lam=1.0, capacity=3, bank=64, race=[])
        | dict(model=model, views=views)
        | kw
    )


@pytest.fixture
def ctx(tiny_clip):
    from app.ui.context import Context
    from app.ui.state import ModelSlots, Sessions

    loads = []

    def loader(name, pretrained, **kw):
        loads.append((name, pretrained))
        return models.load_clip(name, pretrained, **kw)

    shared = choice.SharedModels("cpu", "fp32", first=tiny_clip, loader=loader)
    c = Context(
        clip=tiny_clip, base=EngineConfig(bank_size=64), slots=ModelSlots(1), sessions=Sessions(4), models=shared
    )
    c.loads = loads
    return c


def test_the_list_offers_digits_cached_weights_and_tiny_marked_random(monkeypatch):
    monkeypatch.setattr(choice, "cached_pairs", lambda: [("ViT-B-32", "laion2b_s34b_b79k")])
    offered = dict((v, label) for label, v in choice.model_choices(DIGITS))
    assert list(offered)[0] == "mstta-digits|bundled", "the model running now comes first"
    assert "ViT-B-32|laion2b_s34b_b79k" in offered
    assert "RANDOM WEIGHTS" in offered["mstta-tiny|none"]
    assert all("RANDOM" not in label for v, label in offered.items() if v != "mstta-tiny|none")
    assert len(offered) == 3, "no duplicates: the current model is also the bundled one"
    assert choice.parse_value("mstta-digits|bundled", choice.TINY) == DIGITS
    assert choice.parse_value("", DIGITS) == DIGITS


def test_cached_pairs_asks_the_local_cache_only(monkeypatch, tmp_path):
    monkeypatch.setattr(weights, "url_cache_dir", lambda: tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(weights, "weights_cached", lambda name, tag: (name, tag) == ("RN50", "openai"))
    assert choice.cached_pairs() == [("RN50", "openai")]


def test_switch_tiny_to_digits_and_back_shares_loaded_models(ctx):
    from app.annotate import random_weights
    from app.ui.handlers import apply
    from app.ui.state import UISession

    one, two = UISession(), UISession()
    page = apply(ctx, one, form())
    assert random_weights(one.stream.clip) and "random weights" in page["banner"].lower()
    page = apply(ctx, one, form(model="mstta-digits|bundled"))
    assert one.stream.clip.name == "mstta-digits" and not random_weights(one.stream.clip)
    assert page["banner"] == "" and "mstta-digits" in page["title"] and "New model mstta-digits" in page["status"]
    apply(ctx, two, form(model="mstta-digits|bundled"))
    assert two.stream.clip is one.stream.clip, "one loaded model for both sessions"
    page = apply(ctx, one, form(model="mstta-tiny|none"))
    assert one.stream.clip is ctx.clip and "random weights" in page["banner"].lower()
    assert ctx.loads == [DIGITS], "digits loaded once; tiny was never reloaded"
    assert ctx.models.loaded() == [DIGITS, choice.TINY]


def test_views_on_digits_say_that_crops_cut_digits(ctx):
    from app.ui.handlers import apply
    from app.ui.state import UISession

    ui = UISession()
    page = apply(ctx, ui, form(model="mstta-digits|bundled", views=3))
    assert ui.stream.encoder.views == 3 and "cut a digit apart" in page["status"]
    assert "cut a digit apart" in choice.views_note("mstta-digits") and "cut" not in choice.views_note("ViT-B-16")


def test_at_most_two_models_stay_loaded(tiny_clip):
    made = []

    def loader(name, pretrained, **kw):
        made.append(name)
        return object()

    shared = choice.SharedModels(first=tiny_clip, loader=loader)
    shared.get(DIGITS)
    shared.get(("mstta-tiny", "none"))  # the first one: still loaded, moved to the back
    shared.get(("mstta-digits", str(models.bundled_checkpoint("mstta-digits"))))
    assert len(shared.loaded()) == 2 and DIGITS not in shared.loaded()


def test_an_uncached_model_is_refused_in_one_line_and_nothing_changes(ctx, monkeypatch, tmp_path):
    from app.ui.handlers import apply
    from app.ui.state import UISession

    monkeypatch.setattr(weights, "url_cache_dir", lambda: tmp_path)
    ui = UISession()
    apply(ctx, ui, form())
    before = ui.stream
    with pytest.raises(UserError) as err:
        apply(ctx, ui, form(model="RN50|openai"))
    text = str(err.value)
    assert "RN50 (openai)" in text and "never downloads" in text and "\n" not in text
    assert ui.stream is before and ctx.loads == [] and ctx.models.loaded() == [choice.TINY]


def test_memory_is_checked_before_a_load(ctx, monkeypatch):
    from app.ui.handlers import apply
    from app.ui.state import UISession

    monkeypatch.setattr("mstta.safety.machine_memory", lambda: 1000)
    with pytest.raises(UserError, match="needs .*this machine has"):
        apply(ctx, UISession(), form(model="mstta-digits|bundled"))
    assert ctx.loads == []


def test_bad_model_and_views_values_are_one_line_errors(ctx):
    from app.ui.handlers import apply
    from app.ui.state import UISession

    for bad, match in (("nonsense", "not a choice"), ("no-such|x", "not a model open_clip knows")):
        with pytest.raises(UserError, match=match):
            apply(ctx, UISession(), form(model=bad))
    with pytest.raises(UserError, match="Views per frame"):
        apply(ctx, UISession(), form(views=0))

"""CLIP loading (mstta-tiny, checkpoints, missing weights offline), text classifiers and templates."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers_data import make_fake_dataset

import mstta.features.weights as weights
from mstta.data.templates import DEFAULT_TEMPLATES, check_templates, fill, template_set, templates_for
from mstta.errors import UserError
from mstta.features.models import build_text_classifier, load_clip
from mstta.features.weights import weights_cached

REPO = Path(__file__).resolve().parent.parent


def _no_network(monkeypatch) -> list:
    """Replace the reachability probe; the list records the hosts it was asked about."""
    calls: list = []
    monkeypatch.setattr(weights, "network_reachable", lambda host, port=443, timeout=0: calls.append(host) or False)
    return calls


def _no_sockets(monkeypatch) -> list:
    """Refuse every outgoing connection; the list records the addresses something tried to reach."""
    import socket

    tried: list = []

    def refuse(self, address, *args, **kwargs):
        tried.append(address)
        raise OSError("network disabled by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return tried


def _no_model_build(monkeypatch) -> list:
    """Record (instead of running) open_clip's model factory: an empty list = no download was tried."""
    import open_clip

    built: list = []
    monkeypatch.setattr(open_clip, "create_model_and_transforms", lambda *a, **k: built.append(a) or 1 / 0)
    return built


# --- loading -------------------------------------------------------------------------------------


def test_tiny_random_init_warns_once_and_is_reproducible(caplog):
    with caplog.at_level(logging.WARNING):
        a = load_clip("mstta-tiny", "none", device="cpu")
    ours = [r for r in caplog.records if "RANDOM weights" in r.getMessage()]
    assert len(ours) == 1 and "\n" not in ours[0].getMessage() and "meaningless" in ours[0].getMessage()
    assert not [r for r in caplog.records if "No pretrained weights loaded" in r.getMessage()]
    b = load_clip("mstta-tiny", "none", device="cpu")
    for (k, va), vb in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(va, vb), k


def test_tiny_encoders(tiny_clip):
    clip = tiny_clip
    assert (clip.image_size, clip.embed_dim, clip.device.type, clip.dtype) == (64, 64, "cpu", torch.float32)
    img = tiny_clip.encode_images(torch.randn(3, 3, 64, 64))
    txt = tiny_clip.encode_text(["a photo of a dog.", "a cat"])
    assert img.shape == (3, 64) and txt.shape == (2, 64)
    assert torch.allclose(img.norm(dim=-1), torch.ones(3), atol=1e-5)
    assert torch.allclose(txt.norm(dim=-1), torch.ones(2), atol=1e-5)


def test_bf16_precision_on_cpu():
    clip = load_clip("mstta-tiny", "none", device="cpu", precision="bf16")
    assert clip.dtype == torch.bfloat16 and clip.encode_images(torch.randn(2, 3, 64, 64)).dtype == torch.float32


def test_local_checkpoint_round_trip(tmp_path, tiny_clip):
    path = tmp_path / "tiny.pt"
    torch.save(tiny_clip.model.state_dict(), path)
    again = load_clip("mstta-tiny", str(path), device="cpu")
    x = torch.randn(2, 3, 64, 64)
    assert torch.equal(again.encode_images(x), tiny_clip.encode_images(x))


@pytest.mark.parametrize("case", ["garbage", "other-architecture"])
def test_bad_checkpoint_is_one_line_user_error(tmp_path, tiny_clip, case):
    path = tmp_path / "bad.pt"
    if case == "garbage":
        path.write_bytes(b"definitely not a checkpoint")
    else:  # same keys, another width: a checkpoint of a different architecture
        sd = dict(tiny_clip.model.state_dict())
        sd["visual.proj"] = torch.zeros(32, 48)
        torch.save(sd, path)
    with pytest.raises(UserError) as err:
        load_clip("mstta-tiny", str(path), device="cpu")
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg and "mstta-tiny" in msg and "checkpoint" in msg


@pytest.mark.parametrize(
    "name, pretrained, precision, expected",
    [
        ("NoSuchNet", "none", None, "--model NoSuchNet"),
        ("mstta-tiny", "no-such-tag", None, "not a known tag"),
        ("mstta-tiny", "/no/such/file.pt", None, "checkpoint file not found"),
        ("mstta-tiny", "none", "fp8", "--precision fp8"),
    ],
)
def test_bad_model_arguments(name, pretrained, precision, expected):
    with pytest.raises(UserError, match=expected):
        load_clip(name, pretrained, device="cpu", precision=precision)


def test_missing_weights_offline_fail_fast(monkeypatch):
    calls = _no_network(monkeypatch)
    monkeypatch.setattr(weights, "weights_cached", lambda name, tag: False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    built = _no_model_build(monkeypatch)
    with pytest.raises(UserError) as err:
        load_clip("RN50", "openai", device="cpu")
    msg = str(err.value)
    assert calls == ["huggingface.co"] and built == []  # one probe, then no download attempt (no retries)
    assert "\n" not in msg and "RN50" in msg and "openai" in msg and "could not be downloaded" in msg
    assert weights.hub_cache_dir() in msg and "--pretrained /path/to/checkpoint" in msg


def test_hf_offline_env_skips_the_probe(monkeypatch):
    calls = _no_network(monkeypatch)
    monkeypatch.setattr(weights, "weights_cached", lambda name, tag: False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match="HF_HUB_OFFLINE"):
        load_clip("ViT-B-16", "openai", device="cpu")
    assert calls == []


@pytest.mark.parametrize("tag, quick", [("openai", True), ("laion2b_s34b_b88k", False)])
def test_quick_gelu_forced_for_openai_tags(monkeypatch, tag, quick):
    """OpenAI weights were trained with QuickGELU; open_clip's ViT-B-16 config alone would use GELU."""
    import open_clip

    seen = {}

    def fake_create(*args, **kwargs):
        seen.update(kwargs)
        raise RuntimeError("stop here")

    monkeypatch.setattr(weights, "weights_cached", lambda name, t: True)
    monkeypatch.setattr(open_clip, "create_model_and_transforms", fake_create)
    with pytest.raises(UserError, match="stop here"):
        load_clip("ViT-B-16", tag, device="cpu")
    assert seen["force_quick_gelu"] is quick


def _fake_hub_cache(root: Path, repo: str, filename: str, content: bytes) -> None:
    snap = root / f"models--{repo.replace('/', '--')}"
    (snap / "refs").mkdir(parents=True)
    (snap / "refs" / "main").write_text("abc123")
    (snap / "snapshots" / "abc123").mkdir(parents=True)
    (snap / "snapshots" / "abc123" / filename).write_bytes(content)


def test_cached_weights_load_offline_without_probing(tmp_path, monkeypatch):
    """Weights found in the HF cache are loaded in offline mode: no probe, no HTTP retries."""
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    assert not weights_cached("RN50", "openai")
    _fake_hub_cache(tmp_path, "timm/resnet50_clip.openai", "open_clip_model.safetensors", b"corrupt")
    assert weights_cached("RN50", "openai")
    calls, tried = _no_network(monkeypatch), _no_sockets(monkeypatch)
    import huggingface_hub.constants as hc

    before = hc.HF_HUB_OFFLINE
    with pytest.raises(UserError, match="RN50"):  # the fake file is not loadable, but fails without any network
        load_clip("RN50", "openai", device="cpu")
    assert calls == [] and tried == []  # no probe, and no connection attempted (no HTTP retries)
    assert hc.HF_HUB_OFFLINE == before  # offline mode is restored after the load


def test_cli_missing_weights_exit_2_no_traceback(tmp_path):
    """A real process: weights not cached while offline -> exit 2, one line naming model and tag
    (that HF_HUB_OFFLINE skips the probe is test_hf_offline_env_skips_the_probe; the timeout only stops a hang)."""
    fake = make_fake_dataset(tmp_path, "imagefolder", classes=2, per_class=1)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mstta.cli",
            "extract",
            "--dataset",
            fake.dataset,
            "--model",
            "RN50",
            "--pretrained",
            "openai",
            "--out",
            str(tmp_path / "o.npz"),
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith(
        "mstta-bench: error: weights for --model RN50 --pretrained openai could not be downloaded"
    )
    assert not (tmp_path / "o.npz").exists()


# --- text classifier -----------------------------------------------------------------------------


def test_classifier_is_mean_of_normalised_prompts(tiny_clip):
    names, templates = ["golden_retriever", "tabby cat"], ["a photo of a {}.", "art of the {}."]
    w = build_text_classifier(tiny_clip, names, templates)
    ref = []
    for n in names:
        e = tiny_clip.encode_text([t.format(n.replace("_", " ")) for t in templates])
        ref.append(torch.nn.functional.normalize(e.mean(0), dim=-1))
    assert w.shape == (2, 64) and torch.allclose(w, torch.stack(ref), atol=1e-6)


def test_classifier_disk_cache(tmp_path, tiny_clip, monkeypatch):
    names, templates = ["dog", "cat", "bird"], ["a photo of a {}."]
    first = build_text_classifier(tiny_clip, names, templates, cache_dir=tmp_path)
    files = list(tmp_path.glob("text-*.npy"))
    assert len(files) == 1

    def boom(*a, **k):
        raise AssertionError("text encoder called despite a cache hit")

    monkeypatch.setattr(type(tiny_clip), "encode_text", boom)
    assert torch.equal(build_text_classifier(tiny_clip, names, templates, cache_dir=tmp_path), first)
    monkeypatch.undo()
    build_text_classifier(tiny_clip, names, templates + ["art of the {}."], cache_dir=tmp_path)
    build_text_classifier(tiny_clip, names[::-1], templates, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("text-*.npy"))) == 3
    files[0].write_bytes(b"corrupt")
    assert torch.allclose(build_text_classifier(tiny_clip, names, templates, cache_dir=tmp_path), first)


@pytest.mark.parametrize(
    "names, templates, expected",
    [
        ([], ["a {}."], "no class names"),
        (["a", "b"], ["no placeholder"], "exactly one"),
        (["a", "b"], ["{} and {}"], "exactly one"),
        (["a", "b"], [], "no templates"),
    ],
)
def test_classifier_bad_inputs(tiny_clip, names, templates, expected):
    with pytest.raises(UserError, match=expected):
        build_text_classifier(tiny_clip, names, templates)


# --- templates -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, expected",
    [
        ("imagenet", "imagenet7"),
        ("imagenet_a", "imagenet7"),
        ("imagenet_v2", "imagenet7"),
        ("caltech101", "imagenet7"),
        ("stanford_cars", "imagenet7"),
        ("sun397", "imagenet7"),
        ("imagenet_r", "clip80"),
        ("imagenet_sketch", "clip80"),
        ("fgvc_aircraft", ["a photo of a {}, a type of aircraft."]),
        ("dtd", ["{} texture."]),
        ("eurosat", ["a centered satellite photo of {}."]),
        ("oxford_flowers", ["a photo of a {}, a type of flower."]),
        ("food101", ["a photo of {}, a type of food."]),
        ("oxford_pets", ["a photo of a {}, a type of pet."]),
        ("ucf101", ["a photo of a person doing {}."]),
    ],
)
def test_templates_per_dataset(key, expected):
    want = template_set(expected) if isinstance(expected, str) else expected
    assert templates_for(key) == want


def test_template_sets():
    i7, c80 = template_set("imagenet7"), template_set("clip80")
    assert len(i7) == 7 and i7[0] == "itap of a {}." and len(c80) == 80 == len(set(c80))
    assert templates_for("imagefolder:/x") == DEFAULT_TEMPLATES and check_templates(DEFAULT_TEMPLATES)
    assert fill("a photo of a {}.", "sea_lion") == "a photo of a sea lion."
    with pytest.raises(UserError, match="unknown template set"):
        template_set("nope")

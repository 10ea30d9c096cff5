"""Make the offline digits model and its clip (deterministic from a seed): `mstta-digits.pt`,
`digits.mp4`, `digits_labels.txt` and `digits_truth.csv` in assets/.

    python assets/make_digits.py               # train (~1-2 min on one CPU core), then write the clip
    python assets/make_digits.py --clip-only   # rewrite the clip from the existing checkpoint

The model is a real open_clip CLIP (configs/models/mstta-digits.json: a 3-layer ViT on 32x32
images in 8x8 patches, a 2-layer text transformer over CLIP's tokenizer) trained here from
scratch, contrastively, image <-> text, on scikit-learn's bundled handwritten digits
(`sklearn.datasets.load_digits`, 1,797 8x8 images): a fixed stratified split keeps a third of the
digits out of training. Each digit is drawn as the clip draws it (dark ink on light paper,
upscaled into a 384x288 frame) and preprocessed by the model's own transform; its text is a
prompt such as "a photo of the digit three." from several templates (the project's default
prompt ensemble among them). Same-class pairs in a batch count as positives of the CLIP loss, and
the logit scale is learned (CLIP's init, 1/0.07). The checkpoint is the model's state_dict in
fp16, loadable by open_clip (`--model mstta-digits`, tag `bundled`).

The clip shows held-out digits (test split only, each once) one after the other, each for
SEGMENT_FRAMES frames, scene after scene (`SCENES`): a short clean lead-in drawn exactly as the
model was trained, then two scene changes, each held steady: the camera moved back (every digit
smaller, hand-held), then the light goes (the camera still back: a grey page, a soft pencil,
sensor noise). H.264 (libx264, yuv420p, faststart) written with PyAV.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import NamedTuple

import cv2
import numpy as np
import torch

HERE = Path(__file__).resolve().parent
MODEL = "mstta-digits"
CHECKPOINT = HERE / "mstta-digits.pt"
CLASSNAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
DIGIT_TEMPLATES = [
    "a photo of the digit {}.",
    "a handwritten {}.",
    "the digit {}.",
    "a photo of the number {}.",
    "a scan of a handwritten {}.",
    "the number {}.",
    "{}",
]
TEST_FRACTION = 1 / 3  # digits never trained on: the clean test split and the clip's digits
SPLIT_SEED = 0  # the split is fixed (tests recompute it)
WIDTH, HEIGHT = 384, 288  # frame size of the clip (and of the images the model is trained on)
PAPER, INK = 236.0, 24.0  # grey levels of the page and of full ink
DIGIT_FRACTION = 0.8  # the digit's box, as a fraction of the frame height
FPS = 8
SEGMENT_FRAMES = 4  # frames each digit stays on screen (0.5 s)
LABELS_HEADER = (
    "# Classes shown in digits.mp4 (scikit-learn's handwritten digits, made by assets/make_digits.py);\n"
    "# one name per line.\n"
)


# --------------------------------------------------------------------------------------- data
def digits_split() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"train", "test"} -> (images [n, 8, 8] float32 in 0..16, labels [n] int64): the fixed split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    xtr, xte, ytr, yte = train_test_split(
        d.images.astype(np.float32),
        d.target.astype(np.int64),
        test_size=TEST_FRACTION,
        stratify=d.target,
        random_state=SPLIT_SEED,
    )
    return {"train": (xtr, ytr), "test": (xte, yte)}


def render(digit: np.ndarray, width: int = WIDTH, height: int = HEIGHT) -> np.ndarray:
    """An 8x8 digit (0..16) as a grey float32 frame [H, W]: dark ink on light paper, centred."""
    side = int(round(height * DIGIT_FRACTION))
    ink = np.zeros((height, width), np.float32)
    y, x = (height - side) // 2, (width - side) // 2
    ink[y : y + side, x : x + side] = np.clip(
        cv2.resize(digit / 16.0, (side, side), interpolation=cv2.INTER_CUBIC), 0, 1
    )
    ink = cv2.GaussianBlur(ink, (0, 0), side / 40)  # soften the 8x8 blocks into strokes
    return PAPER - (PAPER - INK) * ink


def as_rgb(frame: np.ndarray) -> np.ndarray:
    """Grey float frame -> RGB uint8 (the unshifted frame as the clip would show it)."""
    return np.repeat(np.clip(frame, 0, 255).astype(np.uint8)[..., None], 3, axis=-1)


def pixels(clip, frames: list[np.ndarray]) -> torch.Tensor:
    """RGB uint8 frames -> the model's input [n, 3, S, S] through its own open_clip transform."""
    from PIL import Image

    return torch.stack([clip.preprocess(Image.fromarray(f)) for f in frames])


# -------------------------------------------------------------------------------------- model
def templates() -> list[str]:
    """Training templates: the project's default prompt ensemble (what the demo prompts with) + digit ones."""
    from mstta.data.templates import DEFAULT_TEMPLATES

    return list(DEFAULT_TEMPLATES) + DIGIT_TEMPLATES


def zero_shot_accuracy(clip, images: torch.Tensor, labels: np.ndarray, prompt_templates: list[str]) -> float:
    """Top-1 zero-shot accuracy (%) of preprocessed images against the class prompts, Eq. (1)."""
    from mstta.features.models import encode_classes

    text = encode_classes(clip, CLASSNAMES, prompt_templates)
    feats = torch.cat([clip.encode_images(chunk) for chunk in images.split(256)])
    pred = (feats @ text.T).argmax(dim=1).cpu().numpy()
    return float((pred == labels).mean() * 100)


def _augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Mild random affine (+-10 deg, scale 0.9-1.1, shift +-2 px of 32): handwriting varies that much."""
    n = x.shape[0]
    ang = (torch.rand(n, generator=gen) * 2 - 1) * np.pi / 18
    scale = 1 + (torch.rand(n, generator=gen) * 2 - 1) * 0.1
    shift_xy = (torch.rand(n, 2, generator=gen) * 2 - 1) * 0.12
    cos, sin = torch.cos(ang) / scale, torch.sin(ang) / scale
    theta = torch.stack([torch.stack([cos, -sin, shift_xy[:, 0]], 1), torch.stack([sin, cos, shift_xy[:, 1]], 1)], 1)
    grid = torch.nn.functional.affine_grid(theta, list(x.shape), align_corners=False)
    return torch.nn.functional.grid_sample(x, grid, padding_mode="border", align_corners=False)


def _loss(img: torch.Tensor, txt: torch.Tensor, labels: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Symmetric CLIP loss where every same-class (image, prompt) pair of the batch is a positive."""
    logits = scale * img @ txt.T
    pos = labels[:, None] == labels[None, :]

    def side(lg: torch.Tensor) -> torch.Tensor:
        return -(torch.logsumexp(lg.masked_fill(~pos, -1e4), 1) - torch.logsumexp(lg, 1)).mean()

    return (side(logits) + side(logits.T)) / 2


def train(seed: int, epochs: int = 60, batch: int = 128, lr: float = 2e-3):
    """Train mstta-digits from scratch on the train split; returns the loaded ClipModel (eval mode)."""
    from mstta.data.templates import fill
    from mstta.features.models import load_clip

    torch.manual_seed(seed)
    logging.disable(logging.WARNING)  # its "RANDOM weights" warning: true, and the point here
    try:
        clip = load_clip(MODEL, "none", device="cpu")
    finally:
        logging.disable(logging.NOTSET)
    model = clip.model.train()
    xs, ys = digits_split()["train"]
    x = pixels(clip, [as_rgb(render(d)) for d in xs])
    y = torch.from_numpy(ys)
    temps = templates()
    tokens = clip.tokenizer([fill(t, c) for c in CLASSNAMES for t in temps]).view(len(CLASSNAMES), len(temps), -1)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embedding" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embedding" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": rest, "weight_decay": 0.0}], lr=lr)
    steps = epochs * ((len(x) + batch - 1) // batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=gen).split(batch):
            which = torch.randint(len(temps), (len(idx),), generator=gen)
            img = torch.nn.functional.normalize(model.encode_image(_augment(x[idx], gen)), dim=-1)
            txt = torch.nn.functional.normalize(model.encode_text(tokens[y[idx], which]), dim=-1)
            loss = _loss(img, txt, y[idx], model.logit_scale.exp())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            with torch.no_grad():
                model.logit_scale.clamp_(0, np.log(100))  # CLIP's bound on the learned scale
    model.eval()
    return clip


def save_checkpoint(model: torch.nn.Module, path: Path) -> None:
    """The state_dict in fp16 (open_clip loads it into its fp32 model), written atomically."""
    from mstta.atomic import atomic_open

    sd = {k: v.detach().half() if v.is_floating_point() else v for k, v in model.state_dict().items()}
    with atomic_open(path, "wb") as fh:
        torch.save(sd, fh)


# --------------------------------------------------------------------------------------- clip
class Scene(NamedTuple):
    """How one stretch of the clip is filmed: the camera, the paper, the pen. Every digit of a
    scene is drawn the same way (a steady shift), only the hand-held jitter moves frame to frame."""

    name: str
    digits: int  # digits shown in this scene, the same number of each class
    paper: tuple[float, float, float] = (PAPER, PAPER, PAPER)  # RGB of the page under this light
    ink: tuple[float, float, float] = (INK, INK, INK)  # RGB of the pen
    size: float = DIGIT_FRACTION  # the digit's box, as a fraction of the frame height
    offset: tuple[float, float] = (0.0, 0.0)  # the digit's centre from the frame's, in frame heights (x, y)
    angle: float = 0.0  # degrees the page is turned (counter-clockwise)
    slant: float = 0.0  # italic shear of the handwriting (x moves by slant * -y)
    stroke: float = 0.0  # pen width added, in fractions of the digit's box
    blur: float = 0.0  # lens defocus, Gaussian sigma in px (of a 288 px high frame)
    light: float = 0.0  # uneven light: the far corner this much darker (0..1)
    specks: int = 0  # dust specks on the lens (fixed for the scene)
    noise: float = 0.0  # sensor noise, sigma in grey levels (new every frame)
    jpeg: int = 0  # JPEG quality of the camera's stream (0: none)
    jitter: float = 0.0  # hand-held shake, px sigma per frame


LEAD_IN = Scene("lead-in: the training camera", digits=10)
SCENES = (
    LEAD_IN,
    # the camera moved back: every digit at 5/8 of the size the model was trained on, hand-held
    Scene("the camera moved back", digits=110, size=0.5, jitter=1.0),
    # then the light goes (the camera still back): a grey page, a soft pencil, sensor noise
    Scene(
        "the light goes",
        digits=120,
        size=0.5,
        paper=(190.0, 190.0, 180.0),
        ink=(70.0, 70.0, 68.0),
        noise=6.0,
        jitter=1.0,
    ),
)


def scene_ink(
    digit: np.ndarray, scene: Scene, dx: float = 0.0, dy: float = 0.0, width: int = WIDTH, height: int = HEIGHT
) -> np.ndarray:
    """Ink coverage 0..1 [H, W] of a digit as `scene` places it (size, offset, turn, slant, pen),
    moved by (dx, dy) px."""
    side = int(round(height * scene.size))
    pad = side // 2
    patch = np.zeros((side + 2 * pad, side + 2 * pad), np.float32)
    patch[pad : pad + side, pad : pad + side] = np.clip(
        cv2.resize(digit / 16.0, (side, side), interpolation=cv2.INTER_CUBIC), 0, 1
    )
    if scene.stroke > 0:
        r = max(1, int(round(scene.stroke * side / 2)))
        patch = cv2.dilate(patch, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * r + 1, 2 * r + 1)))
    patch = cv2.GaussianBlur(patch, (0, 0), side / 40)  # soften the 8x8 blocks into strokes
    c = patch.shape[0] / 2
    turn = cv2.getRotationMatrix2D((c, c), scene.angle, 1.0)  # 2x3
    shear = np.array([[1.0, -scene.slant, scene.slant * c], [0.0, 1.0, 0.0]])
    m = np.vstack([turn, [0, 0, 1]]) @ np.vstack([shear, [0, 0, 1]])
    cx = width / 2 + scene.offset[0] * height + dx
    cy = height / 2 + scene.offset[1] * height + dy
    m[0, 2] += cx - c
    m[1, 2] += cy - c
    return cv2.warpAffine(patch, m[:2], (width, height), flags=cv2.INTER_LINEAR, borderValue=0)


def scene_fixed(scene: Scene, rng: np.random.Generator, width: int = WIDTH, height: int = HEIGHT) -> np.ndarray:
    """What stays put through a scene: the light falloff and the dust specks, as a gain [H, W] 0..1."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    far = np.hypot(xx / width, yy / height) / np.sqrt(2)  # 0 at the top-left, 1 at the far corner
    gain = 1.0 - scene.light * far
    dust = np.zeros((height, width), np.float32)
    for _ in range(scene.specks):
        x, y = rng.uniform(0.1, 0.9) * width, rng.uniform(0.1, 0.9) * height
        cv2.circle(dust, (int(x), int(y)), int(rng.integers(2, 6)), float(rng.uniform(0.4, 0.8)), -1)
    dust = cv2.GaussianBlur(dust, (0, 0), 1.5)
    return gain * (1.0 - dust)


def draw(digit: np.ndarray, scene: Scene, fixed: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One frame of `digit` filmed in `scene`: RGB uint8 [H, W, 3]."""
    if scene == LEAD_IN:
        return as_rgb(render(digit))  # exactly the drawing the model was trained on
    dx, dy = rng.normal(0.0, scene.jitter, 2) if scene.jitter else (0.0, 0.0)
    ink = scene_ink(digit, scene, dx, dy)[..., None]
    paper, pen = np.array(scene.paper, np.float32), np.array(scene.ink, np.float32)
    out = (paper * (1.0 - ink) + pen * ink) * fixed[..., None]
    if scene.blur > 0:
        out = cv2.GaussianBlur(out, (0, 0), scene.blur * HEIGHT / 288)
    if scene.noise > 0:
        out = out + rng.normal(0.0, scene.noise, out.shape[:2])[..., None].astype(np.float32)
    out = np.clip(out, 0, 255).astype(np.uint8)
    if scene.jpeg:
        ok, buf = cv2.imencode(".jpg", out[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, scene.jpeg])
        out = cv2.imdecode(buf, cv2.IMREAD_COLOR)[..., ::-1]
    return np.ascontiguousarray(out)


def clip_digits(seed: int, scenes: tuple[Scene, ...] = SCENES) -> tuple[np.ndarray, np.ndarray]:
    """The clip's digits: distinct test-split digits, each scene the same number of each class, in a seeded order."""
    xs, ys = digits_split()["test"]
    rng = np.random.default_rng(seed)
    pool = [rng.permutation(np.flatnonzero(ys == c)) for c in range(len(CLASSNAMES))]
    used, picks = [0] * len(CLASSNAMES), []
    for scene in scenes:
        per = scene.digits // len(CLASSNAMES)
        pick = np.concatenate([pool[c][used[c] : used[c] + per] for c in range(len(CLASSNAMES))])
        used = [u + per for u in used]
        picks.append(rng.permutation(pick))
    pick = np.concatenate(picks)
    return xs[pick], ys[pick]


def scene_of_digits(scenes: tuple[Scene, ...] = SCENES) -> list[Scene]:
    """The scene each digit of the clip is filmed in, in order."""
    return [s for s in scenes for _ in range(s.digits)]


def clip_frames(seed: int, scenes: tuple[Scene, ...] = SCENES):
    """Yield (frame index, RGB uint8 frame) of the clip: each digit SEGMENT_FRAMES frames, scene after scene."""
    xs, _ = clip_digits(seed, scenes)
    rng = np.random.default_rng(seed + 1)
    fixed = {s: scene_fixed(s, rng) for s in scenes}
    for d, (digit, scene) in enumerate(zip(xs, scene_of_digits(scenes))):
        for j in range(SEGMENT_FRAMES):
            yield d * SEGMENT_FRAMES + j, draw(digit, scene, fixed[scene], rng)


def write_mp4(path: Path, frames, fps: int = FPS, crf: int = 30) -> int:
    """RGB uint8 frames -> browser-playable H.264 (yuv420p, faststart), atomically; returns the frame count."""
    import av

    from mstta.atomic import temp_path

    tmp, n = temp_path(path, ".part.mp4"), 0
    try:
        with av.open(str(tmp), "w", format="mp4", options={"movflags": "+faststart"}) as container:
            stream = container.add_stream(
                "libx264", rate=fps, options={"crf": str(crf), "preset": "slow", "threads": "1"}
            )
            stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
            for frame in frames:
                for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                    container.mux(packet)
                n += 1
            for packet in stream.encode():
                container.mux(packet)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return n


def make_clip(out_dir: Path, seed: int) -> dict:
    """Write digits.mp4, digits_labels.txt and digits_truth.csv into `out_dir`."""
    from mstta.atomic import atomic_open

    out_dir.mkdir(parents=True, exist_ok=True)
    _, labels = clip_digits(seed)
    video = out_dir / "digits.mp4"
    frames = write_mp4(video, (f for _, f in clip_frames(seed)))
    rows = [f"{s * SEGMENT_FRAMES},{(s + 1) * SEGMENT_FRAMES - 1},{CLASSNAMES[c]}" for s, c in enumerate(labels)]
    for name, text in (
        ("digits_labels.txt", LABELS_HEADER + "\n".join(CLASSNAMES) + "\n"),
        ("digits_truth.csv", "start_frame,end_frame,label\n" + "\n".join(rows) + "\n"),
    ):
        with atomic_open(out_dir / name, "w") as fh:
            fh.write(text)
    return {"video": str(video), "frames": frames, "seconds": frames / FPS, "bytes": video.stat().st_size}


# --------------------------------------------------------------------------------------- main
def report(clip, seed: int) -> dict:
    """Clean test-split zero-shot accuracy (both prompt sets) and the accuracy along the shifted clip."""
    from mstta.data.templates import DEFAULT_TEMPLATES

    xs, ys = digits_split()["test"]
    clean = pixels(clip, [as_rgb(render(d)) for d in xs])
    out = {
        "logit_scale": round(clip.logit_scale, 2),
        "clean_test_accuracy_default_prompts": round(zero_shot_accuracy(clip, clean, ys, list(DEFAULT_TEMPLATES)), 2),
        "clean_test_accuracy_digit_prompts": round(zero_shot_accuracy(clip, clean, ys, DIGIT_TEMPLATES), 2),
        "test_digits": len(ys),
    }
    _, labels = clip_digits(seed)
    scene_of = scene_of_digits()
    frames = list(clip_frames(seed))
    for k, scene in enumerate(SCENES):  # the clip's frames as drawn (before H.264), per scene
        part = [(i, f) for i, f in frames if scene_of[i // SEGMENT_FRAMES] is scene]
        y = np.array([labels[i // SEGMENT_FRAMES] for i, _ in part])
        acc = zero_shot_accuracy(clip, pixels(clip, [f for _, f in part]), y, list(DEFAULT_TEMPLATES))
        out[f"clip_scene{k + 1}_accuracy_default_prompts ({scene.name})"] = round(acc, 2)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", type=Path, default=HERE, help="where to write (default: assets/)")
    p.add_argument("--seed", type=int, default=0, help="seed of the training and of the clip (default 0)")
    p.add_argument("--epochs", type=int, default=60, help="training epochs (default 60)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads (default 1: the model is so small that more threads mostly wait on each other)",
    )
    p.add_argument("--clip-only", action="store_true", help="keep the checkpoint, rewrite only the clip files")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from mstta.features.models import load_clip

    checkpoint = args.out_dir / CHECKPOINT.name
    if args.clip_only:
        clip = load_clip(MODEL, str(checkpoint), device="cpu")
    else:
        t0 = time.perf_counter()
        clip = train(args.seed, epochs=args.epochs)
        print(f"trained {MODEL} in {time.perf_counter() - t0:.0f} s ({args.epochs} epochs, {args.threads} threads)")
        args.out_dir.mkdir(parents=True, exist_ok=True)
        save_checkpoint(clip.model, checkpoint)
        clip = load_clip(MODEL, str(checkpoint), device="cpu")  # measure what was written (fp16)
        print(f"wrote {checkpoint}: {checkpoint.stat().st_size / 1e6:.2f} MB")
    info = make_clip(args.out_dir, args.seed)
    print(
        f"wrote {info['video']}: {info['frames']} frames, {info['seconds']:.0f} s, {info['bytes'] / 1e6:.2f} MB; "
        "digits_labels.txt and digits_truth.csv beside it"
    )
    for key, value in report(clip, args.seed).items():
        print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

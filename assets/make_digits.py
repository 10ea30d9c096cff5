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

The clip shows held-out digits (test split only) one after the other, each for SEGMENT_FRAMES
frames, under a shift that strengthens over the clip (`shift`): the digit turns, blurs, loses
contrast and gets noisier. H.264 (libx264, yuv420p, faststart) written with PyAV.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import torch

HERE = Path(__file__).resolve().parent
MODEL = "mstta-digits"
CHECKPOINT = HERE / "mstta-digits.pt"
CLASSNAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
DIGIT_TEMPLATES = ["a photo of the digit {}.", "a handwritten {}.", "the digit {}.", "a photo of the number {}.",
                   "a scan of a handwritten {}.", "the number {}.", "{}"]
TEST_FRACTION = 1 / 3           # digits never trained on: the clean test split and the clip's digits
SPLIT_SEED = 0                  # the split is fixed (tests recompute it)
WIDTH, HEIGHT = 384, 288        # frame size of the clip (and of the images the model is trained on)
PAPER, INK = 236.0, 24.0        # grey levels of the page and of full ink
DIGIT_FRACTION = 0.8            # the digit's box, as a fraction of the frame height
FPS = 12
SEGMENT_FRAMES = 6              # frames each digit stays on screen (0.5 s)
CLIP_DIGITS = 80                # digits in the clip: 80 x 0.5 s = 40 s
CLEAN_LEAD = 0.1                # the first 10% of the clip is unshifted
LABELS_HEADER = ("# Classes shown in digits.mp4 (scikit-learn's handwritten digits, made by assets/make_digits.py);\n"
                 "# one name per line.\n")


# --------------------------------------------------------------------------------------- data
def digits_split() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"train", "test"} -> (images [n, 8, 8] float32 in 0..16, labels [n] int64): the fixed split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    xtr, xte, ytr, yte = train_test_split(d.images.astype(np.float32), d.target.astype(np.int64),
                                          test_size=TEST_FRACTION, stratify=d.target, random_state=SPLIT_SEED)
    return {"train": (xtr, ytr), "test": (xte, yte)}


def render(digit: np.ndarray, width: int = WIDTH, height: int = HEIGHT) -> np.ndarray:
    """An 8x8 digit (0..16) as a grey float32 frame [H, W]: dark ink on light paper, centred."""
    side = int(round(height * DIGIT_FRACTION))
    ink = np.zeros((height, width), np.float32)
    y, x = (height - side) // 2, (width - side) // 2
    ink[y:y + side, x:x + side] = np.clip(cv2.resize(digit / 16.0, (side, side), interpolation=cv2.INTER_CUBIC), 0, 1)
    ink = cv2.GaussianBlur(ink, (0, 0), side / 40)          # soften the 8x8 blocks into strokes
    return PAPER - (PAPER - INK) * ink


def shift(frame: np.ndarray, strength: float, angle: float, rng: np.random.Generator) -> np.ndarray:
    """The clip's distribution shift at `strength` 0..1: rotation by `angle` degrees, blur, lower
    contrast, coarse sensor noise; grey float32 [H, W] in, RGB uint8 [H, W, 3] out."""
    h, w = frame.shape
    out = frame
    if angle:
        m = cv2.getRotationMatrix2D((w / 2, h / 2), angle, 1.0)
        out = cv2.warpAffine(out, m, (w, h), flags=cv2.INTER_LINEAR, borderValue=PAPER)
    sigma = 9.0 * strength * h / 288
    if sigma > 0.3:
        out = cv2.GaussianBlur(out, (0, 0), sigma)
    mid = (PAPER + INK) / 2
    out = mid + (out - mid) * (1.0 - 0.6 * strength)
    grain = rng.normal(0.0, 1.0, (h // 6, w // 6)).astype(np.float32)   # noise in 6x6 grains
    out = out + 70.0 * strength * cv2.resize(grain, (w, h), interpolation=cv2.INTER_LINEAR)
    grey = np.clip(out, 0, 255).astype(np.uint8)
    return np.repeat(grey[..., None], 3, axis=-1)


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
    from mstta.templates import DEFAULT_TEMPLATES

    return list(DEFAULT_TEMPLATES) + DIGIT_TEMPLATES


def zero_shot_accuracy(clip, images: torch.Tensor, labels: np.ndarray, prompt_templates: list[str]) -> float:
    """Top-1 zero-shot accuracy (%) of preprocessed images against the class prompts, Eq. (1)."""
    from mstta.models import encode_classes

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
    from mstta.models import load_clip
    from mstta.templates import fill

    torch.manual_seed(seed)
    logging.disable(logging.WARNING)        # its "RANDOM weights" warning: true, and the point here
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
                model.logit_scale.clamp_(0, np.log(100))       # CLIP's bound on the learned scale
    model.eval()
    return clip


def save_checkpoint(model: torch.nn.Module, path: Path) -> None:
    """The state_dict in fp16 (open_clip loads it into its fp32 model), written atomically."""
    from mstta.atomic import atomic_open

    sd = {k: v.detach().half() if v.is_floating_point() else v for k, v in model.state_dict().items()}
    with atomic_open(path, "wb") as fh:
        torch.save(sd, fh)


# --------------------------------------------------------------------------------------- clip
MAX_ANGLE = 40.0                # degrees of turn at full strength (each digit's sign and size drawn)


def strength_at(frame: int, total: int) -> float:
    """Shift strength 0..1 of a frame: 0 for the first CLEAN_LEAD of the clip, then rising linearly to 1."""
    t = frame / max(total - 1, 1)
    return float(np.clip((t - CLEAN_LEAD) / (1.0 - CLEAN_LEAD), 0.0, 1.0))


def clip_digits(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The clip's digits: CLIP_DIGITS test-split digits, the same number of each class, in a seeded order."""
    xs, ys = digits_split()["test"]
    rng = np.random.default_rng(seed)
    per = CLIP_DIGITS // len(CLASSNAMES)
    pick = np.concatenate([rng.choice(np.flatnonzero(ys == c), per, replace=False) for c in range(len(CLASSNAMES))])
    pick = rng.permutation(pick)
    return xs[pick], ys[pick]


def clip_frames(seed: int):
    """Yield (frame index, RGB uint8 frame) of the clip, and set up its truth: see `make_clip`."""
    xs, _ = clip_digits(seed)
    rng = np.random.default_rng(seed + 1)
    total = len(xs) * SEGMENT_FRAMES
    for s, digit in enumerate(xs):
        clean = render(digit)
        mid = strength_at(s * SEGMENT_FRAMES + SEGMENT_FRAMES // 2, total)
        angle = rng.uniform(-1.0, 1.0) * MAX_ANGLE * mid
        for j in range(SEGMENT_FRAMES):
            i = s * SEGMENT_FRAMES + j
            yield i, shift(clean, strength_at(i, total), angle, rng)


def write_mp4(path: Path, frames, fps: int = FPS, crf: int = 30) -> int:
    """RGB uint8 frames -> browser-playable H.264 (yuv420p, faststart), atomically; returns the frame count."""
    import av

    from mstta.atomic import temp_path

    tmp, n = temp_path(path, ".part.mp4"), 0
    try:
        with av.open(str(tmp), "w", format="mp4", options={"movflags": "+faststart"}) as container:
            stream = container.add_stream("libx264", rate=fps, options={"crf": str(crf), "preset": "slow",
                                                                        "threads": "1"})
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
    for name, text in (("digits_labels.txt", LABELS_HEADER + "\n".join(CLASSNAMES) + "\n"),
                       ("digits_truth.csv", "start_frame,end_frame,label\n" + "\n".join(rows) + "\n")):
        with atomic_open(out_dir / name, "w") as fh:
            fh.write(text)
    return {"video": str(video), "frames": frames, "seconds": frames / FPS, "bytes": video.stat().st_size}


# --------------------------------------------------------------------------------------- main
def report(clip, seed: int) -> dict:
    """Clean test-split zero-shot accuracy (both prompt sets) and the accuracy along the shifted clip."""
    from mstta.templates import DEFAULT_TEMPLATES

    xs, ys = digits_split()["test"]
    clean = pixels(clip, [as_rgb(render(d)) for d in xs])
    out = {"logit_scale": round(clip.logit_scale, 2),
           "clean_test_accuracy_default_prompts": round(zero_shot_accuracy(clip, clean, ys, list(DEFAULT_TEMPLATES)), 2),
           "clean_test_accuracy_digit_prompts": round(zero_shot_accuracy(clip, clean, ys, DIGIT_TEMPLATES), 2),
           "test_digits": len(ys)}
    _, labels = clip_digits(seed)
    frames = list(clip_frames(seed))
    quarter = len(frames) // 4
    for q in range(4):                 # the clip's frames as drawn (before H.264), per quarter
        part = frames[q * quarter:(q + 1) * quarter]
        y = np.array([labels[i // SEGMENT_FRAMES] for i, _ in part])
        acc = zero_shot_accuracy(clip, pixels(clip, [f for _, f in part]), y, list(DEFAULT_TEMPLATES))
        out[f"clip_quarter{q + 1}_accuracy_default_prompts"] = round(acc, 2)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", type=Path, default=HERE, help="where to write (default: assets/)")
    p.add_argument("--seed", type=int, default=0, help="seed of the training and of the clip (default 0)")
    p.add_argument("--epochs", type=int, default=60, help="training epochs (default 60)")
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads (default 1: the model is so small that more threads mostly wait on each other)")
    p.add_argument("--clip-only", action="store_true", help="keep the checkpoint, rewrite only the clip files")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from mstta.models import load_clip

    checkpoint = args.out_dir / CHECKPOINT.name
    if args.clip_only:
        clip = load_clip(MODEL, str(checkpoint), device="cpu")
    else:
        t0 = time.perf_counter()
        clip = train(args.seed, epochs=args.epochs)
        print(f"trained {MODEL} in {time.perf_counter() - t0:.0f} s ({args.epochs} epochs, {args.threads} threads)")
        args.out_dir.mkdir(parents=True, exist_ok=True)
        save_checkpoint(clip.model, checkpoint)
        clip = load_clip(MODEL, str(checkpoint), device="cpu")      # measure what was written (fp16)
        print(f"wrote {checkpoint}: {checkpoint.stat().st_size / 1e6:.2f} MB")
    info = make_clip(args.out_dir, args.seed)
    print(f"wrote {info['video']}: {info['frames']} frames, {info['seconds']:.0f} s, {info['bytes'] / 1e6:.2f} MB; "
          "digits_labels.txt and digits_truth.csv beside it")
    for key, value in report(clip, args.seed).items():
        print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

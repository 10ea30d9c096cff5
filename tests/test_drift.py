"""The replay's detector scan (`forget.stream_cuts` by `drift_scan.segment_cut`: the statistic batched, the
CUSUM as a scan) finds exactly the online engine's cuts; its guard hands a segment to the engine's own
step where the batched sum comes near the threshold."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from synthetic import as_tensors, make_stream

from mstta import Engine, EngineConfig
from mstta.engine import drift_scan, forget
from mstta.engine.drift import Drift, detect_input, detect_projection, drift_step_host
from mstta.engine.drift_scan import (
    DETECT_ROWS,
    EMA_BLOCK,
    FIRST_ROWS,
    SCAN_ROWS,
    cusum_windows,
    detect_rows,
    ema_rows,
    exact_cut,
    first_rows,
    segment_cut,
)
from mstta.engine.forget import ForgetConfig, stream_cuts
from mstta.engine.graphs import OpCount
from mstta.threads import intra_op_threads

FAST = dict(detect_rate=0.2, detect_slack=0.2, detect_threshold=2.0, detect_warmup=60)


def gpu_windows(mp) -> None:
    """The scan's windows as a GPU takes them (every one SCAN_ROWS: `first_rows`), on this CPU."""
    mp.setattr(drift_scan, "first_rows", lambda device: SCAN_ROWS)


@pytest.fixture(params=["cpu", "gpu"])
def windows(request, monkeypatch):
    """The scan's windows as a CPU runs them (the first FIRST_ROWS, doubling) and as a GPU does."""
    if request.param == "gpu":
        gpu_windows(monkeypatch)
    return request.param


def scene_stream(n, cuts, dim, seed, shift=0.5, width=None):
    """[n, 1, width or dim] features whose scene moves by `shift` along a new direction at each cut;
    `width`: the stream lifted to that many dims by a seeded orthonormal map plus noise of norm 0.5."""
    f, _, _ = as_tensors(make_stream(n=n, classes=10, dim=dim, seed=seed, noise=1.5))
    g = torch.Generator().manual_seed(seed)
    for a in cuts:
        f[a:] = F.normalize(f[a:] + shift * F.normalize(torch.randn(dim, generator=g), dim=0), dim=-1)
    if width is not None:
        q, _ = torch.linalg.qr(torch.randn(width, dim, generator=g))
        f = F.normalize(f @ q.T + 0.5 / width**0.5 * torch.randn(n, width, generator=g), dim=-1)
    return f.unsqueeze(1)


def online_cuts(feats, fg):
    """The cuts `Engine.step` reports over feats [N, 1, d] (TDA over 3 classes, its forget section fg)."""
    text = F.normalize(torch.randn(3, feats.shape[-1], generator=torch.Generator().manual_seed(0)), dim=-1)
    engine = Engine(text, "tda", EngineConfig(forget=fg))
    return [engine.step(x).cut for x in feats]


@pytest.mark.parametrize(
    "seed,dim,width,keys,cuts",
    [
        (3, 64, None, {}, (300, 650, 900)),
        (8, 64, None, FAST, (250, 500, 800)),
        (5, 64, 512, {}, (300, 700)),
        (6, 64, None, dict(rule="periodic", every=400, **FAST), (250, 700, 900)),
    ],
)
def test_the_scan_finds_the_engines_cuts(seed, dim, width, keys, cuts, windows):
    """Generated scene streams (d = 64; lifted to 512), with and without periodic resets, in either
    device's windows."""
    feats = scene_stream(1100, cuts, dim, seed, width=width)
    fg = ForgetConfig(detect=True, **keys)
    want = online_cuts(feats, fg)
    assert stream_cuts(feats, fg).tolist() == want and sum(want) >= len(cuts)


def test_a_cut_on_the_first_sample_after_the_warm_up_and_then_again(windows):
    """The scene moves at the warm-up's last sample: the first sample that may cut does, and the detector
    starts over from the next one (a second cut once its new reference is complete)."""
    fg = ForgetConfig(detect=True, detect_warmup=40, detect_threshold=0.5, detect_slack=0.0, detect_rate=0.5)
    feats = scene_stream(200, (40, 120), 32, 2, shift=2.0)
    want = online_cuts(feats, fg)
    assert want[40] and not any(want[:40]) and sum(want) >= 2
    assert stream_cuts(feats, fg).tolist() == want


def test_a_gpu_scans_in_full_windows_a_cpu_from_small_ones():
    """On a GPU each op costs its launch whatever its rows, so its scan takes SCAN_ROWS rows at a time
    from the warm-up on: ceil((n - W) / SCAN_ROWS) windows; a CPU's first is FIRST_ROWS, then doubling."""
    assert first_rows(torch.device("cuda")) == first_rows(torch.device("meta")) == SCAN_ROWS
    assert first_rows(torch.device("cpu")) == FIRST_ROWS < SCAN_ROWS
    x = scene_stream(150 + 2 * SCAN_ROWS + 5, (), 64, 2)[:, 0]
    u, fg = detect_rows(x), ForgetConfig(detect=True)
    cpu = [len(s) for _, s, _ in cusum_windows(u, fg)]
    assert cpu[:2] == [FIRST_ROWS, 2 * FIRST_ROWS] and sum(cpu) == len(x) - 150
    with pytest.MonkeyPatch.context() as mp:
        gpu_windows(mp)
        gpu = [len(s) for _, s, _ in cusum_windows(u, fg)]
    assert gpu == [SCAN_ROWS, SCAN_ROWS, 5]


def test_a_gpus_scan_runs_as_many_ops_for_any_length_up_to_a_window(monkeypatch):
    """On a GPU the replay's cost is about its op count (docs/engine.md, "The replay's ops"): the scan of a
    cut-free segment up to SCAN_ROWS rows past the warm-up (its features read in one block) runs the
    same ops whatever its length, where a CPU's doubling windows add ops as it grows."""

    def ops(n):
        x = scene_stream(n, (), 64, 3, width=512)
        stream_cuts(x, fg)  # the scan's constants, built once
        with OpCount() as count:
            assert not stream_cuts(x, fg).any()
        return sum(count.ops.values())

    fg = ForgetConfig(detect=True)
    cpu = [ops(n) for n in (300, 1200, 3000)]
    gpu_windows(monkeypatch)
    gpu = [ops(n) for n in (300, 1200, 3000)]
    assert gpu[0] == gpu[1] == gpu[2] < 60 and cpu[0] < cpu[1] < cpu[2] and gpu[0] <= cpu[0]


def test_a_stream_shorter_than_the_warm_up_and_an_empty_one_have_no_cut():
    fg = ForgetConfig(detect=True, detect_threshold=0.01, detect_slack=0.0)
    feats = scene_stream(150, (10,), 16, 1, shift=3.0)  # W = 150: never past the reference
    assert online_cuts(feats, fg) == [False] * 150 and not stream_cuts(feats, fg).any()
    assert stream_cuts(torch.zeros(0, 1, 16), fg).shape == (0,)
    assert segment_cut(feats[:150, 0], detect_rows(feats[:150, 0]), fg) == (None, False)


def test_the_guard_steps_a_segment_whose_sum_touches_the_threshold(windows):
    """The threshold set to a value the engine's CUSUM reaches: the engine never cuts (acc > threshold
    is strict), the batched sum may land a rounding error above it; the scan hands the segment to the
    engine's step (and says so), and the cuts stay the engine's."""
    x = scene_stream(700, (), 64, 4)[:, 0]
    fg = ForgetConfig(detect=True, detect_slack=0.5)
    d, accs = Drift.empty(1, 64, "cpu", fg), []
    for t in range(len(x)):  # the engine's step on a CPU
        assert not drift_step_host(d, x[t : t + 1], fg)[0]
        accs.append(float(d.acc[0]))
    top = ForgetConfig(detect=True, detect_slack=0.5, detect_threshold=max(accs))
    assert top.detect_threshold > 0 and exact_cut(x, top) is None
    assert segment_cut(x, detect_rows(x), top) == (None, True)
    assert not stream_cuts(x.unsqueeze(1), top).any()
    below = ForgetConfig(detect=True, detect_slack=0.5, detect_threshold=max(accs) * (1 - 1e-6))
    assert segment_cut(x, detect_rows(x), below) == (exact_cut(x, below), False) and exact_cut(x, below) is not None


def test_the_guard_off_and_always_on_agree():
    """guard = 0 (the scan alone) and guard = inf (the engine's step on every segment) give the same cut."""
    feats = scene_stream(900, (400,), 64, 9)
    x, fg = feats[:, 0], ForgetConfig(detect=True)
    u = detect_rows(x)
    scan, stepped = segment_cut(x, u, fg, guard=0.0), segment_cut(x, u, fg, guard=np.inf)
    assert scan[0] == stepped[0] is not None and 400 <= scan[0] < 430 and stepped[1] and not scan[1]


def test_the_blocked_ema_equals_the_recursion_at_any_length_and_rate():
    """`ema_rows` (Toeplitz blocks, its constants built once per rate) equals e_t = (1 - a) e_{t-1} + a u_t
    row by row, for lengths around the block and up to SCAN_ROWS, rates taking turns (one rate's constants
    never serve another)."""
    g = torch.Generator().manual_seed(3)
    u, prev = (
        torch.randn(SCAN_ROWS, 5, generator=g, dtype=torch.float64),
        torch.randn(5, generator=g, dtype=torch.float64),
    )
    want = {}
    for a in (0.1, 0.7):
        e, rows = prev.numpy(), []
        for row in u.numpy():
            e = (1 - a) * e + a * row
            rows.append(e)
        want[a] = torch.from_numpy(np.stack(rows))
    for m in (1, EMA_BLOCK - 1, EMA_BLOCK, EMA_BLOCK + 1, 150, SCAN_ROWS):
        for a in (0.1, 0.7, 0.1):
            torch.testing.assert_close(ema_rows(prev, u[:m], a), want[a][:m], rtol=1e-12, atol=1e-14)


def test_the_scan_reads_the_features_into_float64_a_block_at_a_time(monkeypatch):
    """`detect_rows` converts at most DETECT_ROWS features at once (a bounded float64 copy on any stream)
    and gives each row its `detect_input` row."""
    x = scene_stream(2 * DETECT_ROWS + 7, (), 64, 1, width=512)[:, 0]
    sizes, rows = [], drift_scan.block_rows
    monkeypatch.setattr(drift_scan, "block_rows", lambda f, *a: sizes.append(len(f)) or rows(f, *a))
    with intra_op_threads(1):  # as `stream_cuts` runs it
        u = detect_rows(x)
    assert max(sizes) <= DETECT_ROWS and sum(sizes) == len(x) and u.dtype == torch.float64
    proj = detect_projection(512, x.device)
    torch.testing.assert_close(
        u, torch.cat([detect_input(x[t : t + 1], proj) for t in range(len(x))]), rtol=1e-13, atol=1e-15
    )


def test_the_scan_runs_on_one_intra_op_thread(monkeypatch):
    """The scan's small float64 ops take one intra-op thread on the CPU (a team of threads waits at every
    op's barrier, and on a busy machine for a preempted thread); the caller's count is restored after."""
    seen, cut = [], drift_scan.segment_cut
    monkeypatch.setattr(forget, "segment_cut", lambda *a, **k: seen.append(torch.get_num_threads()) or cut(*a, **k))
    feats = scene_stream(400, (250,), 64, 8)
    with intra_op_threads(2):
        got = stream_cuts(feats, ForgetConfig(detect=True, **FAST))
        assert torch.get_num_threads() == 2
    assert seen and set(seen) == {1} and got.tolist() == online_cuts(feats, ForgetConfig(detect=True, **FAST))


def test_a_reference_longer_than_a_window_gives_the_steps_cut(windows):
    """W = SCAN_ROWS + 76: the reference's sums and its EMA run over two windows; the scan's cut is the
    step's (`exact_cut`), found by the scan itself."""
    fg = ForgetConfig(detect=True, detect_warmup=SCAN_ROWS + 76)
    x = scene_stream(SCAN_ROWS + 400, (SCAN_ROWS + 200,), 32, 5, shift=1.0)[:, 0]
    with intra_op_threads(1):
        found = segment_cut(x, detect_rows(x), fg)
    assert found == (exact_cut(x, fg), False) and SCAN_ROWS + 200 <= found[0] < SCAN_ROWS + 260


def test_the_scan_outside_inference_mode_and_on_features_that_require_grad():
    """The scan's cached constants, first built in inference mode (as `replay` runs it), serve a call
    outside it, on features that require grad, with the same cuts."""
    feats, fg = scene_stream(600, (300,), 64, 8), ForgetConfig(detect=True, **FAST)
    drift_scan._ema_terms.cache_clear()  # built below, in inference mode
    with torch.inference_mode():
        want = stream_cuts(feats, fg)
    got = stream_cuts(feats.clone().requires_grad_(True), fg)
    assert torch.equal(got, want) and want.any() and not got.is_inference()

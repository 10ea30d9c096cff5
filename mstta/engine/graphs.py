"""The streams' step captured once per input shape as a CUDA graph and replayed per step.

The graph runs the static-shape step (the whole ring buffer, its empty rows masked by the bank's
bias; every stream, the skipped ones' writes masked), so it reads and writes the same tensors on
every replay; outputs are copied out of its buffers.
"""

from __future__ import annotations

import collections
import logging

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

log = logging.getLogger(__name__)

GRAPH_WARMUP = 3  # eager steps on a side stream before a CUDA graph is captured


def static_step(streams, x: torch.Tensor, ok: torch.Tensor | None):
    """The step a graph captures, run directly (any device): every bank row searched, the empty ones masked."""
    return streams._step(x, ok, (streams.bank.rows.shape[1] if streams.bank is not None else 0, True))


def captured_step(streams, x: torch.Tensor, ok: torch.Tensor | None = None):
    """`Streams.run`'s step under a CUDA graph, on any device (set `streams.step_as_graph(True)` first):
    the host-known resets before it, the step a graph captures, the host's counts advanced."""
    streams.before_graph()
    with torch.inference_mode():
        out = static_step(streams, x, ok)
    streams.seen += 1 if ok is None else ok.cpu().numpy()
    streams.runs += 1
    return out


def step_ops(streams, x: torch.Tensor, ok: torch.Tensor | None = None) -> collections.Counter:
    """The ops the captured step runs, by name: `static_step` once (the state steps, as at a replay)
    under a dispatch mode that counts every op but a view (an output on an input's storage, not
    written in place), so each count is about one kernel of the graph on a GPU."""
    with torch.inference_mode(), OpCount() as count:
        static_step(streams, x, ok)
    return count.ops


class OpCount(TorchDispatchMode):
    """Counts the ops run in this thread while entered, by name in `ops`: every op but a view (an output
    on an input's storage, not written in place), so each count is about one kernel on a GPU."""

    def __init__(self):
        super().__init__()
        self.ops: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        held = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        made = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        if func._schema.is_mutable or not made or any(t.untyped_storage().data_ptr() not in held for t in made):
            self.ops[func.overloadpacket.__name__] += 1
        return out


def run(streams, x: torch.Tensor, ok: torch.Tensor | None):
    """Replay (capturing first if needed) the graph of x's shape; falls back to the eager step
    when an automatic capture fails (logged), re-raises when the graph was required."""
    key = (x.shape[1], ok is None)
    g = streams.graphs.get(key)
    if g is None:
        try:
            g = streams.graphs[key] = _capture(streams, x, ok)
        except RuntimeError as exc:
            if streams._graph_required:
                raise
            log.warning("CUDA graph capture failed (%s); the engine runs eagerly", exc)
            streams.cuda_graph = False
            return static_step(streams, x, ok)
    static_x, static_ok, graph, static_out = g
    static_x.copy_(x)
    if ok is not None:
        static_ok.copy_(ok)
    graph.replay()
    return tuple(t.clone() for t in static_out)


def _capture(streams, x: torch.Tensor, ok: torch.Tensor | None):
    saved = streams.state_dict()
    try:
        return _record(streams, x, ok, saved)
    except BaseException:
        streams._restore(saved)
        raise


def _record(streams, x: torch.Tensor, ok: torch.Tensor | None, saved):
    static_x = x.clone()
    static_ok = None if ok is None else ok.clone()
    dev = streams.device
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        for _ in range(GRAPH_WARMUP):
            static_step(streams, static_x, static_ok)
    torch.cuda.current_stream(dev).wait_stream(side)
    streams._restore(saved)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = static_step(streams, static_x, static_ok)
    streams._restore(saved)  # capture records the kernels without running them; keep state exact
    return static_x, static_ok, graph, static_out

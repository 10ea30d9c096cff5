"""The stream orders of `mstta-bench streams` (docs/streams.md): pure functions of label arrays and
a seed, each returning the order in which a stream visits the samples and its true segments.

Scene streams pool several domains (the same classes under different shifts; domain j's sample i
is pooled index `offsets[j] + i`): each domain's samples are shuffled once by the seed and every
segment takes the next unused ones of its domain, so a domain that comes back (A -> B -> A) shows
new samples. Within a segment the order is i.i.d. Label-correlated orders stay inside one domain:
StatA's online sampler (MaxZanella/StatA sampler.py:109-134, `OnlineSampler.create_indices`, a
Dirichlet(gamma) split of each class over the slots; `create_indices_class` for "separate"), one
sample at a time, so its slots = min(#batches, #classes) = #classes (main.py:147-149).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import UserError

SCENES = ("cut", "return", "chain")  # A->B, A->B->A, A->B->C->D
GAMMAS = (0.1, 0.01, 0.001)  # StatA's low / medium / high correlation (README)
ORDERS = ("iid", *SCENES, *(f"dirichlet-{g}" for g in GAMMAS), "separate")
SCENE_DOMAINS = {"cut": (0, 1), "return": (0, 1, 0), "chain": (0, 1, 2, 3)}  # domain of each segment


@dataclass(frozen=True)
class Stream:
    """One stream: `order` [N] pooled sample indices in stream order, `starts` the first step of
    every segment (starts[0] = 0; the true cuts are starts[1:]), `domains` each segment's domain."""

    kind: str
    order: np.ndarray
    starts: tuple[int, ...]
    domains: tuple[int, ...]

    @property
    def cuts(self) -> tuple[int, ...]:
        return self.starts[1:]

    def segments(self) -> list[tuple[int, int]]:
        """[start, end) of every segment."""
        ends = (*self.starts[1:], len(self.order))
        return list(zip(self.starts, ends))


def rng_of(seed: int, *salt: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), *salt])


def iid(n: int, seed: int) -> np.ndarray:
    """A uniformly random order of n samples (TTA-VLM's shuffled stream)."""
    return rng_of(seed, 0).permutation(n)


def dirichlet_slots(labels: np.ndarray, gamma: float, rng: np.random.Generator, slots: int | None = None):
    """StatA `OnlineSampler.create_indices` (sampler.py:109-134): per class (sorted) a Dirichlet([gamma] *
    slots) share splits its samples, in stored order, into the slots (`np.split` at floor(cumsum * n));
    each slot is then permuted. Returns the slots' index arrays in slot order."""
    classes = np.unique(labels)
    slots = len(classes) if slots is None else slots
    share = rng.dirichlet([gamma] * slots, len(classes))
    buckets: list[list[int]] = [[] for _ in range(slots)]
    for row, c in enumerate(classes):
        idx = np.flatnonzero(labels == c)
        cuts = (np.cumsum(share[row])[:-1] * len(idx)).astype(int)
        for s, part in enumerate(np.split(idx, cuts)):
            buckets[s].extend(part.tolist())
    return [np.asarray(b, dtype=np.int64)[rng.permutation(len(b))] for b in buckets]


def dirichlet(labels: np.ndarray, gamma: float, seed: int, slots: int | None = None) -> np.ndarray:
    """StatA's label-correlated online order (gamma 0.1 / 0.01 / 0.001: low / medium / high)."""
    if not (isinstance(gamma, float) and gamma > 0):
        raise UserError(f"dirichlet gamma {gamma}: expected a positive number")
    return np.concatenate(dirichlet_slots(np.asarray(labels), gamma, rng_of(seed, 1), slots))


def separate(labels: np.ndarray, seed: int) -> np.ndarray:
    """StatA `create_indices_class` (gamma = -1): the classes in a random order, one after another,
    each class's samples shuffled."""
    labels = np.asarray(labels)
    rng = rng_of(seed, 2)
    return np.concatenate([rng.permutation(np.flatnonzero(labels == c)) for c in rng.permutation(np.unique(labels))])


def scene(sizes: list[int], domains: tuple[int, ...], lead: int, segment: int, seed: int, kind: str) -> Stream:
    """Segments over pooled domains (`sizes[j]` samples in domain j): the first takes `lead` samples
    of its domain, every later one `segment` (each capped by what its domain has left; a segment
    with nothing left is an error), each the next unused samples of its domain's seeded shuffle."""
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    shuffled = [rng_of(seed, 3, j).permutation(n) for j, n in enumerate(sizes)]
    used = [0] * len(sizes)
    parts, starts, at = [], [], 0
    for i, d in enumerate(domains):
        if d >= len(sizes):
            raise UserError(f"stream '{kind}' needs {max(domains) + 1} domains; only {len(sizes)} given")
        take = min(lead if i == 0 else segment, sizes[d] - used[d])
        if take <= 0:
            raise UserError(f"stream '{kind}': domain {d} has no samples left for segment {i + 1}; lower --lead")
        parts.append(offsets[d] + shuffled[d][used[d] : used[d] + take])
        used[d] += take
        starts.append(at)
        at += take
    return Stream(kind, np.concatenate(parts), tuple(starts), tuple(domains))


def build(kind: str, domain_labels: list[np.ndarray], seed: int, lead: int, segment: int, domain: int = 0) -> Stream:
    """The stream `kind` (one of ORDERS): scene kinds pool every domain; the others order domain
    `domain` alone (pooled indices, one segment)."""
    sizes = [len(x) for x in domain_labels]
    if kind in SCENES:
        return scene(sizes, SCENE_DOMAINS[kind], lead, segment, seed, kind)
    labels = np.asarray(domain_labels[domain])
    offset = int(sum(sizes[:domain]))
    if kind == "iid":
        order = iid(len(labels), seed)
    elif kind == "separate":
        order = separate(labels, seed)
    elif kind.startswith("dirichlet-"):
        order = dirichlet(labels, float(kind.split("-", 1)[1]), seed)
    else:
        raise UserError(f"unknown stream '{kind}'; choose from: {', '.join(ORDERS)}")
    return Stream(kind, offset + order, (0,), (domain,))

"""An independent per-sample reference of DMN-ZS, written from the official code (YBZh/DMN @ c6c218c7,
`dmn_main.py`, `clip/fix_clip.py`) as plain float64 NumPy loops; imports nothing from `mstta`.

Copied as coded: the full memory [C, M, d] with empty slots found by `feature.sum(-1) == 0`, every
slot read (51 keys per class), the double normalisation of the readout, the epsilons 1e-6 / 1e-8,
update before readout. Where the official code leaves a choice open this reference takes the one
documented in docs/methods/dmn.md: at least one confident view (int(0.1 V) = 0 for V < 10), stable
sorts (ties to the lower index), argmax = the first maximum.
The `+ms` rows: an independent kNN mean shift (Eq. 9-11; ties to the older feature, FIFO bank).
"""

from __future__ import annotations

import numpy as np


def unit(v):
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


class ReferenceDMN:
    """One stream. `step(views [V, d])` -> (scores, clip, p_text, p_mem)."""

    def __init__(
        self,
        text,
        memory_size=50,
        selection_p=0.1,
        beta=5.5,
        weight=1.0,
        logit_scale=100.0,
        replace="official",
        mean_shift=False,
        k=2,
        alpha=0.8,
        bank_size=None,
    ):
        self.text = unit(np.asarray(text, dtype=np.float64))  # fix_clip.py get_text_features: renormalised
        C, d = self.text.shape
        self.M, self.p, self.beta, self.w, self.s = memory_size, selection_p, beta, weight, logit_scale
        self.replace = replace
        # fix_clip.py lines 395-398: image_feature_memory, image_entropy_mem, image_feature_count
        self.mem = np.zeros((C, memory_size, d))
        self.ent = np.zeros((C, memory_size))
        self.count = np.zeros(C, dtype=np.int64)
        self.ms, self.k, self.alpha, self.bank_size = mean_shift, k, alpha, bank_size
        self.bank = []  # raw features of earlier samples, oldest first

    def shift(self, f):
        """z = normalise((1 - a) f + a/m sum of the m = min(k, |bank|) most cosine-similar earlier raw
        features); ties: the older; identity before any earlier sample or at a = 0."""
        if not self.ms or not self.bank or self.alpha == 0:
            return f
        sims = [float(f @ (b / np.linalg.norm(b))) for b in self.bank]
        near = sorted(range(len(self.bank)), key=lambda j: (-sims[j], j))[: self.k]
        total = sum(self.bank[j] for j in near)
        return unit((1 - self.alpha) * f + self.alpha / len(near) * total)

    def step(self, views):
        x = np.asarray(views, dtype=np.float64)
        # dmn_main.py get_text_prediction: softmax(s * image_features_global @ text_feat.T), every view
        logits = self.s * x @ self.text.T
        img_text = softmax(logits)
        # select_confident_samples (line ~108): H = -(p log(p + 1e-6)).sum(1); argsort ascending; int(V * top)
        h = -(img_text * np.log(img_text + 1e-6)).sum(1)
        n = max(1, int(len(x) * self.p))
        keep = np.argsort(h, kind="stable")[:n]
        mean_prob = img_text[keep].mean(0)  # dmnet.init_pred
        q_raw = x[0]
        q = self.shift(q_raw)
        self._update(mean_prob, q)
        p_mem = self._image_pred(q)
        p_text = img_text[0]  # img_text[:1]
        if self.ms:
            self.bank.append(q_raw)
            if self.bank_size is not None and len(self.bank) > self.bank_size:
                self.bank.pop(0)
        # direct_inference: pred_vanilla * beta1 + pred_global * beta2, beta1 = 1
        return p_text + self.w * p_mem, logits[0], p_text, p_mem

    def _update(self, mean_prob, feat):
        """DualMem.update_memory_bank (lines 156-180)."""
        label = int(np.argmax(mean_prob))  # mean_prob.max(0) -> first maximum
        ent = float(-(mean_prob * np.log(mean_prob + 1e-8)).sum())
        if self.count[label] == self.M:
            if self.replace == "tta-vlm":  # tta-vlm online_method/dmn.py MemoryBank.update
                slot = int(np.argsort(-self.ent[label], kind="stable")[0])
            elif (ent < self.ent[label]).sum() == 0:
                return  # "the entropy of current test image is very large"
            else:
                slot = int(np.argsort(self.ent[label], kind="stable")[-1])  # max entropy, ascending sort
            self.mem[label, slot] = feat
            self.ent[label, slot] = ent
        else:
            self.mem[label, self.count[label]] = feat
            self.ent[label, self.count[label]] = ent
            self.count[label] += 1

    def _image_pred(self, img_feat):
        """DualMem.get_image_pred, "similarity_weighted", position 'all' with zero biases (lines 182-248)."""
        memorized = np.concatenate([self.mem, self.text[:, None, :]], axis=1)  # [C, M + 1, d]
        empty = memorized.sum(-1) == 0
        with np.errstate(invalid="ignore", divide="ignore"):
            K = memorized / np.linalg.norm(memorized, axis=-1, keepdims=True)
        K[empty] = 0  # "reseting them to empty"
        V = K.copy()
        qm = img_feat / np.linalg.norm(img_feat)
        sim = (qm * K).sum(-1)
        sim = np.exp(-self.beta * (-sim + 1))
        a = (V * sim[..., None]).sum(1)
        a = a / np.linalg.norm(a, axis=-1, keepdims=True)
        a = a + 0.0  # + global_ffn_bias (zeros in zero-shot)
        a = a / np.linalg.norm(a, axis=-1, keepdims=True)
        return softmax(self.s * a @ img_feat)


def run(features, text, **kw):
    """(scores, clip, p_text, p_mem) arrays [N, C] of a stream [N, d] or [N, V, d] (rows normalised)."""
    ref = ReferenceDMN(text, **kw)
    feats = unit(np.asarray(features, dtype=np.float64))
    if feats.ndim == 2:
        feats = feats[:, None, :]
    out = [ref.step(x) for x in feats]
    return tuple(np.array([o[i] for o in out]) for i in range(4))


def search_weight(p_text, p_mem, labels):
    """direct_inference lines ~826-860: the best (first) of the beta2 grid on the labels."""
    best_acc, best = 0.0, None
    for beta2 in [0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100, 300, 1000]:
        acc = float((np.argmax(p_text + beta2 * p_mem, 1) == labels).mean() * 100)
        if acc > best_acc:
            best_acc, best = acc, beta2
    return best, best_acc

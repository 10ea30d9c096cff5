"""An independent per-sample reference of DPE, written from its official code (zhangce01/DPE-CLIP @
fecae5a5) in float64 torch: the cache is a dict of lists, the residuals are parameters, the loss is
built as the code builds it and differentiated by autograd, and the step is torch.optim.AdamW's.
Nothing is imported from `mstta`.

Sources: main_dpe.py `run_test_dpe` (lines 197-300), `update_cache`, `cache_key_value`,
`compute_cache_logits`, `TextResidue`, `PositiveCacheResidue`, `InfoNCELoss`; utils.py
`get_clip_logits`, `softmax_entropy`, `avg_entropy`, `get_entropy`; the `info_nce` package
(RElbers/info-nce-pytorch `info_nce`, negative_keys=None). Deliberate departures, as the engine's:
float64 everywhere (the official run is fp16 under autocast), at least one confident view when
int(0.1 V) = 0, a stable entropy sort, argmax (lowest class on a tie) for the code's `topk(1)`, and
the MS plug-in (shifted cache features and queries).
"""

from __future__ import annotations

import math
import operator

import numpy as np
import torch
import torch.nn.functional as F


def softmax_entropy(x):
    """utils.py `softmax_entropy`."""
    return -(x.softmax(1) * x.log_softmax(1)).sum(1)


def avg_entropy(outputs):
    """utils.py `avg_entropy`: entropy of the mean probability of the rows."""
    logits = outputs - outputs.logsumexp(dim=-1, keepdim=True)
    avg_logits = logits.logsumexp(dim=0) - np.log(logits.shape[0])
    avg_logits = torch.clamp(avg_logits, min=torch.finfo(avg_logits.dtype).min)
    return -(avg_logits * torch.exp(avg_logits)).sum(dim=-1)


def info_nce(query, positive_key, temperature):
    """info_nce(query, positive_key) with no negative keys, reduction 'mean'."""
    query, positive_key = F.normalize(query, dim=-1), F.normalize(positive_key, dim=-1)
    logits = query @ positive_key.transpose(-2, -1)
    labels = torch.arange(len(query))
    return F.cross_entropy(logits / temperature, labels, reduction="mean")


def update_cache(cache, pred, item, shot_capacity):
    """main_dpe.py `update_cache`."""
    if pred in cache:
        if len(cache[pred]) < shot_capacity:
            cache[pred].append(item)
        elif item[1] < cache[pred][-1][1]:
            cache[pred][-1] = item
        cache[pred] = sorted(cache[pred], key=operator.itemgetter(1))
    else:
        cache[pred] = [item]


def cache_key_value(image_features, cache, num_classes):
    """main_dpe.py `cache_key_value`: per-class mean of the cached features, keys [d, m]."""
    cache_keys, cache_values, all_classes = [], [], []
    for class_index in sorted(cache.keys()):
        num_items = len(cache[class_index])
        image_prototype = torch.zeros_like(image_features)
        for item in cache[class_index]:
            image_prototype += item[0] / num_items
        cache_keys.append(image_prototype)
        cache_values.append(class_index)
        all_classes.append(class_index)
    cache_keys = torch.cat(cache_keys, dim=0).permute(1, 0)
    cache_values = F.one_hot(torch.tensor(cache_values, dtype=torch.int64), num_classes=num_classes).double()
    return cache_keys, cache_values, all_classes


def compute_cache_logits(image_features, cache_keys, cache_values, alpha, beta):
    """main_dpe.py `compute_cache_logits`."""
    affinity = image_features @ cache_keys
    return alpha * ((-1) * (beta - beta * affinity)).exp() @ cache_values


class ReferenceDPE:
    """One stream. `step(views [V, d])` -> dict of final logits, zero-shot logits and entropy, the
    raw mean feature. `p`: a dict of DPE's hyperparameters (alpha, beta, capacity, lr_text, lr_image,
    align, tau, eps, ratio, threshold, infer_confident); `ms`: None or dict(k, alpha, steps, bank_size)."""

    def __init__(self, text, p, ms=None):
        t = torch.as_tensor(np.asarray(text), dtype=torch.float64)
        self.clip_weights = F.normalize(t, dim=-1).T.contiguous()  # [d, C], as clip_classifier stacks them
        self.clip_weights_global = self.clip_weights.clone()
        self.p, self.ms = p, ms
        self.pos_cache, self.num_avg, self.bank = {}, 0, []

    def update_cache(self, pred, item):
        """main_dpe.py `update_cache` on this stream's cache (a forgetting reference overrides it)."""
        update_cache(self.pos_cache, pred, item, self.p["capacity"])

    def get_clip_logits(self, images, clip_weights):
        """utils.py `get_clip_logits` on unit features (at least one confident view; stable sort)."""
        image_features = images
        clip_logits = 100.0 * image_features @ clip_weights
        if image_features.size(0) > 1:
            batch_entropy = softmax_entropy(clip_logits)
            n = max(1, int(batch_entropy.size()[0] * self.p["ratio"]))
            selected_idx = torch.argsort(batch_entropy, descending=False, stable=True)[:n]
            output = clip_logits[selected_idx]
            image_features = image_features[selected_idx].mean(0).unsqueeze(0)
            clip_logits = output.mean(0).unsqueeze(0)
            loss = avg_entropy(output)
            pred = int(output.mean(0).argmax())  # the code's topk(1): ties here to the lowest class
        else:
            loss = softmax_entropy(clip_logits)
            pred = int(clip_logits[0].argmax())
        return image_features, clip_logits, loss, pred

    def shift(self, f):
        """The kNN mean shift of [1, d] toward the m = min(k, |bank|) most cosine-similar earlier raw
        features (ties: the earlier one): normalise((1-a) f + a/m sum), `steps` times."""
        if self.ms is None or not self.bank or self.ms["alpha"] == 0:
            return f
        z = f[0]
        for _ in range(self.ms["steps"]):
            sims = [float(z @ b) / float(b.norm()) for b in self.bank]
            order = sorted(range(len(self.bank)), key=lambda j: (-sims[j], j))[: self.ms["k"]]
            total = sum(self.bank[j] for j in order)
            z = F.normalize((1 - self.ms["alpha"]) * z + self.ms["alpha"] / len(order) * total, dim=0)
        return z.unsqueeze(0)

    def step(self, views):
        p = self.p
        images = F.normalize(
            torch.as_tensor(np.asarray(views), dtype=torch.float64).reshape(-1, self.clip_weights.shape[0]), dim=-1
        )
        C = self.clip_weights.shape[1]
        clip_weights_local = self.clip_weights_global.clone().detach()
        text_residual = torch.nn.Parameter(torch.zeros_like(clip_weights_local))  # TextResidue

        def text_residue():
            return F.normalize(clip_weights_local.clone() + text_residual, dim=0)

        image_features_x, clip_logits, entropy, pred = self.get_clip_logits(images, text_residue())
        entropy = float(entropy.detach() / math.log2(C))  # get_entropy
        with torch.no_grad():
            query = self.shift(image_features_x.detach())
            self.update_cache(pred, [query, entropy])
            pos_cache_keys, pos_cache_values, all_classes = cache_key_value(query, self.pos_cache, C)
        key_residual = torch.nn.Parameter(torch.zeros_like(pos_cache_keys))  # PositiveCacheResidue

        def key_residue():
            return F.normalize(pos_cache_keys.clone() + key_residual, dim=0)

        new_clip_weights = text_residue()
        final_logits = clip_logits.clone()
        new_pos_cache_keys = key_residue()
        final_logits += compute_cache_logits(query, new_pos_cache_keys, pos_cache_values, p["alpha"], p["beta"])
        loss = avg_entropy(final_logits)
        loss += info_nce(new_pos_cache_keys.T, new_clip_weights[:, all_classes].T, p["tau"]) * p["align"]
        optimizer = torch.optim.AdamW(
            [
                {"params": [text_residual], "lr": p["lr_text"], "eps": p["eps"], "weight_decay": 1e-1},
                {"params": [key_residual], "lr": p["lr_image"], "eps": p["eps"], "weight_decay": 1e-1},
            ]
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        with torch.no_grad():  # actual inference
            new_clip_weights = text_residue()
            if p["infer_confident"]:
                image_features, clip_logits, _, _ = self.get_clip_logits(images, new_clip_weights)
            else:
                image_features, clip_logits, _, _ = self.get_clip_logits(images[0:1], new_clip_weights)
            final_logits = clip_logits.clone()
            final_logits += compute_cache_logits(
                self.shift(image_features), key_residue(), pos_cache_values, p["alpha"], p["beta"]
            )
            loss = avg_entropy(final_logits)
            if float(loss / math.log2(C)) < p["threshold"]:
                self.num_avg += 1
                n = self.num_avg
                self.clip_weights_global = self.clip_weights_global * (n / (n + 1)) + new_clip_weights * (1 / (n + 1))
            zs_images = images if p["infer_confident"] else images[0:1]
            _, zs_logits, zs_entropy, _ = self.get_clip_logits(zs_images, self.clip_weights)
            if self.ms is not None:
                self.bank.append(image_features_x.detach()[0])
                if self.ms.get("bank_size") is not None and len(self.bank) > self.ms["bank_size"]:
                    self.bank.pop(0)
        return {
            "scores": final_logits[0],
            "clip": zs_logits[0],
            "entropy": float(zs_entropy.reshape(-1)[0]),
            "feature": image_features_x.detach()[0],
            "pred": int(final_logits[0].argmax()),
        }

"""Where a CLIP's weights live: pretrained tags versus checkpoint paths, the local caches open_clip loads
from (Hugging Face hub, URL downloads), and the fail-fast offline probe.

    path = cached_weights_file("RN50", "openai")    # the local file open_clip would load, or None
    offline = ensure_weights_reachable("RN50", "openai")  # True: cached, load with the hub offline

Weights that are neither cached nor reachable fail in about a second instead of retrying for a minute.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from pathlib import Path
from typing import Iterator
from urllib.parse import urlparse

from ..errors import UserError

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 3.0  # how long to wait for the download host before calling it offline
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt")


def looks_like_path(tag: str) -> bool:
    """Whether a `--pretrained` value names a checkpoint file rather than a pretrained tag."""
    return os.sep in tag or tag.endswith(CHECKPOINT_SUFFIXES) or tag.startswith((".", "~")) or Path(tag).is_file()


def is_known_tag(name: str, tag: str) -> bool:
    """Whether open_clip knows `tag` as pretrained weights of architecture `name`."""
    import open_clip

    return bool(tag) and open_clip.is_pretrained_cfg(name, tag)


@contextlib.contextmanager
def hub_offline(offline: bool) -> Iterator[None]:
    """Run a block with huggingface_hub in offline mode (cache only, no HTTP retries) when asked."""
    if not offline:
        yield
        return
    from huggingface_hub import constants

    before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before


def _uses_hub(pcfg: dict) -> bool:
    """Whether open_clip fetches these weights from the Hugging Face hub (rather than a URL)."""
    from open_clip.pretrained import has_hf_hub

    return bool(pcfg.get("hf_hub")) and has_hf_hub()


def _hub_files(hf_hub: str) -> list[tuple[str, str]]:
    """(repo, filename) pairs open_clip tries for an `hf_hub` entry, safetensors first."""
    from open_clip.pretrained import HF_SAFE_WEIGHTS_NAME, HF_WEIGHTS_NAME

    repo, filename = os.path.split(hf_hub)
    filename = filename or HF_WEIGHTS_NAME
    names = [HF_SAFE_WEIGHTS_NAME] if filename == HF_WEIGHTS_NAME else []
    if filename != HF_WEIGHTS_NAME and filename.endswith((".bin", ".pth")):
        names.append(filename[:-4] + ".safetensors")
    return [(repo, n) for n in names + [filename]]


def url_cache_dir() -> Path:
    """Where open_clip keeps weights it downloads by URL."""
    return Path("~/.cache/clip").expanduser()


def hub_cache_dir() -> str:
    """Where huggingface_hub keeps downloaded weights (HF_HUB_CACHE / HF_HOME)."""
    try:
        from huggingface_hub import constants

        return str(constants.HF_HUB_CACHE)
    except ImportError:
        return os.environ.get("HF_HUB_CACHE") or str(Path("~/.cache/huggingface/hub").expanduser())


def cached_weights_file(name: str, tag: str) -> Path | None:
    """The local file open_clip would load the weights of (architecture, tag) from, or None if not on disk."""
    import open_clip

    pcfg = open_clip.get_pretrained_cfg(name, tag)
    if "file" in pcfg:
        path = Path(pcfg["file"])
        return path if path.is_file() else None
    if _uses_hub(pcfg):
        from huggingface_hub import try_to_load_from_cache

        hits = (try_to_load_from_cache(repo, fn) for repo, fn in _hub_files(pcfg["hf_hub"]))
        return next((Path(hit) for hit in hits if isinstance(hit, str)), None)
    url = pcfg.get("url", "")
    path = url_cache_dir() / os.path.basename(url) if url else None
    return path if path is not None and path.is_file() else None


def weights_cached(name: str, tag: str) -> bool:
    """Whether the weights of a known (architecture, tag) pair are already on local disk."""
    return cached_weights_file(name, tag) is not None


def _download_host(pcfg: dict) -> tuple[str, int]:
    """(host, port) the weights would be fetched from, through an HTTPS proxy if one is set."""
    proxy = next(
        (os.environ[k] for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy") if os.environ.get(k)), ""
    )
    if proxy:
        u = urlparse(proxy if "://" in proxy else f"http://{proxy}")
        return u.hostname or "", u.port or 3128
    if _uses_hub(pcfg):
        from huggingface_hub import constants

        u = urlparse(constants.ENDPOINT)
    else:
        u = urlparse(pcfg.get("url", ""))
    return u.hostname or "", u.port or 443


def network_reachable(host: str, port: int = 443, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """True when a TCP connection to host:port opens within `timeout` s (DNS included); False offline."""
    if not host:
        return False
    ok: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            ok.append(True)
        except OSError:
            pass

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout)
    return bool(ok)


def _hub_offline_env() -> bool:
    """Whether the user put huggingface_hub in offline mode (HF_HUB_OFFLINE)."""
    if os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE"):
        return True
    try:
        from huggingface_hub import constants

        return bool(constants.HF_HUB_OFFLINE)
    except ImportError:
        return False


def ensure_weights_reachable(name: str, tag: str) -> bool:
    """Fail fast when weights are neither cached nor downloadable; True = load from the cache offline."""
    import open_clip

    if weights_cached(name, tag):
        return True
    pcfg = open_clip.get_pretrained_cfg(name, tag)
    host, port = _download_host(pcfg)
    if _hub_offline_env() and _uses_hub(pcfg):
        raise UserError(weights_error(name, tag, "not in the local cache and HF_HUB_OFFLINE is set"))
    if not network_reachable(host, port):
        raise UserError(weights_error(name, tag, f"not in the local cache and {host}:{port} is unreachable"))
    log.info("downloading weights for %s '%s' from %s", name, tag, host)
    return False


def weights_error(name: str, pretrained: str, exc: Exception | str) -> str:
    """The one-line message for weights that could not be found, downloaded or loaded, saying how to fix it."""
    lines = [ln for ln in str(exc).splitlines() if ln.strip()] or [type(exc).__name__]
    msg = " ".join(lines[0].split())
    msg = msg if len(msg) <= 120 else msg[:117] + "..."
    if looks_like_path(str(pretrained)) and not is_known_tag(name, str(pretrained)):
        return (
            f"--pretrained {pretrained}: could not load checkpoint {pretrained} into {name} ({msg}); "
            "pass an open_clip/OpenAI CLIP checkpoint file for this architecture (--model must match it)"
        )
    return (
        f"weights for --model {name} --pretrained {pretrained} could not be downloaded or loaded ({msg}); "
        f"fetch them once on a machine with internet into the Hugging Face cache ({hub_cache_dir()}, "
        f"or {url_cache_dir()} for URL weights), or pass --pretrained /path/to/checkpoint, "
        "or use --model mstta-tiny --pretrained none for a test run"
    )

"""Server memory of the browser UI over many runs and sessions; prints one JSON object (and writes
it with --out).

    python benchmarks/server_memory.py                      # 20 runs in 10 sessions, the bundled clip
    python benchmarks/server_memory.py --sessions 5 --runs-per-session 2 --every 4 --out results/mem.json

A real `mstta-demo --bundled-demo` server on 127.0.0.1 (a free port; the digits model unless
ViT-B-16's weights are cached). Each session is a gradio_client (its own browser session, with
Gradio's heartbeat): it uploads the bundled clip with its ground truth and runs `process_video`
(as fast as possible) `--runs-per-session` times, then closes, as a closed page does. The
server's RSS (/proc/<pid>/status VmRSS) is read after every run and after every close (a second
after it, so the page-close handlers have run). `last_half_growth_mb` is the RSS after the last
run minus the RSS after the run at half way (goal: <= 50 MB for the last 10 of 20 runs).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ASSETS = REPO / "assets"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    """The process's resident memory now (VmRSS), in MB."""
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", text).group(1)) / 1024


def start_server(port: int, log_path: Path) -> subprocess.Popen:
    """`mstta-demo --bundled-demo` on 127.0.0.1:port; returns once it answers."""
    import urllib.request

    cmd = [sys.executable, "-c", "from app.cli import main; main()", "--bundled-demo", "--host", "127.0.0.1"]
    env = dict(os.environ, PYTHONUNBUFFERED="1", GRADIO_ANALYTICS_ENABLED="False")
    log = log_path.open("w")
    proc = subprocess.Popen([*cmd, "--port", str(port)], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}; see {log_path}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).close()
            return proc
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise SystemExit(f"the server did not answer within 300 s; see {log_path}")


def one_run(client, video: Path, truth: Path, every: int) -> str:
    """One process_video run of the clip, as fast as possible; the last status line."""
    from gradio_client import handle_file

    job = client.submit(
        video=handle_file(str(video)),
        truth=handle_file(str(truth)),
        every=every,
        realtime=False,
        api_name="/process_video",
    )
    job.result(timeout=900)
    return str(job.outputs()[-1][0])[:200]


def drive(url: str, pid: int, sessions: int, per_session: int, clip: tuple[Path, Path], every: int) -> dict:
    """The sessions, one after another: their runs, then their close; RSS after each."""
    from gradio_client import Client

    after_runs, after_close, seconds, last_status = [], [], [], ""
    for _ in range(sessions):
        client = Client(url, verbose=False, analytics_enabled=False, download_files=False)
        for _ in range(per_session):
            t0 = time.perf_counter()
            last_status = one_run(client, *clip, every)
            seconds.append(round(time.perf_counter() - t0, 2))
            after_runs.append(round(rss_mb(pid), 1))
        client.close()  # the heartbeat ends: Gradio's unload, as when a page closes
        time.sleep(2.0)
        after_close.append(round(rss_mb(pid), 1))
    return dict(rss_after_run_mb=after_runs, rss_after_close_mb=after_close, run_s=seconds, last_status=last_status)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=10, help="sessions opened and closed in turn (default 10)")
    p.add_argument("--runs-per-session", type=int, default=2, help="runs of the clip in each (default 2)")
    p.add_argument("--every", type=int, default=0, help="process every N-th frame (default 0: about 5 per second)")
    p.add_argument("--out", type=Path, help="also write the JSON here")
    args = p.parse_args(argv)
    if not 1 <= args.sessions <= 1000 or not 1 <= args.runs_per_session <= 100 or not 0 <= args.every <= 1000:
        p.error("--sessions 1..1000, --runs-per-session 1..100, --every 0..1000")
    from app.bundled import choose_demo

    demo = choose_demo()
    clip = (ASSETS / demo.video, ASSETS / demo.truth)
    port = free_port()
    log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"server_memory_{port}.log"
    proc = start_server(port, log_path)
    try:
        start = round(rss_mb(proc.pid), 1)
        found = drive(f"http://127.0.0.1:{port}/", proc.pid, args.sessions, args.runs_per_session, clip, args.every)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    runs = found["rss_after_run_mb"]
    half = len(runs) // 2
    result = dict(
        model=demo.model,
        clip=demo.video,
        sessions=args.sessions,
        runs=len(runs),
        every=args.every,
        rss_start_mb=start,
        last_half_growth_mb=round(runs[-1] - runs[half - 1], 1) if half else None,
        total_growth_mb=round(found["rss_after_close_mb"][-1] - start, 1),
        **found,
        server_log=str(log_path),
    )
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

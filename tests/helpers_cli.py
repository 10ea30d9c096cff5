"""Run `mstta-bench` in-process, as a user would from the shell."""
from __future__ import annotations

from mstta.bench import main


def run_bench(capsys, *argv) -> tuple[int, str, str]:
    """`mstta-bench ARGV...` -> (exit code, stdout, stderr); arguments may be paths."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err

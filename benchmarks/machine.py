"""What the benchmarks read about the machine's load (shared by blocksparse.py and model_step.py)."""

from __future__ import annotations

import os
from pathlib import Path


def busy_cpu_s() -> float:
    """CPU seconds all processes of the machine have used so far (/proc/stat), or NaN."""
    try:
        v = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return float("nan")
    user, nice, system, _idle, _iowait, irq, softirq, steal = v
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far, 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    except (OSError, ValueError, IndexError):
        return 0.0

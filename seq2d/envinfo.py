"""Facts about the machine a number was measured on (every result page names its hardware)."""

from __future__ import annotations

import platform
from pathlib import Path

import torch

__all__ = ["cpu_name", "device_name"]


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: str | torch.device = "cpu") -> str:
    """The GPU's name for a CUDA device, else the CPU model with torch's thread count."""
    if str(device).startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return f"{cpu_name()} ({torch.get_num_threads()} threads)"

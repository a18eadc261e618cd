"""Facts about the machine a number was measured on (every result page names its hardware)."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

__all__ = ["cpu_name", "device_name", "machine"]


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    """The record a result keeps of the machine that computed it: the CPU, torch's CPU capability
    (AVX512 or AVX2 pick different float kernels, so a number is bitwise reproducible only on its
    own kind), torch's version and the core count."""
    return {"cpu": cpu_name(), "capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
            "nproc": os.cpu_count()}


def device_name(device: str | torch.device = "cpu") -> str:
    """The GPU's name for a CUDA device, else the CPU model with torch's thread count."""
    if str(device).startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return f"{cpu_name()} ({torch.get_num_threads()} threads)"

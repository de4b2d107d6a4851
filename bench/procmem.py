"""This process's resident memory as the memory benchmarks measure it (Linux):
the resident size now and its peak, and the peak reset to it."""

from __future__ import annotations


def memory() -> dict[str, int]:
    """VmRSS (resident now) and VmHWM (the peak since the last reset_peak), bytes."""
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return {k: int(fields[k].split()[0]) << 10 for k in ("VmRSS", "VmHWM")}


def reset_peak() -> None:
    """VmHWM := VmRSS (/proc/self/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")

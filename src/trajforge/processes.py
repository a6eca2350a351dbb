"""Worker processes: how they start, and how many cores this process may use."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys


def process_context() -> multiprocessing.context.BaseContext:
    """Fork where it is safe and cheap (Linux: workers start with trajforge already loaded)."""
    return multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system reports it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows do not report it
        return os.cpu_count() or 1


def ignore_interrupts() -> None:
    """A worker's initializer: Ctrl-C stops the parent, which stops its workers; the workers
    themselves do not each print a KeyboardInterrupt traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

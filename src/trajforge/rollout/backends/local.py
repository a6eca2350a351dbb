"""The local backend: episodes on a thread pool (good for model-bound policies)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from trajforge.rollout.runner import EpisodeSpec, FinishedEpisode, Progress, run_and_encode


class _Running:
    """Counts episodes in flight and reports the count."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.count = 0
        self.lock = threading.Lock()

    def run(self, spec: EpisodeSpec) -> FinishedEpisode:
        self._add(1)
        try:
            return run_and_encode(spec)
        finally:
            self._add(-1)

    def _add(self, delta: int) -> None:
        with self.lock:
            self.count += delta
            self.progress.running(self.count)


def run_local(
    specs: list[EpisodeSpec], concurrency: int, progress: Progress
) -> Iterator[FinishedEpisode]:
    """Run on `concurrency` threads (in this thread when 1); yield in completion order."""
    running = _Running(progress)
    if concurrency <= 1:
        for spec in specs:
            yield running.run(spec)
        return
    pending = list(reversed(specs))
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        active: set[Future] = set()
        while pending or active:
            while pending and len(active) < concurrency:
                active.add(pool.submit(running.run, pending.pop()))
            finished, active = wait(active, return_when=FIRST_COMPLETED)
            for future in finished:
                yield future.result()

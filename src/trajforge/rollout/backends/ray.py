"""The Ray backend: episodes as Ray tasks, in chunks to keep scheduling overhead low.

Uses the running Ray session when there is one, else connects to `$RAY_ADDRESS`, else
starts a local Ray with `concurrency` CPUs (`processes.ray_session`). Specs travel as JSON;
each episode comes back as a `FinishedEpisode` (the trajectory's JSON document, serialized
by the worker from the validated model, and its row and summary values), which the driver
stores without parsing the document again. Workers need only trajforge installed.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from trajforge.processes import ray_session
from trajforge.rollout.runner import EpisodeSpec, FinishedEpisode, Progress, run_and_encode

CHUNKS_PER_WORKER = 4


def _run_chunk(payloads: list[bytes]) -> list[FinishedEpisode]:
    return [run_and_encode(EpisodeSpec.model_validate_json(p)) for p in payloads]


def chunked(specs: list[EpisodeSpec], concurrency: int) -> list[list[EpisodeSpec]]:
    """Contiguous chunks, about CHUNKS_PER_WORKER per worker."""
    size = max(1, math.ceil(len(specs) / (max(1, concurrency) * CHUNKS_PER_WORKER)))
    return [specs[i : i + size] for i in range(0, len(specs), size)]


def run_ray(
    specs: list[EpisodeSpec], concurrency: int, progress: Progress
) -> Iterator[FinishedEpisode]:
    """Keep `concurrency` chunks running; yield trajectories as chunks finish.

    A finished chunk is replaced before its episodes are stored, so the workers run while
    the driver works.
    """
    if not specs:
        return
    ray = ray_session(concurrency)
    remote = ray.remote(num_cpus=1)(_run_chunk)
    pending = list(reversed(chunked(specs, concurrency)))
    active: dict = {}

    def top_up() -> None:
        while pending and len(active) < max(1, concurrency):
            chunk = pending.pop()
            active[remote.remote([s.model_dump_json().encode() for s in chunk])] = len(chunk)
        progress.running(sum(active.values()))

    top_up()
    while active:
        ready, _ = ray.wait(list(active), num_returns=1)
        active.pop(ready[0])
        top_up()
        yield from ray.get(ready[0])

"""Rollout throughput of one fixed RL iteration: today's serving path against the prefix cache.

    nice -n 15 python bench/rl_throughput.py [--base CKPT] [--tasks 4] [--group 8]
                                             [--concurrency 32] [--max-steps 20]
                                             [--out bench/results/rl_throughput.json]

The iteration is the one `train rl` rolls out (`RolloutService.run`, unchanged): `--tasks`
household difficulty-1 training worlds × `--group` sampled episodes each (temperature 1,
at most 16 new tokens a call, `--max-steps` agent steps), `--concurrency` episodes at once,
each an `llm`-policy episode whose every turn goes through the recording proxy to
`trajforge serve` with the tiny student. The two paths run the same jobs in the same
process, one after the other:

- **today**: the path as it was when the goal was set: `serve` on a thread of the rollouts'
  own process, decoding with transformers' forward (`ThreadServer`, kept here as that
  baseline), without a prefix cache (`--prefix-cache 0`: every request re-encodes its whole
  conversation), and episodes whose model client calls the openai SDK's typed
  `chat.completions.create` over a connection pool of its own (`TypedClient`, kept here
  too);
- **new**: today's code: `serve` in a process of its own (`ServeProcess`), decoding with
  the lean Llama forward (`trajforge.serve.lean_llama`), with its prefix cache (a request
  feeds only what its conversation added since its last turn, or since the opening its group
  shares), and the client that sends the request as JSON through one shared pool.

Each path reports episodes/s, generated tokens/s, the prompt tokens fed to the model and
the share of wall time spent inside the model (`Student.generate`, as the server's `/stats`
count it), and the bound: the model's FLOPs per token (2 × parameters, plus attention over the
mean context) times the tokens the path fed, over the matmul rate of this CPU measured here
(a 512 × 512 float32 product on the server's threads), as episodes/s. The last line is
`ratio new / today: N.Nx (episodes/s)`; below the 10× goal, the breakdown of where the time
goes is printed before it. The student is `--base`, or a small one trained here first (the
learning lab's shape, hidden 128 × 4 layers, on the teacher's successes; a few hundred
steps: enough to call tools, not to be good).

Where the new path's time went at 704f23c (AMD EPYC, 2 cores, AVX2; 32 episodes, about 620
requests in 43-47 batches): the serve process's decoding thread 4.3-4.9 s of CPU and its
event loop 1.2 s, the rollout process 3.9-4.5 s. Its 47 recorded batches replayed alone
took 4.5 s: 456 decode steps 2.2 s, 47 prefills 1.2 s (their products at about the matmul
rate), the rest 1.1 s (stacking cached states into a batch, keeping finished rows'
states). A decode step's attention reads every held state: at 28 rows of 475 it reads 13.6
MB a layer in about 2 ms (7 GB/s; one thread reads about 11 GB/s here and the L3 holds 8
MB), and bfloat16 states are 2.5 times slower on this CPU. Tried and not kept: the query,
key and value products fused into one (and gate and up), activations kept 2-D (replay 4.2-4.5
s against 4.4-5.0, within the spread), and one padded attention call a layer for a prefill
instead of one a row (1.24 s against 1.18). Kept since: the lean forward reads each layer's
weights once instead of calling its projection modules (the replay 4.09-4.14 -> 3.76-3.92 s,
its decode steps 2.01-2.04 -> 1.73-1.79 s). Tried after it and not kept: torch.compile of
each layer's products and norms (inductor, dynamic shapes; decode steps 1.84 -> 2.20 s, and
30 s to compile), rotary positions applied to queries and keys at once (decode steps 3%
faster, prefills 2% slower) and an additive float mask (within the spread). Kept after them:
rotary positions by one roll of each head's vector, the sign folded into the sines once a
forward, instead of transformers' `rotate_half` (the same bits; a decode step at 7 and 14 rows
5% faster, a 200-token prefill 1%, in alternating runs in one process). Measured and left:
RMS norms' weights folded into fused query/key/value and gate/up products (the replay within
1%); drafting tokens from the conversation itself (prompt lookup, verified in one forward)
would accept 1.45 tokens a row a step on the recorded batches, and fewer in lock-step, where
the longest row sets the steps; `serve` on two torch threads beside the rollouts gave 3.7-4.1
episodes/s against 4.8-5.3 on one (4.1-4.8 with OpenMP's passive wait). The model's own
work then bounds the path: 3.8 s on one thread for the 32 episodes, at most about 8.4
episodes/s with nothing else taking time, where 10x the old path is 9.5-10.6 here. Across
the shared openings of a batch's rows, 74% of the held states are distinct, so attending to
a shared prefix once per batch would save at most a quarter of the attention's reads.

On an AMD EPYC with AVX-512 (AVX-512 BF16 too, 32 MB of L3, 100 GFLOP/s a thread) at
254fc60: 4.3-5.1x (new 9.0-9.4 episodes/s, today 1.8-2.1: today's path, mostly prefill
products, gained about 2x from the faster products, the new one about 1.5x). The 35
batches of one iteration replayed alone took 1.8-2.1 s on a quiet machine (decode steps
0.67-0.77 s, attention reading states at about 25 GB/s; prefills 0.54-0.62 s; stacking,
entries and selections 0.5-0.7 s), more than the 1.5-1.8 s that 10x would leave for the
whole iteration. Tried there and not kept: bfloat16 attention (5.7 times slower than
float32 at 14 rows of 475 states), `serve` on two threads (the replay 1.5-1.6 s against 1.9
s, but 6.5 and 7.5 episodes/s against 8.6 and 7.8 beside the rollouts), and glibc's
allocator told to keep freed memory (`GLIBC_TUNABLES` mmap threshold 32 MB, trim threshold 4
GB: stacking 0.30-0.35 -> 0.13 s in the replay, but 8.62 against 8.58 episodes/s over 8
alternating rounds).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import orjson

from trajforge.agents.household_teacher import ObservableTeacher
from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.generate.recovery import household_rows
from trajforge.models.base import ModelReply
from trajforge.models.openai_compat import (
    OpenAICompatibleModel,
    OpenAIModelConfig,
    call_record,
    message_to_openai,
)
from trajforge.models.serve import BackgroundServer
from trajforge.openai_wire import to_message
from trajforge.rollout.episode import Limits, run_episode
from trajforge.schema import Message
from trajforge.serve.app import ServeConfig, StudentApp
from trajforge.serve.prefix_cache import DEFAULT_MB
from trajforge.serve.reload import add_reload_route
from trajforge.serve.student import Student
from trajforge.train.rl import rollouts
from trajforge.train.rl.rollouts import RolloutService
from trajforge.train.rows import sequences
from trajforge.train.sft import SFTConfig, StepDone, train_sft

GOAL = 10.0
RESULTS = Path(__file__).parent / "results" / "rl_throughput.json"
PATHS = {"today": 0, "new": DEFAULT_MB}
"""Each path's `serve --prefix-cache` megabytes."""


class TypedClient(OpenAICompatibleModel):
    """The model client as it was when the goal was set (the baseline of the `today` path):
    a connection pool of its own, and the SDK's typed `create`, which converts every message
    of the request and builds typed objects of the answer."""

    def __init__(self, config: OpenAIModelConfig) -> None:
        import openai

        super().__init__(config)
        self._client = openai.OpenAI(
            base_url=self.config.base_url, api_key=self.config.api_key or "not-needed",
            timeout=self.config.timeout_s, max_retries=self.config.max_retries,
        )  # fmt: skip

    def complete(self, messages: list[Message], tools: list[dict] | None = None) -> ModelReply:
        request = {"model": self.config.model, "temperature": self.config.temperature,
                   "messages": [message_to_openai(m) for m in messages]}  # fmt: skip
        if tools:
            request["tools"] = tools
        if self.config.max_tokens:
            request["max_tokens"] = self.config.max_tokens
        if self.config.logprobs:
            request["logprobs"] = True
        started = time.time()
        response = self._client.chat.completions.create(**request)
        latency = time.time() - started
        body = response.model_dump(mode="json", exclude_none=True)
        message = to_message(body["choices"][0]["message"])
        message.extra.pop("refusal", None)
        return ModelReply(message=message, call=call_record(request, body, started, latency))


@contextlib.contextmanager
def episodes_calling(client: type[OpenAICompatibleModel]):
    """The rollout episodes' model client set to `client` while the block runs."""
    original = rollouts.OpenAICompatibleModel
    rollouts.OpenAICompatibleModel = client  # type: ignore[misc]
    try:
        yield
    finally:
        rollouts.OpenAICompatibleModel = original  # type: ignore[misc]


def train_student(work: Path, worlds: int, steps: int) -> Path:
    rows: list[dict] = []
    for seed in range(worlds):
        run = run_episode(HouseholdEnv(), ObservableTeacher(), task_for(seed, 1))
        if run.outcome.success:
            rows += household_rows(run)
    config = SFTConfig(steps=steps, batch_size=16, lr=2e-3, warmup=20, threads=1,
                       save_every=steps)  # fmt: skip
    out = work / "student"

    def progress(done: StepDone) -> None:
        if done.step % 50 == 0:
            print(f"  training the student: step {done.step}/{steps}, loss {done.loss:.3f}",
                  flush=True)  # fmt: skip

    train_sft(sequences(rows), out, config, manifest={"name": "bench-student"}, progress=progress)
    return out


class ThreadServer:
    """`serve` on a thread of the rollouts' own process, decoding with transformers' forward
    pass, as `RolloutService` ran it when the goal was set (the baseline of the `today`
    path); the same `start`, `stop`, `url` and `stats` as the `ServeProcess` that replaced
    it."""

    def __init__(self, base: Path, config: ServeConfig, reload_token: str) -> None:
        student = Student(base)
        student.lean = None
        self.served = StudentApp(student, config)
        add_reload_route(self.served, reload_token)
        self._server = BackgroundServer(self.served.app)

    def start(self) -> ThreadServer:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    @property
    def url(self) -> str:
        return self._server.url

    def stats(self) -> dict:
        return asdict(self.served.stats)


def matmul_rate(size: int = 512, repeats: int = 20) -> float:
    """FLOP/s of a float32 square matrix product on this process's torch threads."""
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - started)


def flops_per_token(student: Student, mean_context: float) -> float:
    """2 × parameters (input embeddings excluded: a lookup) plus attention's
    2 × 2 × layers × width × context for the scores and the weighted sum."""
    model = student.model
    config = model.config
    embedding = model.get_input_embeddings().weight.numel()
    parameters = sum(p.numel() for p in model.parameters()) - embedding
    if config.tie_word_embeddings:
        parameters += embedding  # the output projection is the same matrix, multiplied
    attention = 4 * config.num_hidden_layers * config.hidden_size * mean_context
    return 2 * parameters + attention


def run_path(name: str, base: Path, work: Path, jobs: list, args, rate: float) -> dict:
    db = work / f"{name}.db"
    client = TypedClient if name == "today" else OpenAICompatibleModel
    service = RolloutService(base, db, prefix_cache_mb=PATHS[name])
    if name == "today":
        service.server = ThreadServer(base, service.server.config, service.server.reload_token)
    with service, episodes_calling(client):
        model = OpenAIModelConfig(
            base_url="http://unused", model="student", api_key="local", logprobs=True,
            temperature=1.0, max_tokens=16, max_retries=0,
        )  # fmt: skip
        named = [(f"{name}-{session}", group, task) for session, group, task in jobs]
        episodes, stats = service.run(named, Limits(max_steps=args.max_steps), model,
                                      args.concurrency)  # fmt: skip
        served = service.server.stats()
    wall = stats.seconds
    fed_prompt = served["prompt_tokens"] - served["cached_tokens"]
    generated = served["generated_tokens"]
    mean_context = (served["prompt_tokens"] + generated / 2) / max(1, served["requests"])
    bound_s = flops_per_token(Student(base), mean_context) * (fed_prompt + generated) / rate
    row = {
        "episodes": stats.episodes,
        "seconds": round(wall, 2),
        "episodes_per_s": round(stats.episodes / wall, 2),
        "generated_tokens": generated,
        "generated_tokens_per_s": round(generated / wall, 1),
        "requests": served["requests"],
        "batches": served["batches"],
        "mean_batch": round(served["requests"] / max(1, served["batches"]), 2),
        "prompt_tokens_fed": fed_prompt,
        "prompt_tokens_cached": served["cached_tokens"],
        "model_s": round(served["model_seconds"], 2),
        "model_share": round(served["model_seconds"] / wall, 3),
        "model_error_episodes": stats.model_errors,
        "unrecorded_episodes": stats.unrecorded,
        "success": round(sum(bool(e.run.outcome.success) for e in episodes) / len(episodes), 3),
        "bound_s": round(bound_s, 4),
        "bound_episodes_per_s": round(stats.episodes / bound_s, 1),
    }
    print(f"{name}: {row['episodes']} episodes in {wall:.1f} s, {row['episodes_per_s']} "
          f"episodes/s, {row['generated_tokens_per_s']} generated tokens/s; "
          f"{row['requests']} requests in {row['batches']} batches (mean {row['mean_batch']}); "
          f"prompt tokens fed {fed_prompt}, cached {served['cached_tokens']}; model "
          f"{row['model_s']} s ({row['model_share']:.0%} of wall); bound "
          f"{row['bound_episodes_per_s']} episodes/s", flush=True)  # fmt: skip
    return row


def breakdown(rows: dict[str, dict]) -> list[str]:
    """Where the wall time of each path goes (printed when the goal is not met)."""
    lines = []
    for name, row in rows.items():
        outside = row["seconds"] - row["model_s"]
        per_request = 1000 * outside / max(1, row["requests"])
        lines.append(
            f"  {name}: model {row['model_s']:.1f} s, outside the model {outside:.1f} s "
            f"({per_request:.1f} ms of wall per request: HTTP, proxy, recording, client, "
            f"environment, batching waits), bound {row['bound_s']:.2f} s"
        )
    return lines


def _shown(value: object) -> object:
    """A setting as the result file records it: a path by its name when it is absolute (the
    file describes the run, not the machine)."""
    if isinstance(value, Path):
        return value.name if value.is_absolute() else str(value)
    return value


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="A train sft checkpoint (default: train one).")
    parser.add_argument("--tasks", type=int, default=4, help="Training worlds in the iteration.")
    parser.add_argument("--group", type=int, default=8, help="Episodes per world.")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--student-worlds", type=int, default=100)
    parser.add_argument("--student-steps", type=int, default=300)
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import torch

    torch.set_num_threads(1)
    args = parse(argv)
    work = Path(tempfile.mkdtemp(prefix="rl_throughput-"))
    base = args.base or train_student(work, args.student_worlds, args.student_steps)
    rate = matmul_rate()
    print(f"matmul rate {rate / 1e9:.1f} GFLOP/s (1 thread), load {os.getloadavg()[0]:.1f}")
    jobs = [(f"{index}-{sample}", str(index), task_for(100_000 + index, 1))
            for index in range(args.tasks) for sample in range(args.group)]  # fmt: skip
    rows = {name: run_path(name, base, work, jobs, args, rate) for name in PATHS}
    given = sys.argv[1:] if argv is None else argv
    ratio = rows["new"]["episodes_per_s"] / rows["today"]["episodes_per_s"]
    result = {
        "command": "python bench/rl_throughput.py " + " ".join(given),
        "settings": {k: _shown(v) for k, v in vars(args).items()},
        "matmul_flops_per_s": round(rate),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "paths": rows,
        "ratio_episodes_per_s": round(ratio, 2),
        "goal_met": ratio >= GOAL,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"wrote {args.out}")
    if ratio < GOAL:
        print(f"goal {GOAL:.0f}x not met; where the time goes:")
        print("\n".join(breakdown(rows)))
    print(f"ratio new / today: {ratio:.1f}x (episodes/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

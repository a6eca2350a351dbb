"""Speed of the pretrained student (SmolLM2-135M-Instruct) in training and in generation.

Usage: python bench/student_speed.py [--model smollm2-135m] [--out bench/results/student_speed.json]

Training (one process, the same real rows for every case): optimizer steps of `train sft`'s
own step function on batches of `--batch` household rows cut to their last `--tokens`
tokens (as `train sft` cuts), for full fine-tuning and LoRA (rank 16), each in fp32 and under
bfloat16 autocast, and, for reference, full fine-tuning with the weights themselves in
bfloat16 (what the issue's 418 tokens/s measured). The cut rows share no opening; a last
case trains LoRA on whole rows (at most 1,024 tokens, what the lab trains on), whose shared
system prompt goes through the model once per batch. Tokens/s counts every token of the
batches (padding excluded) over `--steps` timed steps after one warm-up step.

Generation: household episodes in lock-step (`run_lockstep`'s loop, what `eval --ckpt` runs,
on the same `Student.generate` that `serve` batches requests into) of batch 1 and batch 16,
`--turns` agent steps of at most 32 new tokens each, with the per-conversation prefix cache
(`DecodeSession`: each step feeds only the tokens the tool's answer adds; the opening the
batch's prompts share is fed once), without it
(every step re-encodes the whole history) and, at batch 16, with `serve`'s prefix cache
across requests (`PrefixCache`: each step's prompts are looked up among the sequences served
before, as the server does for a session that sends its conversation again), and with the
session and bfloat16 weights (`--bf16`, what the lab evaluates with). New tokens/s
counts generated tokens over wall time, prefills included. `--no-training` runs only the
generation cases.

Goals (from the issue): training >= 1,000 tokens/s (bf16, LoRA or full) and batched
generation >= 300 new tokens/s at batch 16 with prefix reuse. The load average is recorded:
on a shared machine every figure is lower than on a quiet one.

`--profile` says why a goal is or is not in reach. For the lab's training case (LoRA, bf16
autocast, whole rows) and the fastest generation case (batch 16, prefix reuse, bf16 weights),
`torch.profiler` over one step gives the share of time in matrix products and the operators
that take the most; and the bound: the model's matrix-product FLOPs per token (2 per weight
forward; training adds 2 more for the activations' gradients, LoRA's own weights aside)
over the rate this CPU reaches on the model's own product shapes in bf16 (timed here).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from trajforge.serve.precision import cpu_has_bf16

TRAIN_GOAL = 1000.0
GENERATION_GOAL = 300.0


def _rows(count: int) -> list[tuple[list[dict], list[dict]]]:
    """The lab's E rows: the observable teacher's episodes on `count` household worlds."""
    from trajforge.agents.household_teacher import ObservableTeacher
    from trajforge.envs.household import HouseholdEnv, task_for
    from trajforge.generate.recovery import household_rows
    from trajforge.rollout.episode import run_episode
    from trajforge.train.rows import sequences

    runs = [run_episode(HouseholdEnv(), ObservableTeacher(), task_for(s, 1)) for s in range(count)]
    return sequences(row for run in runs for row in household_rows(run))


def _training_data(args, codec, rows, whole: bool) -> tuple[list, int]:
    """Rows cut to their last `--tokens` tokens (no two share an opening), or whole rows of
    at most 1,024 tokens (all open with the same system prompt); and the context."""
    encoded = [codec.encode(m, t) for m, t in rows]
    if whole:
        return [(ids, mask) for ids, mask in encoded if len(ids) <= 1024 and any(mask)], 1024
    cut = [(ids[-args.tokens :], mask[-args.tokens :]) for ids, mask in encoded]
    return [row for row in cut if len(row[0]) == args.tokens and any(row[1])], args.tokens


def _training_case(
    name: str, args, rows, weights_bf16: bool, whole: bool = False, **settings: Any
) -> dict:
    import torch

    from trajforge.train import hf_student, sft

    config = sft.SFTConfig(model=args.model, batch_size=args.batch, lr=1e-5, warmup=0,
                           max_context=1024 if whole else args.tokens, **settings)  # fmt: skip
    model, codec = hf_student.load_base(config)
    if weights_bf16:
        model = model.to(torch.bfloat16)
    data, _ = _training_data(args, codec, rows, whole)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=config.lr)
    generator = torch.Generator().manual_seed(0)
    model.train()
    sft._step(model, optimizer, data, codec.pad_id, config, generator)  # warm-up
    started, tokens = time.perf_counter(), 0
    for step in range(args.steps):
        loss, held = sft._step(model, optimizer, data, codec.pad_id, config, generator)
        tokens += held
        rate = tokens / (time.perf_counter() - started)
        print(f"  {name}: step {step + 1}/{args.steps} loss {loss:.3f} {rate:.0f} tokens/s",
              flush=True)  # fmt: skip
    seconds = time.perf_counter() - started
    return {
        "tokens_per_s": round(tokens / seconds, 1),
        "tokens": tokens,
        "seconds": round(seconds, 2),
        "trained_parameters": sum(p.numel() for p in trainable),
    }


def training(args, rows) -> dict[str, dict]:
    cases = {
        "full fp32": dict(weights_bf16=False),
        "full bf16 autocast": dict(weights_bf16=False, bf16=True),
        "lora fp32": dict(weights_bf16=False, lora_rank=16),
        "lora bf16 autocast": dict(weights_bf16=False, lora_rank=16, bf16=True),
        "full bf16 weights": dict(weights_bf16=True),
        "lora bf16 autocast, whole rows": dict(
            weights_bf16=False, lora_rank=16, bf16=True, whole=True
        ),
    }
    return {name: _training_case(name, args, rows, **case) for name, case in cases.items()}


def _decoder(student, reuse: str):
    """The batched generate of a case, and the session whose rows follow the episodes."""
    from trajforge.serve.prefix_cache import PrefixCache
    from trajforge.serve.student import DecodeSession

    if reuse == "session":
        session = DecodeSession(student)
        return session.generate, session
    if reuse == "serve":
        cache = PrefixCache()
        return (lambda prompts, *args: student.generate(prompts, *args, prefix_cache=cache)), None
    return student.generate, None


def _generation_case(name: str, student, tasks, reuse: str, steps: int) -> dict:
    """`run_lockstep`'s loop for `steps` agent steps, counting the generated tokens."""
    from trajforge.envs.household import HouseholdEnv
    from trajforge.train.evaluate import _advance, _prompt, fresh_starts

    active = fresh_starts(HouseholdEnv, tasks)
    decode, session = _decoder(student, reuse)
    new_tokens, started = 0, time.perf_counter()
    for step in range(steps):
        generated = decode([_prompt(student, traj) for _, traj in active], 32, 0.0, step)
        new_tokens += sum(len(g.token_ids) for g in generated)
        kept = [row for row, ((env, traj), g) in enumerate(zip(active, generated, strict=True))
                if _advance(student, env, traj, g, step) is None]  # fmt: skip
        if session is not None:
            session.keep(kept)
        active = [active[row] for row in kept]
        if not active:
            break
    seconds = time.perf_counter() - started
    rate = new_tokens / seconds
    print(f"  {name}: {new_tokens} new tokens in {seconds:.1f} s, {rate:.1f} tokens/s", flush=True)
    return {"new_tokens": new_tokens, "seconds": round(seconds, 2), "tokens_per_s": round(rate, 1)}


def generation(args) -> dict[str, dict]:
    from trajforge.envs.household import HouseholdEnv
    from trajforge.serve.student import Student
    from trajforge.train.evaluate import held_out_tasks

    students = {False: Student(args.model), True: Student(args.model, bf16=True)}
    tasks = held_out_tasks(HouseholdEnv(), 16, 1)
    cases = {
        "batch 1 without prefix reuse": (1, "none", False),
        "batch 1 with prefix reuse": (1, "session", False),
        "batch 16 without prefix reuse": (16, "none", False),
        "batch 16 with prefix reuse": (16, "session", False),
        "batch 16 with serve prefix cache": (16, "serve", False),
        "batch 16 with prefix reuse, bf16 weights": (16, "session", True),
    }
    return {
        name: _generation_case(name, students[bf16], tasks[:batch], reuse, args.turns)
        for name, (batch, reuse, bf16) in cases.items()
    }


def _ratio(table: dict, a: str, b: str) -> float:
    return round(table[a]["tokens_per_s"] / table[b]["tokens_per_s"], 2)


def _generation_ratios(gen: dict) -> dict[str, float]:
    return {
        "generate batch 16: reuse / no reuse": _ratio(
            gen, "batch 16 with prefix reuse", "batch 16 without prefix reuse"
        ),
        "generate batch 16: serve prefix cache / no reuse": _ratio(
            gen, "batch 16 with serve prefix cache", "batch 16 without prefix reuse"
        ),
        "generate batch 16 with reuse: bf16 / fp32 weights": _ratio(
            gen, "batch 16 with prefix reuse, bf16 weights", "batch 16 with prefix reuse"
        ),
        "generate batch 1: reuse / no reuse": _ratio(
            gen, "batch 1 with prefix reuse", "batch 1 without prefix reuse"
        ),
        "generate with reuse: batch 16 / batch 1": _ratio(
            gen, "batch 16 with prefix reuse", "batch 1 with prefix reuse"
        ),
    }


def _ratios(train: dict) -> dict[str, float]:
    ratio = _ratio
    return {
        "train full: bf16 autocast / fp32": ratio(train, "full bf16 autocast", "full fp32"),
        "train lora: bf16 autocast / fp32": ratio(train, "lora bf16 autocast", "lora fp32"),
        "train bf16 autocast: lora / full": ratio(
            train, "lora bf16 autocast", "full bf16 autocast"
        ),
        "train full: bf16 weights / fp32": ratio(train, "full bf16 weights", "full fp32"),
        "train lora bf16: whole rows / cut rows": ratio(
            train, "lora bf16 autocast, whole rows", "lora bf16 autocast"
        ),
    }


OP_KINDS = {
    "weight products": ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear"),
    "attention": ("aten::_scaled_dot_product", "aten::_flash_attention"),
    "copies and casts": ("aten::copy_", "aten::to", "aten::_to_copy", "aten::clone"),
}
"""Operators by kind (by name prefix); the rest is elementwise work, norms, softmax and loss."""


def _profiled(work) -> dict[str, Any]:
    """Run `work()` under torch.profiler: the wall time, the share of self CPU time of each
    kind of operator (`OP_KINDS`) and the ten operators with the most self CPU time."""
    from torch.profiler import ProfilerActivity, profile

    started = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        work()
    wall = time.perf_counter() - started
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    shares = {
        kind: sum(e.self_cpu_time_total for e in events if e.key.startswith(prefixes)) / total
        for kind, prefixes in OP_KINDS.items()
    }
    shares["everything else"] = 1.0 - sum(shares.values())
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:10]
    return {
        "wall_s": round(wall, 3),
        "shares": {kind: round(share, 3) for kind, share in shares.items()},
        "top_ops": [
            {"op": e.key, "share": round(e.self_cpu_time_total / total, 3), "calls": e.count}
            for e in top
        ],
    }


def _matmul_rate(tokens: int, hidden: int, widths: list[int], repeats: int = 20) -> float:
    """GFLOP/s of bf16 products of (tokens x hidden) by (hidden x width) for the model's
    widths, what its forward is made of."""
    import torch

    flops, seconds = 0.0, 0.0
    for width in widths:
        a = torch.randn(tokens, hidden, dtype=torch.bfloat16)
        b = torch.randn(hidden, width, dtype=torch.bfloat16)
        a @ b  # warm-up
        started = time.perf_counter()
        for _ in range(repeats):
            a @ b
        seconds += time.perf_counter() - started
        flops += 2.0 * tokens * hidden * width * repeats
    return flops / seconds / 1e9


def _product_weights(model) -> tuple[int, list[int]]:
    """Weights used in matrix products per token (every linear layer and the output head),
    and the distinct output widths of those layers."""
    import torch

    linears = [
        m
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and "lora_" not in name
    ]
    return sum(m.weight.numel() for m in linears), sorted({m.out_features for m in linears})


def profile_cases(args, rows) -> dict[str, Any]:
    """Where the lab's training step and the batch-16 generation step spend their time, and
    the tokens/s the CPU's measured bf16 product rate allows."""
    import torch

    from trajforge.envs.household import HouseholdEnv
    from trajforge.serve.student import Student
    from trajforge.train import hf_student, sft
    from trajforge.train.evaluate import held_out_tasks

    config = sft.SFTConfig(model=args.model, batch_size=args.batch, lr=1e-5, warmup=0,
                           max_context=1024, lora_rank=16, bf16=True)  # fmt: skip
    model, codec = hf_student.load_base(config)
    data, _ = _training_data(args, codec, rows, whole=True)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    generator = torch.Generator().manual_seed(0)
    model.train()
    sft._step(model, optimizer, data, codec.pad_id, config, generator)  # warm-up
    held: list[int] = []
    train = _profiled(
        lambda: held.append(sft._step(model, optimizer, data, codec.pad_id, config, generator)[1])
    )
    weights, widths = _product_weights(model)
    hidden = int(model.config.hidden_size)
    rate = _matmul_rate(held[0], hidden, widths)
    train.update(_bound(4.0 * weights, rate, held[0], train["wall_s"]))
    student = Student(args.model, bf16=True)
    tasks = held_out_tasks(HouseholdEnv(), 16, 1)
    _generation_case("warm-up", student, tasks, "session", 1)
    generated: list[dict] = []
    gen = _profiled(
        lambda: generated.append(_generation_case("profiled", student, tasks, "session", 3))
    )
    weights, widths = _product_weights(student.model)
    decode_rate = _matmul_rate(16, hidden, widths)
    gen.update(_bound(2.0 * weights, decode_rate, generated[0]["new_tokens"], gen["wall_s"]))
    gen["note"] = "bound from the decode steps' products (16 rows each); prefills come on top"
    return {"training_lora_bf16_whole_rows": train, "generation_batch16_reuse_bf16": gen}


def _bound(flops_per_token: float, gflops: float, tokens: int, wall: float) -> dict[str, Any]:
    return {
        "tokens": tokens,
        "tokens_per_s": round(tokens / wall, 1),
        "matmul_gflop_per_token": round(flops_per_token / 1e9, 3),
        "bf16_matmul_gflops_measured": round(gflops, 1),
        "tokens_per_s_bound": round(gflops * 1e9 / flops_per_token, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batch", type=int, default=4, help="Training rows per step.")
    parser.add_argument("--tokens", type=int, default=256, help="Tokens per training row.")
    parser.add_argument("--steps", type=int, default=3, help="Timed training steps per case.")
    parser.add_argument("--turns", type=int, default=3, help="Agent steps per episode.")
    parser.add_argument("--no-training", action="store_true", help="Only the generation cases.")
    parser.add_argument("--profile", action="store_true", help="Profiles and bounds only.")
    parser.add_argument("--out", type=Path, default=Path("bench/results/student_speed.json"))
    args = parser.parse_args()
    import torch

    load = os.getloadavg()
    units = "with" if cpu_has_bf16() else "WITHOUT"
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, load {load[0]:.1f}, "
        f"CPU {torch.backends.cpu.get_cpu_capability()} {units} bf16 units"
    )
    if args.profile:
        result = {"command": "python " + " ".join(sys.argv), "model": args.model,
                  "threads": torch.get_num_threads(), "load_average_at_start": load,
                  "profile": profile_cases(args, _rows(12)),
                  "load_average_at_end": os.getloadavg()}  # fmt: skip
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
        print(orjson.dumps(result["profile"], option=orjson.OPT_INDENT_2).decode())
        return
    print("generation:", flush=True)
    gen = generation(args)
    train: dict[str, dict] = {}
    if not args.no_training:
        print("training:", flush=True)
        train = training(args, _rows(12))
    ratios = {**(_ratios(train) if train else {}), **_generation_ratios(gen)}
    fastest = max(gen[name]["tokens_per_s"] for name in gen if name.startswith("batch 16 with"))
    goals = {"generate batch 16 with reuse >= 300 tokens/s": fastest >= GENERATION_GOAL}
    if train:
        bf16_cases = [case for name, case in train.items() if "bf16 autocast" in name]
        fastest_training = max(case["tokens_per_s"] for case in bf16_cases)
        goals["train bf16 >= 1000 tokens/s"] = fastest_training >= TRAIN_GOAL
    for name, value in ratios.items():
        print(f"{name}: {value}x")
    for name, met in goals.items():
        print(f"goal {name}: {'met' if met else 'NOT met'}")
    result = {
        "command": "python " + " ".join(sys.argv),
        "model": args.model,
        "threads": torch.get_num_threads(),
        "cpu": {
            "capability": torch.backends.cpu.get_cpu_capability(),
            "bf16_units": cpu_has_bf16(),
        },
        "load_average_at_start": [round(x, 2) for x in load],
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "training": train,
        "generation": gen,
        "ratios": ratios,
        "goals_met": goals,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

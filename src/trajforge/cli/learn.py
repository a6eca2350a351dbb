"""`trajforge train sft`, `serve` and `eval`: train, serve and evaluate a student."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer
from rich.table import Table

from trajforge.cli.common import (
    DbOption,
    JsonOption,
    config_from_options,
    console,
    err_console,
    guarded,
    open_store,
    print_json,
)
from trajforge.cli.options import Endpoint, Offer, RunFilter, StrategyFlags, option_sets
from trajforge.errors import UserError
from trajforge.progress import ProgressLines
from trajforge.serve.prefix_cache import DEFAULT_MB as DEFAULT_PREFIX_MB
from trajforge.serve.request import DEFAULT_MAX_TOKENS, MAX_BODY_BYTES

if TYPE_CHECKING:
    from trajforge.train.sft import StepDone

train_app = typer.Typer(help="Train a student on trajforge data.", no_args_is_help=True)

DataOption = Annotated[
    list[Path] | None,
    typer.Option("--data", help="Training rows, JSONL (repeatable); default: the store query."),
]


def stored_rows(db: Path | None, runs: RunFilter) -> list[dict[str, Any]]:
    """Training rows of the stored runs the filter selects."""
    from trajforge.train.rows import run_rows

    with open_store(db) as store:
        return run_rows(store.query(runs.selection()))


def sft_command(
    out: Annotated[Path, typer.Option("--out", help="Checkpoint directory to write.")],
    data: DataOption = None,
    db: DbOption = None,
    runs: Annotated[RunFilter, Offer(without=("task", "model"))] = RunFilter(),
    base: Annotated[
        str,
        typer.Option(
            "--model",
            "--base",
            help="'tiny' (from scratch), smollm2-135m, a GGUF file or a Hugging Face model dir.",
        ),
    ] = "tiny",
    steps: Annotated[int, typer.Option("--steps", min=1, help="Optimizer steps.")] = 1200,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Rows per step.")] = 16,
    lr: Annotated[float, typer.Option("--lr", help="Peak learning rate.")] = 1e-3,
    seed: Annotated[int, typer.Option("--seed", help="Initialisation and data order.")] = 0,
    save_every: Annotated[int, typer.Option("--save-every", help="Checkpoint interval.")] = 200,
    hidden: Annotated[int, typer.Option("--hidden", help="tiny: width.")] = 128,
    layers: Annotated[int, typer.Option("--layers", help="tiny: transformer layers.")] = 4,
    lora_rank: Annotated[
        int, typer.Option("--lora-rank", min=0, help="Pretrained models: LoRA rank (0: full).")
    ] = 0,
    bf16: Annotated[bool, typer.Option("--bf16", help="bfloat16 autocast.")] = False,
    accumulate: Annotated[
        int, typer.Option("--accumulate", min=1, help="Batches per optimizer step.")
    ] = 1,
    max_context: Annotated[
        int, typer.Option("--max-context", min=16, help="Longest sequence (tokens).")
    ] = 1024,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from --out.")] = False,
) -> None:
    """Supervised fine-tuning; loss only on assistant turns meant to be learned."""
    from trajforge.train.evaluate import check_training_tasks
    from trajforge.train.rows import read_rows, sequences
    from trajforge.train.sft import SFTConfig, check_out, train_sft

    config = config_from_options(
        SFTConfig, {"model": "--model"}, model=base, steps=steps, batch_size=batch_size, lr=lr,
        seed=seed, save_every=save_every, hidden=hidden, layers=layers, lora_rank=lora_rank,
        bf16=bf16, accumulate=accumulate, max_context=max_context,
    )  # fmt: skip
    check_out(out)
    rows = [r for path in data for r in read_rows(path)] if data else stored_rows(db, runs)
    tasks = sorted({str(r["task_id"]) for r in rows if r.get("task_id")})
    check_training_tasks(tasks)
    lines = ProgressLines("train sft", steps, "step")
    train_sft(
        sequences(rows),
        out,
        config,
        resume=resume,
        manifest={"name": out.name, "train_tasks": tasks},
        progress=lambda done: _step_line(lines, done),
    )
    lines.finish()
    err_console.print(f"wrote checkpoint {out} ({len(rows)} rows, {steps} steps)", highlight=False)


def _step_line(lines: ProgressLines, done: StepDone) -> None:
    lines.count("tok", done.tokens)
    lines.update(done.step, loss=f"{done.loss:.4f}")


train_app.command("sft")(guarded(option_sets(sft_command)))


def dpo_command(
    base: Annotated[Path, typer.Option("--base", help="Starting checkpoint (train sft --out).")],
    data: Annotated[
        list[Path], typer.Option("--data", help="Preference pairs, JSONL (export --format dpo).")
    ],
    out: Annotated[Path, typer.Option("--out", help="Checkpoint directory to write.")],
    steps: Annotated[int, typer.Option("--steps", min=1, help="Optimizer steps.")] = 100,
    beta: Annotated[float, typer.Option("--beta", help="DPO temperature.")] = 0.1,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Pairs per step.")] = 8,
    lr: Annotated[float, typer.Option("--lr", help="Peak learning rate.")] = 1e-4,
    seed: Annotated[int, typer.Option("--seed", help="Data order.")] = 0,
) -> None:
    """Preference training (DPO) of a student; loss only on the chosen and rejected turns."""
    from trajforge.train.dpo import DPOConfig, train_dpo
    from trajforge.train.evaluate import check_training_tasks
    from trajforge.train.rows import preference_pairs, read_rows
    from trajforge.train.sft import check_out

    config = config_from_options(
        DPOConfig, {}, steps=steps, beta=beta, batch_size=batch_size, lr=lr, seed=seed
    )
    check_out(out)
    rows = [r for path in data for r in read_rows(path, form="preference")]
    tasks = sorted({str(r["task_id"]) for r in rows if r.get("task_id")})
    check_training_tasks(tasks)
    lines = ProgressLines("train dpo", steps, "step")
    train_dpo(
        preference_pairs(rows),
        base,
        out,
        config,
        manifest={"name": out.name, "pair_tasks": tasks},
        progress=lambda done: _step_line(lines, done),
    )
    lines.finish()
    err_console.print(f"wrote checkpoint {out} ({len(rows)} pairs, {steps} steps)", highlight=False)


train_app.command("dpo")(guarded(option_sets(dpo_command)))


def serve_command(
    checkpoint: Annotated[
        Path,
        typer.Argument(
            help="Checkpoint (train sft --out), or smollm2-135m, a GGUF file, an HF model dir."
        ),
    ],
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8002,
    host: Annotated[
        str, typer.Option("--host", help="Interface (loopback default).")
    ] = "127.0.0.1",
    max_batch: Annotated[int, typer.Option("--max-batch", min=1, help="Requests per batch.")] = 64,
    max_wait_ms: Annotated[
        float, typer.Option("--max-wait-ms", min=0, help="Batching wait.")
    ] = 5.0,
    max_body_mb: Annotated[
        float, typer.Option("--max-body-mb", min=0.01, help="Larger request bodies get a 413.")
    ] = MAX_BODY_BYTES / 2**20,
    max_tokens: Annotated[
        int,
        typer.Option(
            "--max-tokens",
            min=1,
            help="New tokens for a request that sets no limit (a request's own limit is capped "
            "at 8 times this).",
        ),
    ] = DEFAULT_MAX_TOKENS,
    prefix_cache: Annotated[
        float,
        typer.Option(
            "--prefix-cache",
            min=0,
            help="Megabytes of served sequences' key/value states kept for reuse by requests "
            "that extend them (0: off).",
        ),
    ] = DEFAULT_PREFIX_MB,
    bf16: Annotated[
        bool, typer.Option("--bf16", help="Weights in bfloat16 (faster on CPUs with bf16).")
    ] = False,
    reload_token: Annotated[
        str | None,
        typer.Option(
            "--reload-token",
            envvar="TRAJFORGE_RELOAD_TOKEN",
            help="Token that opens POST /admin/reload (better from $TRAJFORGE_RELOAD_TOKEN); "
            "without one, reloads are refused.",
        ),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(
            "--threads", min=1, help="torch CPU threads (default: torch's, one per core)."
        ),
    ] = None,
    exit_with_stdin: Annotated[
        bool,
        typer.Option(
            "--exit-with-stdin",
            hidden=True,
            help="Stop when standard input closes (the process that started it is gone).",
        ),
    ] = False,
) -> None:
    """Serve a checkpoint as an OpenAI-compatible chat model (tool calls, token ids, logprobs)."""
    import torch
    import uvicorn

    from trajforge.serve.app import ServeConfig, StudentApp
    from trajforge.serve.process import stop_when_stdin_closes
    from trajforge.serve.reload import add_reload_route
    from trajforge.serve.student import Student

    config = ServeConfig(
        max_batch=max_batch,
        max_wait_ms=max_wait_ms,
        max_body_bytes=int(max_body_mb * 2**20),
        max_tokens=max_tokens,
        prefix_cache_mb=prefix_cache,
    )
    if threads:
        torch.set_num_threads(threads)
    app = StudentApp(Student(checkpoint, bf16=bf16), config)
    add_reload_route(app, reload_token or None)
    if exit_with_stdin:
        stop_when_stdin_closes()
    err_console.print(
        f"student {checkpoint} on http://{host}:{port}/v1 (Ctrl-C stops)", highlight=False
    )
    uvicorn.run(app.app, host=host, port=port, log_level="warning", access_log=False)


EvalModelOption = Annotated[str | None, typer.Option("--llm-model", help="llm: model name.")]


@option_sets
def eval_command(
    checkpoint: Annotated[
        Path | None, typer.Option("--ckpt", help="Checkpoint or pretrained model (batched).")
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option("--policy", help="Or a policy by name (llm, household-teacher...)."),
    ] = None,
    difficulty: Annotated[int, typer.Option("--difficulty", min=1, max=3)] = 1,
    tasks: Annotated[int, typer.Option("--tasks", min=1, help="Held-out worlds.")] = 300,
    recovery: Annotated[int, typer.Option("--recovery", min=0, help="Perturbed states.")] = 300,
    samples: Annotated[int, typer.Option("--samples", min=1, help="Runs per task (pass^k).")] = 1,
    temperature: Annotated[
        float, typer.Option("--temperature", help="Sampling temperature.")
    ] = 0.0,
    max_steps: Annotated[int, typer.Option("--max-steps", help="Agent steps per episode.")] = 20,
    bf16: Annotated[bool, typer.Option("--bf16", help="--ckpt: weights in bfloat16.")] = False,
    trained_on: Annotated[
        Path | None, typer.Option("--trained-on", help="JSON list of training task ids to avoid.")
    ] = None,
    endpoint: Annotated[Endpoint, Offer(options={"llm_model": EvalModelOption})] = Endpoint(),
    guidance: StrategyFlags = StrategyFlags(),
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Held-out success (95% CI, pass^k) and recovery from perturbed states (household)."""
    from trajforge.train.evaluate import EvalConfig, evaluate_checkpoint, evaluate_policy

    if (checkpoint is None) == (policy is None):
        raise UserError("give exactly one of --ckpt and --policy")
    if checkpoint is not None and guidance.strategies:
        raise UserError("--strategies guides a policy given by --policy, not a --ckpt student")
    config = EvalConfig(
        difficulty=difficulty,
        tasks=tasks,
        recovery=recovery,
        samples=samples,
        temperature=temperature,
        max_steps=max_steps,
        bf16=bf16,
    )
    avoid = _trained_on(trained_on)
    lines = ProgressLines(f"eval {checkpoint or policy}", None, "episode")
    if checkpoint is not None:
        report = evaluate_checkpoint(checkpoint, config, avoid, lines)
    elif policy is not None:
        options = {
            "base_url": endpoint.base_url,
            "model": endpoint.llm_model,
            "api_key": endpoint.api_key,
            "temperature": temperature,
            "strategies": _strategies(guidance, db, config),
        }
        report = evaluate_policy(policy, options, config, avoid, lines)
    lines.finish()
    if as_json:
        print_json(report)
        return
    console.print(_report_table(report))


def _strategies(guidance: StrategyFlags, db: Path | None, config) -> dict[str, list[str]] | None:
    """The strategies retrieved for every world the evaluation runs (None without any)."""
    if not guidance.strategies:
        return None
    from trajforge.agents.spec import PolicyOptions
    from trajforge.train.evaluate import eval_tasks

    tests, recovery = eval_tasks(config)
    return guidance.guided(PolicyOptions(), db, tests + recovery).strategies


def _trained_on(path: Path | None) -> list[str]:
    if path is None:
        return []
    try:
        value = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise UserError(f"{path}: cannot read a JSON list of task ids ({exc})") from None
    if not isinstance(value, list):
        raise UserError(f"{path}: expected a JSON list of task ids")
    return [str(v) for v in value]


def _report_table(report: dict[str, Any]) -> Table:
    table = Table(title=f"{report['policy']} on held-out household d{report['difficulty']}")
    for column in ("measure", "runs", "rate", "95% CI"):
        table.add_column(column)
    for key in ("success", "recovery"):
        part = report.get(key)
        if part and part["n"]:
            ci = f"[{part['ci'][0]:.3f}, {part['ci'][1]:.3f}]"
            table.add_row(key, str(part["n"]), f"{part['rate']:.3f}", ci)
    for k, value in report.get("pass_hat_k", {}).items():
        table.add_row(f"pass^{k}", "", f"{value:.3f}", "")
    return table

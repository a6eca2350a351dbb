"""The transfer test of reusable strategies: distil on one task family, use on another.

    python bench/strategies.py [DATA_DIR] [--parts transfer,retrieval,tau2-observed]
                               [--seeds 3] [--distil-worlds 150] [--eval-worlds 150]
                               [--error-rate 0.3] [--k 3] [--quick] [--out PATH]
    python bench/strategies.py --parts student [--student-seeds 2 --student-worlds 120 ...]
    python bench/strategies.py --parts tau2-live [--live-tasks 3 --live-seeds 2]
                               [--base-url URL --llm-model M]

The default parts write `bench/results/strategies.json`; other choices of parts write
`bench/results/strategies_PARTS.json` unless `--out` is given.

1. Libraries. Strategies are distilled (`trajforge.strategies.distil`, contrast proposer, kept
   only when held-out tasks of the same family support them) from:
   - `household-d2`: the noisy household teacher (error rate `--error-rate`, 2 samples per
     world, 25 steps) on difficulty-2 worlds;
   - `household-d3-a`: the same teacher on difficulty-3 worlds (50 steps) whose goal object is
     in object set A (the first half of the object types, alphabetically);
   - `tau-retail` and `tau-airline`: the recorded tau-bench runs (AgentRx retail, gpt-4o
     airline), as distractors for retrieval and for the tau2 check.
2. Transfer, household. Each held-out family is evaluated with a library that holds no strategy
   of its own family: difficulty 3 (never used by `household-d2`) with the `household-d2` and
   tau strategies; difficulty-3 worlds whose goal object is in object set B (never used by
   `household-d3-a`) with the `household-d3-a` and tau strategies. Per seed, the same worlds
   and the same teacher seeds run without and with the `--k` strategies the lexical retriever
   ranks first for each task: equal compute (same worlds, same step limit, same episodes; the
   hints cost no steps). Success with Wilson 95% intervals, per seed and pooled, and which
   strategies were retrieved how often.
   The policy is the noisy observable household teacher, which reads one rule form as hints
   (an order of receptacle kinds: "Before you go to a X, go to a Y first.") and ignores other
   text. It is scripted: no language model runs offline fast enough for several seeds here,
   and a scripted reader makes the effect of the guidance itself visible.
3. Retrieval quality: with every library together, for held-out tasks of each family (tau
   tasks held out by the split, household worlds from the evaluation range), how often the
   first (and any of the first 3) retrieved strategies come from the task's own family;
   lexical (BM25) vs embedding (all-MiniLM-L6-v2), and the time each takes.
4. tau retail -> tau2 retail, observational: no offline policy can act in tau2 retail, so the
   tau-retail strategies are checked on the recorded tau2-bench retail runs (gpt-5): success
   of runs that followed each rule vs runs that broke it (Wilson 95%). A correlation in other
   runs, not an intervention.

5. `student`: strategies as conditioning text. Two `tiny` students of the learning lab's
   recipe (`learning_loop.train_rows`) at equal budget, on the same difficulty-1 worlds (a
   difficulty no library is distilled from): one trained on the observable teacher's runs,
   one on the teacher's runs made with the `--k` retrieved strategies as hints, each row with
   those strategies in its system prompt (`trajforge.train.conditioned`). Evaluated on
   held-out difficulty-1 worlds: the plain student without strategies, the conditioned one
   without and with them in its prompt. Wilson 95% per seed and pooled.
6. `tau2-live`: tau retail -> tau2 retail as an intervention. The first `--live-tasks` tau2
   retail tasks whose gold actions a tau-retail rule speaks to, without and with the
   strategies retrieved from the tau libraries, `--live-seeds` sampled runs each (the seed
   goes to the server), by the llm policy over `trajforge serve smollm2-135m` started here
   (or `--base-url`), with the scripted user. Per run: outcome, tool calls, whether the
   strategies were in the prompt and whether the model read them (the served prompt's token
   ids, decoded: a prompt longer than the context loses its start), and the rules it kept.

`--quick` is a smoke run (few worlds, one seed): its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from learning_loop import LabConfig, train_rows
from shared_data import data_dir
from trajforge.agents.household_teacher import NoisyObservableTeacher, ObservableTeacher
from trajforge.agents.llm import STRATEGIES_HEADER, LLMPolicy
from trajforge.agents.user_sim import ScriptedUser
from trajforge.envs import make_env
from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.envs.household.world import OBJECT_PROPERTIES, generate_world
from trajforge.importers.tau2_bench import Tau2BenchImporter
from trajforge.importers.tau_bench import TauBenchImporter
from trajforge.models.openai_compat import OpenAICompatibleModel, OpenAIModelConfig
from trajforge.rollout.episode import Limits, run_episode
from trajforge.rollout.handoff import start_conversation
from trajforge.rollout.tasks import select_tasks
from trajforge.schema import Source, Strategy, Task, Trajectory
from trajforge.serve.student import Student, load_codec, locate
from trajforge.strategies.candidates import ContrastProposer, family_run
from trajforge.strategies.distil import DistilConfig, DistilReport, distil, held_out_task
from trajforge.strategies.patterns import support
from trajforge.strategies.retrieve import RETRIEVERS, Retriever, task_query
from trajforge.train.conditioned import conditioned_rows, conditioned_starts
from trajforge.train.evaluate import check_held_out, held_out_tasks, run_lockstep
from trajforge.train.sft import StepDone
from trajforge.web.compare import wilson

RESULTS = Path(__file__).parent / "results" / "strategies.json"
CHECKOUT = Path(__file__).resolve().parent.parent


def _shown(path: Path) -> str:
    """A path as the result file records it: relative to the checkout when inside it."""
    resolved = path.resolve()
    return str(resolved.relative_to(CHECKOUT)) if resolved.is_relative_to(CHECKOUT) else str(path)


OBJECTS_A = frozenset(sorted(OBJECT_PROPERTIES)[: len(OBJECT_PROPERTIES) // 2])
STEPS = {2: 25, 3: 50}
EVAL_SEED_BASE = 500_000
TAU_FILES = {
    "tau-retail": "agentrx/tau-retail/tau_dataset_full.json",
    "tau-airline": "tau-bench/historical_trajectories/gpt-4o-airline.json",
}
STUDENT_DIFFICULTY = 1
"""The students' worlds: a difficulty no library is distilled from."""
TAU2_RETAIL = "tau2-bench/toolorchestra_gpt-5/toolorchestra_retail_gpt-5_1trial.json"


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def goal_object(task: Task) -> str:
    return generate_world(int(task.data["world_seed"]), int(task.data["difficulty"])).goal.obj_type


def worlds(difficulty: int, count: int, start: int, keep: Callable[[Task], bool]) -> list[Task]:
    """The first `count` valid worlds of a difficulty from seed `start` that `keep` accepts."""
    found: list[Task] = []
    seed = start
    while len(found) < count:
        task = task_for(seed, difficulty)
        seed += 1
        if task.gold and keep(task):  # a world whose goal is met or unreachable has no plan
            found.append(task)
    return found


def teacher_runs(
    tasks: list[Task], samples: int, error_rate: float, hints: dict[str, list[str]], seed: int
) -> list[Trajectory]:
    runs, started = [], time.monotonic()
    for index, task in enumerate(tasks):
        for sample in range(samples):
            teacher = NoisyObservableTeacher(
                seed=seed * 1_000_003 + index * 7 + sample, error_rate=error_rate, strategies=hints
            )
            limits = Limits(max_steps=STEPS[int(task.data["difficulty"])])
            runs.append(run_episode(HouseholdEnv(), teacher, task, limits=limits).with_id())
        if (index + 1) % 50 == 0 or index + 1 == len(tasks):
            rate = (index + 1) / (time.monotonic() - started)
            eta = (len(tasks) - index - 1) / rate
            log(f"  {index + 1}/{len(tasks)} worlds ({rate:.1f}/s, eta {eta:.0f}s)")
    return runs


def report_json(report: DistilReport) -> dict[str, Any]:
    return {
        "distil_runs": report.distil_runs,
        "distil_tasks": report.distil_tasks,
        "held_out_runs": report.held_out_runs,
        "held_out_tasks": report.held_out_tasks,
        "candidates": len(report.judged),
        "kept": [
            {
                "name": item.strategy.name,
                "text": item.strategy.text,
                "in_sample": item.strategy.effect.distilled.model_dump(),
                "held_out": item.strategy.effect.held_out.model_dump(),
            }
            for item in report.judged
            if item.kept and item.strategy.effect is not None
        ],
        "rejected": sum(not item.kept for item in report.judged),
    }


HOUSEHOLD_FAMILIES: dict[str, tuple[int, Callable[[Task], bool]]] = {
    "household-d2": (2, lambda task: True),
    "household-d3-a": (3, lambda task: goal_object(task) in OBJECTS_A),
}


def household_libraries(args: argparse.Namespace, families: set[str]) -> dict[str, DistilReport]:
    """The libraries of the household `families` (those the chosen parts use)."""
    reports = {}
    for family, (difficulty, keep) in HOUSEHOLD_FAMILIES.items():
        if family not in families:
            continue
        log(f"distil {family}: teacher runs")
        tasks = worlds(difficulty, args.distil_worlds, 0, keep)
        runs = teacher_runs(tasks, 2, args.error_rate, {}, seed=0)
        reports[family] = distil(runs, [ContrastProposer()], DistilConfig(family=family))
    return reports


def tau_libraries(shared: Path) -> tuple[dict[str, DistilReport], dict[str, list[Trajectory]]]:
    reports, runs = {}, {}
    for family, name in TAU_FILES.items():
        runs[family] = [t.with_id() for t in TauBenchImporter().read(shared / name)]
        reports[family] = distil(runs[family], [ContrastProposer()], DistilConfig(family=family))
    return reports, runs


def rate_json(successes: int, n: int) -> dict[str, Any]:
    interval = wilson(successes, n)
    return {"successes": successes, "n": n, "rate": successes / n if n else None,
            "wilson95": list(interval) if interval else None}  # fmt: skip


def transfer(
    tasks: list[Task], library: list[Strategy], args: argparse.Namespace
) -> dict[str, Any]:
    """Without vs with retrieved strategies, same worlds and teacher seeds, per seed."""
    retrieved = retrieve(tasks, library, args.k)
    hints = {task_id: [s.text for s in found] for task_id, found in retrieved.items()}
    arms: dict[str, list[dict[str, Any]]] = {"without": [], "with": []}
    for seed in range(args.seeds):
        for arm, given in (("without", {}), ("with", hints)):
            log(f"  seed {seed}, {arm} strategies")
            runs = teacher_runs(tasks, 1, args.error_rate, given, seed=100 + seed)
            arms[arm].append(rate_json(sum(bool(r.outcome.success) for r in runs), len(runs)))
    pooled = {arm: pooled_rate(rows) for arm, rows in arms.items()}
    return {
        "tasks": len(tasks),
        "per_seed": arms,
        "pooled": pooled,
        "difference": pooled["with"]["rate"] - pooled["without"]["rate"],
        **retrieval_counts(retrieved),
    }


def retrieve(tasks: list[Task], library: list[Strategy], k: int) -> dict[str, list[Strategy]]:
    """Task id -> the `k` strategies the lexical retriever ranks first for it."""
    ranked = RETRIEVERS["lexical"](library).rank_many([task_query(t) for t in tasks], k)
    return {t.id: [r.strategy for r in hits] for t, hits in zip(tasks, ranked, strict=True)}


def retrieval_counts(retrieved: dict[str, list[Strategy]]) -> dict[str, Any]:
    counts = Counter(s.name for found in retrieved.values() for s in found)
    return {
        "retrieved": dict(counts.most_common()),
        "tasks_with_an_order_hint": sum(
            any(s.text.startswith("Before you") for s in found) for found in retrieved.values()
        ),
    }


def retrieval_quality(library: list[Strategy], queries: dict[str, list[Task]]) -> dict[str, Any]:
    result = {}
    for kind, make in RETRIEVERS.items():
        started = time.monotonic()
        ranker: Retriever = make(library)
        built = time.monotonic() - started
        per_family = {}
        for family, tasks in queries.items():
            top1 = top3 = 0
            for hits in ranker.rank_many([task_query(task) for task in tasks], 3):
                names = [r.strategy.name.split("/")[0] for r in hits]
                top1 += bool(names) and names[0] == family
                top3 += family in names
            per_family[family] = {"queries": len(tasks), "hit_at_1": top1 / len(tasks),
                                  "hit_at_3": top3 / len(tasks)}  # fmt: skip
        result[kind] = {
            "families": per_family,
            "build_s": round(built, 2),
            "query_s": round(time.monotonic() - started - built, 2),
        }
        log(f"retrieval {kind}: {per_family}")
    return result


def tau2_check(tau_retail: list[Strategy], shared: Path) -> dict[str, Any]:
    runs = [family_run(t) for t in Tau2BenchImporter().read(shared / TAU2_RETAIL)]
    rows = {}
    for strategy in tau_retail:
        if strategy.rule is None:
            continue
        counts = support(strategy.rule, [(item.first, item.success) for item in runs])
        rows[strategy.name] = {
            "text": strategy.text,
            "runs_it_speaks_to": counts.runs,
            "followed": rate_json(counts.followed_successes, counts.followed),
            "broken": rate_json(counts.violated_successes, counts.violated),
            "lift": counts.lift(),
        }
    return {"tau2_retail_runs": len(runs), "strategies": rows}


def household_transfer(
    reports: dict[str, DistilReport], tau: list[Strategy], args: argparse.Namespace
) -> dict[str, Any]:
    log("transfer: household-d2 -> difficulty 3")
    d3 = worlds(3, args.eval_worlds, EVAL_SEED_BASE, lambda task: True)
    log("transfer: household-d3-a -> difficulty 3, object set B")
    d3_b = worlds(3, args.eval_worlds, EVAL_SEED_BASE, lambda t: goal_object(t) not in OBJECTS_A)
    return {
        "household-d2 -> household-d3": transfer(d3, reports["household-d2"].kept() + tau, args),
        "household-d3-a -> household-d3-b": transfer(
            d3_b, reports["household-d3-a"].kept() + tau, args
        ),
    }


def retrieval_queries(
    tau_runs: dict[str, list[Trajectory]], args: argparse.Namespace
) -> dict[str, list[Task]]:
    queries: dict[str, list[Task]] = {}
    for family in TAU_FILES:
        run_tasks = {t.task.id for t in tau_runs[family]}
        env_tasks = select_tasks(family, "200")
        queries[family] = [t for t in env_tasks if t.id in run_tasks and held_out_task(t.id, 0.4)]
    start = EVAL_SEED_BASE * 2
    queries["household-d2"] = worlds(2, args.eval_worlds, start, lambda task: True)
    queries["household-d3-a"] = worlds(
        3, args.eval_worlds, start, lambda t: goal_object(t) in OBJECTS_A
    )
    return queries


def teacher_demos(tasks: list[Task], hints: dict[str, list[str]], config: LabConfig) -> list:
    """The observable teacher's run of every world, reading `hints` (its successes are the
    lab's E data; with hints, the runs follow the order rules among them)."""
    teacher, limits = ObservableTeacher(hints), Limits(max_steps=config.max_steps)
    return [run_episode(HouseholdEnv(), teacher, task, limits=limits) for task in tasks]


def training_lines(steps: int, every: int = 100) -> Callable[[StepDone], None]:
    """A progress line every `every` optimizer steps: loss, rate and ETA."""
    started = time.monotonic()

    def line(done: StepDone) -> None:
        if done.step % every and done.step != steps:
            return
        rate = done.step / (time.monotonic() - started)
        eta = (steps - done.step) / rate
        log(f"  step {done.step}/{steps} loss {done.loss:.3f} ({rate:.2f}/s, eta {eta:.0f}s)")

    return line


def student_config(args: argparse.Namespace) -> LabConfig:
    return LabConfig(
        train_worlds=args.student_worlds,
        test_worlds=args.student_tests,
        steps=args.student_steps,
        lr=args.student_lr,
        hidden=args.student_hidden,
        heads=4,
        layers=args.student_layers,
        difficulty=STUDENT_DIFFICULTY,
        work=str(args.work),
    )


PROMPTS = {"plain": ("without",), "conditioned": ("without", "with")}
"""The prompts each student is evaluated with: without or with the retrieved strategies (the
plain student never saw them in training)."""


def student_comparison(library: list[Strategy], args: argparse.Namespace) -> dict[str, Any]:
    """Tiny students trained without and with retrieved strategies in their rows' system
    prompts (equal steps, batch, size and worlds), each evaluated on held-out worlds with and
    without the strategies in the prompt."""
    config = student_config(args)
    train = [task_for(seed, config.difficulty) for seed in range(config.train_worlds)]
    tests = held_out_tasks(HouseholdEnv(), config.test_worlds, config.difficulty)
    retrieved = retrieve(train + tests, library, args.k)
    hints = {task_id: [s.text for s in found] for task_id, found in retrieved.items()}
    plain_runs, guided_runs = teacher_demos(train, {}, config), teacher_demos(train, hints, config)
    rows = {
        "plain": conditioned_rows(plain_runs, {}),
        "conditioned": conditioned_rows(guided_runs, hints),
    }
    cells: dict[str, list[dict[str, Any]]] = {}
    timing: dict[str, list[float]] = {"train_s": [], "eval_s": []}
    for seed in range(args.student_seeds):
        for arm, arm_rows in rows.items():
            log(f"student seed {seed}, {arm}: training on {len(arm_rows)} rows")
            started = time.monotonic()
            out = Path(config.work) / f"{arm}-seed{seed}"
            train_rows(config, arm_rows, out, arm, seed, progress=training_lines(config.steps))
            timing["train_s"].append(round(time.monotonic() - started, 1))
            student = Student(out)
            check_held_out([t.id for t in tests], student.manifest["train_tasks"])
            started = time.monotonic()
            for prompt in PROMPTS[arm]:
                given = hints if prompt == "with" else {}
                starts = conditioned_starts(HouseholdEnv, tests, given)
                runs = run_lockstep(student, starts, config.max_steps, max_new_tokens=16)
                won = sum(bool(r.outcome.success) for r in runs)
                cells.setdefault(f"{arm} student, {prompt} strategies", []).append(
                    rate_json(won, len(runs))
                )
                log(f"  {prompt} strategies: {won}/{len(runs)}")
            timing["eval_s"].append(round(time.monotonic() - started, 1))
    pooled = {name: pooled_rate(per_seed) for name, per_seed in cells.items()}
    main_arm = "conditioned student, with strategies"
    return {
        "difficulty": config.difficulty,
        "train_worlds": config.train_worlds,
        "held_out_worlds": len(tests),
        "steps": config.steps,
        "batch_size": config.batch_size,
        "lr": config.lr,
        "hidden": config.hidden,
        "layers": config.layers,
        "max_steps": config.max_steps,
        "rows": {arm: len(arm_rows) for arm, arm_rows in rows.items()},
        "teacher_runs_changed_by_hints": sum(
            _actions(a) != _actions(b) for a, b in zip(plain_runs, guided_runs, strict=True)
        ),
        "per_seed": cells,
        "pooled": pooled,
        "difference_conditioned_with_vs_plain_without": _difference(
            pooled, main_arm, "plain student, without strategies"
        ),
        "difference_conditioned_with_vs_without": _difference(
            pooled, main_arm, "conditioned student, without strategies"
        ),
        **retrieval_counts({t.id: retrieved[t.id] for t in tests}),
        **timing,
    }


def _actions(run: Trajectory) -> list[str]:
    return [f"{c.name}{c.arguments}" for m in run.messages for c in m.tool_calls or []]


def pooled_rate(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    return rate_json(sum(r["successes"] for r in per_seed), sum(r["n"] for r in per_seed))


def _difference(pooled: dict[str, dict[str, Any]], arm: str, base: str) -> float:
    return round(pooled[arm]["rate"] - pooled[base]["rate"], 4)


LIVE_MODEL = "smollm2-135m"
"""The live policy's model when no --base-url is given: served here by `trajforge serve`."""


@contextmanager
def live_endpoint(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    """(base URL, model name): the one given, or `trajforge serve smollm2-135m` started on a
    free loopback port for the duration (stopped after)."""
    if args.base_url:
        yield args.base_url, args.llm_model or "model"
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "trajforge.cli.main", "serve", LIVE_MODEL]
    server = subprocess.Popen([*command, "--port", str(port)], stderr=subprocess.PIPE)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_ready(server, base_url)
        yield base_url, LIVE_MODEL
    finally:
        server.terminate()
        server.wait(timeout=30)


def _wait_ready(server: subprocess.Popen, base_url: str, timeout_s: float = 900) -> None:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if server.poll() is not None:
            error = server.stderr.read().decode()[-2000:] if server.stderr else ""
            raise SystemExit(f"`trajforge serve {LIVE_MODEL}` exited: {error}")
        try:
            urllib.request.urlopen(f"{base_url}/models", timeout=5).close()
            log(f"live model up after {time.monotonic() - started:.0f}s")
            return
        except OSError:
            time.sleep(2)
    raise SystemExit(f"`trajforge serve {LIVE_MODEL}` not ready after {timeout_s:.0f}s")


def live_decoder() -> Callable[[list[int]], str]:
    """Token ids -> text with the tokenizer of the locally served model."""
    _, manifest, model_dir = locate(LIVE_MODEL)
    codec = load_codec(model_dir, manifest)
    tokenizer = codec.tokenizer  # type: ignore[attr-defined]
    return lambda ids: str(tokenizer.decode(ids))


def live_tasks(strategies: list[Strategy], count: int) -> list[Task]:
    """The first `count` tau2 retail tasks whose gold actions call a rule's later action
    (the tasks the tau-retail rules speak to)."""
    later = {s.rule.then for s in strategies if s.rule is not None}
    tasks = select_tasks("tau2-retail", "200")
    spoken_to = [t for t in tasks if any(a["name"] in later for a in t.gold["actions"])]
    return spoken_to[:count]


def live_run(task: Task, hints: dict[str, list[str]], model: OpenAICompatibleModel, steps: int):
    env, user = make_env("tau2-retail"), ScriptedUser()
    start = start_conversation(env, task, user, Source(harness="bench-strategies"))
    policy = LLMPolicy(model, hints)
    return run_episode(
        env, policy, task, user=user, trajectory=start, limits=Limits(max_steps=steps)
    )


def seen_text(run: Trajectory, decode: Callable[[list[int]], str] | None) -> str | None:
    """What the model read in its first call: the prompt token ids the server returns
    (`prompt_token_ids`, after its own truncation to the context), decoded; None when the
    server returns none or there is no tokenizer to read them with."""
    ids = run.llm_calls[0].response.get("prompt_token_ids") if run.llm_calls else None
    return decode(ids) if ids and decode is not None else None


def live_row(
    run: Trajectory, strategies: list[Strategy], decode: Callable[[list[int]], str] | None
) -> dict[str, Any]:
    """What one live episode did: outcome, tool calls, prompt size, whether the model read
    the strategies, and the rules it kept."""
    first = run.llm_calls[0] if run.llm_calls else None
    system = first.request["messages"][0]["content"] if first else ""
    seen = seen_text(run, decode)
    actions = family_run(run)
    rules = {}
    for strategy in strategies:
        if strategy.rule is not None:
            counts = support(strategy.rule, [(actions.first, actions.success)])
            rules[strategy.name] = (
                "followed" if counts.followed else "broken" if counts.violated else None
            )
    return {
        "task": run.task.id,
        "success": bool(run.outcome.success),
        "reward": run.outcome.reward,
        "termination": run.outcome.termination_reason,
        "model_failure": run.metadata.get("model_failure"),
        "tool_calls": [c.name for m in run.messages for c in m.tool_calls or []],
        "strategies_in_prompt": STRATEGIES_HEADER in (system or ""),
        "strategies_read_by_model": None if seen is None else STRATEGIES_HEADER in seen,
        "first_prompt_tokens": first.usage.prompt_tokens if first and first.usage else None,
        "rules": rules,
    }


def tau2_live(library: Libraries, args: argparse.Namespace) -> dict[str, Any]:
    """tau retail -> tau2 retail with a live policy: tau2 retail tasks without and with the
    strategies retrieved from the tau libraries, the same tasks and sampling seeds."""
    tau_retail = library.tau["tau-retail"].kept()
    tasks = live_tasks(tau_retail, args.live_tasks)
    retrieved = retrieve(tasks, library.tau_kept(), args.k)
    hints = {task_id: [s.text for s in found] for task_id, found in retrieved.items()}
    rows: dict[str, list[dict[str, Any]]] = {"without": [], "with": []}
    started = time.monotonic()
    decode = None if args.base_url else live_decoder()
    with live_endpoint(args) as (base_url, name):
        done, total = 0, args.live_seeds * 2 * len(tasks)
        for seed in range(args.live_seeds):
            config = OpenAIModelConfig(
                base_url=base_url, model=name, temperature=args.live_temperature,
                max_tokens=args.live_max_tokens, seed=seed, timeout_s=900, max_retries=0,
            )  # fmt: skip
            model = OpenAICompatibleModel(config)
            for arm, given in (("without", {}), ("with", hints)):
                for task in tasks:
                    run = live_run(task, given, model, args.live_steps)
                    rows[arm].append({"seed": seed, **live_row(run, tau_retail, decode)})
                    done += 1
                    rate = done / (time.monotonic() - started)
                    eta = (total - done) / rate
                    log(f"  live {done}/{total} ({rate * 60:.1f}/min, eta {eta:.0f}s)")
    pooled = {
        arm: rate_json(sum(r["success"] for r in arm_rows), len(arm_rows))
        for arm, arm_rows in rows.items()
    }
    return {
        "policy": base_url if args.base_url else f"trajforge serve {LIVE_MODEL} (llm policy)",
        "user": "scripted",
        "tasks": [t.id for t in tasks],
        "samples_per_task_and_arm": args.live_seeds,
        "temperature": args.live_temperature,
        "max_tokens": args.live_max_tokens,
        "max_steps": args.live_steps,
        "pooled": pooled,
        "rule_outcomes": {arm: _rule_counts(arm_rows) for arm, arm_rows in rows.items()},
        "runs": rows,
        **retrieval_counts(retrieved),
        "seconds": round(time.monotonic() - started, 1),
    }


def _rule_counts(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    counts: dict[str, Counter] = {}
    for row in rows:
        for name, kept in row["rules"].items():
            counts.setdefault(name, Counter())[str(kept)] += 1
    return {name: dict(c) for name, c in counts.items()}


@dataclass
class Libraries:
    household: dict[str, DistilReport]
    tau: dict[str, DistilReport]
    tau_runs: dict[str, list[Trajectory]]

    def tau_kept(self) -> list[Strategy]:
        return self.tau["tau-retail"].kept() + self.tau["tau-airline"].kept()

    def everything(self) -> list[Strategy]:
        reports = [*self.household.values(), *self.tau.values()]
        return [s for report in reports for s in report.kept()]


@dataclass
class Part:
    key: str
    """Where its result goes in the result file."""
    run: Callable[[Libraries, argparse.Namespace, Path], Any]
    household: tuple[str, ...] = ()
    """The household libraries it uses."""


BOTH = tuple(HOUSEHOLD_FAMILIES)
PARTS: dict[str, Part] = {
    "transfer": Part(
        "transfer",
        lambda libs, args, shared: household_transfer(libs.household, libs.tau_kept(), args),
        BOTH,
    ),
    "retrieval": Part(
        "retrieval",
        lambda libs, args, shared: retrieval_quality(
            libs.everything(), retrieval_queries(libs.tau_runs, args)
        ),
        BOTH,
    ),
    "tau2-observed": Part(
        "tau_retail_to_tau2_retail",
        lambda libs, args, shared: tau2_check(libs.tau["tau-retail"].kept(), shared),
    ),
    "tau2-live": Part(
        "tau_retail_to_tau2_retail_live", lambda libs, args, shared: tau2_live(libs, args)
    ),
    "student": Part(
        "student_conditioning",
        lambda libs, args, shared: student_comparison(
            libs.household["household-d2"].kept() + libs.tau_kept(), args
        ),
        ("household-d2",),
    ),
}
DEFAULT_PARTS = "transfer,retrieval,tau2-observed"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", default=None)
    parser.add_argument("--parts", default=DEFAULT_PARTS, help=f"of {', '.join(PARTS)}")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--distil-worlds", type=int, default=150)
    parser.add_argument("--eval-worlds", type=int, default=150)
    parser.add_argument("--error-rate", type=float, default=0.3)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--student-seeds", type=int, default=2)
    parser.add_argument("--student-worlds", type=int, default=120)
    parser.add_argument("--student-steps", type=int, default=300)
    parser.add_argument("--student-lr", type=float, default=2e-3)
    parser.add_argument("--student-hidden", type=int, default=64)
    parser.add_argument("--student-layers", type=int, default=2)
    parser.add_argument("--student-tests", type=int, default=40)
    parser.add_argument("--work", type=Path, default=Path("/tmp/strategies-bench"))
    parser.add_argument("--live-tasks", type=int, default=3)
    parser.add_argument("--live-seeds", type=int, default=2)
    parser.add_argument("--live-steps", type=int, default=3)
    parser.add_argument("--live-max-tokens", type=int, default=64)
    parser.add_argument("--live-temperature", type=float, default=0.7)
    parser.add_argument("--base-url", default=None, help="tau2-live: an endpoint to use")
    parser.add_argument("--llm-model", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    args.parts = args.parts.split(",")
    unknown = [part for part in args.parts if part not in PARTS]
    if unknown:
        parser.error(f"unknown part {unknown[0]!r}: choose from {', '.join(PARTS)}")
    if args.quick:
        args.seeds, args.distil_worlds, args.eval_worlds = 1, 30, 20
        args.student_seeds, args.student_worlds, args.student_steps = 1, 30, 20
        args.student_tests = 10
    if args.out is None:
        default = args.parts == DEFAULT_PARTS.split(",")
        name = "strategies" if default else "strategies_" + "_".join(args.parts)
        args.out = RESULTS.with_name(name.replace("-", "_") + ".json")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    shared = data_dir(args.data)
    started = time.monotonic()
    tau, tau_runs = tau_libraries(shared)
    families = {family for part in args.parts for family in PARTS[part].household}
    libraries = Libraries(household_libraries(args, families), tau, tau_runs)
    result: dict[str, Any] = {
        "command": "python bench/strategies.py " + " ".join(argv or sys.argv[1:]),
        "settings": {k: _shown(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "policy": "noisy observable household teacher reading order hints (scripted)",
        "object_set_a": sorted(OBJECTS_A),
        "steps": {str(d): steps for d, steps in STEPS.items()},
        "libraries": {name: report_json(r) for name, r in {**libraries.household, **tau}.items()},
    }
    for name in args.parts:
        log(f"part {name}")
        part = PARTS[name]
        result[part.key] = part.run(libraries, args, shared)
    result["seconds"] = round(time.monotonic() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    for name, arm in result.get("transfer", {}).items():
        log(f"{name}: without {arm['pooled']['without']} with {arm['pooled']['with']}")
    for name, cell in result.get("student_conditioning", {}).get("pooled", {}).items():
        log(f"{name}: {cell}")
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()

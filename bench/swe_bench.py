"""SWE-bench verdicts reproduced without Docker, and replay fidelity of the real runs.

Usage: python bench/swe_bench.py [--repo NAME ...] [--instance ID ...] [--replay]
       [--data DATA_DIR] [--backend local|ray] [--concurrency N]
       [-o bench/results/swe_bench.json]

For each shared mini-swe-agent (gemini-3-pro) run of the chosen instances (default: every
instance of `instances.jsonl` that has a run): build the environment (cold time when this run
built it, then the warm lookup), validate the instance (`trajforge swe validate`), time a
warm reset, judge the run's submitted patch (`info.submission`) as the harness does and
compare with its `report.json` (resolved, and the FAIL_TO_PASS / PASS_TO_PASS tests that
differ). With `--replay`, also re-execute the run's bash actions in the sandbox (per-action
output match after normalizing, final diff against the submission, outcome agreement).
With `--backend ray`, the builds, validations and judgements run as Ray tasks
(`--concurrency` at a time); the warm timings and the replay stay in this process.

Resumable: each finished instance is appended to `<output>.partial.jsonl` and skipped on the
next start; builds and validations are cached (`$TRAJFORGE_SWE_BENCH_CACHE`). The result
is rewritten after each instance and says exactly which instances it covers, and under
`commands` which command made each of them (a resumed run may differ, e.g. in `--replay`).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from shared_data import REPO, data_dir
from trajforge.envs.replay import replay_run
from trajforge.envs.swe_bench import SweBenchEnv, get_instance, select_instances
from trajforge.envs.swe_bench.backends import run_jobs
from trajforge.envs.swe_bench.build import build_env, ensure_env, load_built, spec_for
from trajforge.envs.swe_bench.cache import cache_dir
from trajforge.envs.swe_bench.judge import judge_patch
from trajforge.envs.swe_bench.repos import mirror
from trajforge.envs.swe_bench.testbed import Testbed
from trajforge.envs.swe_bench.validate import validate_instance
from trajforge.importers.mini_swe_agent import MiniSweAgentImporter

RUNS = "swe-bench-verified/mini-swe-agent_gemini-3-pro"


def _timed(action: Any) -> tuple[Any, float]:
    started = time.monotonic()
    value = action()
    return value, round(time.monotonic() - started, 2)


def _differing(report: dict, ours: Any) -> dict[str, list[str]]:
    """Tests whose pass/fail differs between the recorded report and our judgement."""
    recorded = report.get("tests_status") or {}
    differ: dict[str, list[str]] = {}
    for group in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        theirs = set((recorded.get(group) or {}).get("success", []))
        mine = set(getattr(ours, group).success)
        changed = sorted(theirs ^ mine)
        if changed:
            differ[group] = changed[:20]
    return differ


def build_and_judge(instance_id: str, runs: Path, cache: Path) -> dict[str, Any]:
    """The heavy part of an instance, run on the chosen backend: build (or find) its
    environment, validate it, judge the run's submission."""
    instance = get_instance(instance_id)
    (built, made), build_s = _timed(lambda: build_env(instance, cache))
    validation = validate_instance(instance, cache)
    traj = json.loads((runs / "trajs" / instance_id / f"{instance_id}.traj.json").read_text())
    submission = traj["info"].get("submission") or ""
    repo_mirror = mirror(instance, cache)
    verdict, judge_s = _timed(lambda: judge_patch(instance, built, repo_mirror, submission))
    return {
        "built_here": made,
        "build_s": build_s,
        "validation": validation,
        "verdict": verdict,
        "judge_s": judge_s,
    }


def bench_instance(
    instance_id: str, judged: dict[str, Any], runs: Path, cache: Path, replay: bool
) -> dict[str, Any]:
    """One instance's row: the judged part, then (in this process) the warm lookup, a warm
    reset, the recorded verdict and optionally the replay."""
    instance = get_instance(instance_id)
    built, warm_s = _timed(lambda: ensure_env(instance, cache))
    testbed, reset_s = _timed(lambda: Testbed.create(instance, built, mirror(instance, cache)))
    testbed.close()
    report = json.loads((runs / "logs" / instance_id / "report.json").read_text())
    report = report.get(instance_id, report)
    validation, verdict = judged["validation"], judged["verdict"]
    row: dict[str, Any] = {
        "instance_id": instance_id,
        "repo": instance.repo,
        "validated": validation.validated,
        "validation_reason": validation.reason,
        "build_cold_s": judged["build_s"] if judged["built_here"] else validation.build_s,
        **_environment_of(instance_id, cache),
        "build_warm_s": warm_s,
        "reset_s": reset_s,
        "judge_s": judged["judge_s"],
        "recorded_resolved": bool(report.get("resolved")),
        "judged_resolved": verdict.resolved,
        "judge_status": verdict.status,
        "agree": verdict.resolved == bool(report.get("resolved")),
        "differing_tests": _differing(report, verdict),
    }
    if replay:
        traj_path = runs / "trajs" / instance_id / f"{instance_id}.traj.json"
        row["replay"] = _replay(traj_path)
    return row


def _environment_of(instance_id: str, cache: Path) -> dict[str, Any]:
    """The instance's environment: its key, the instance it was built for, its cold build time
    (instances sharing an environment share that one build)."""
    built = load_built(spec_for(get_instance(instance_id)), cache)
    if built is None:
        return {}
    return {
        "env_key": built.key,
        "env_built_for": built.manifest["built_from"],
        "env_build_s": built.manifest["seconds"],
    }


def _replay(path: Path) -> dict[str, Any]:
    trajectory = next(MiniSweAgentImporter().read(path))
    env = SweBenchEnv()
    try:
        result, seconds = _timed(lambda: replay_run(trajectory, env))
    finally:
        env.close()
    return {
        "actions": result.calls,
        "actions_match": result.exact,
        "final_diff_equals_submission": result.final_state_agree,
        "outcome_agree": result.outcome_agree,
        "seconds": seconds,
        "first_mismatches": [m.reason[:300] for m in result.mismatches[:3]],
    }


def _disagreement(row: dict[str, Any]) -> dict[str, Any]:
    keys = ("instance_id", "recorded_resolved", "judged_resolved", "judge_status")
    return {key: row[key] for key in keys} | {"differing_tests": row["differing_tests"]}


def this_command() -> str:
    return "python bench/swe_bench.py " + shlex.join(sys.argv[1:])


def summarize(rows: list[dict[str, Any]], command: str) -> dict[str, Any]:
    validated = [r for r in rows if r["validated"]]
    agree = sum(r["agree"] for r in validated)
    replays = [r["replay"] for r in rows if "replay" in r]
    builds = {r["env_key"]: r["env_build_s"] for r in rows if "env_key" in r}
    summary: dict[str, Any] = {
        "command": command,
        "commands": {
            made: [r["instance_id"] for r in rows if r.get("command", command) == made]
            for made in dict.fromkeys(r.get("command", command) for r in rows)
        },
        "environments": {
            "built": len(builds),
            "cold_build_s": sorted(builds.values()),
            "warm_lookup_s_max": max((r["build_warm_s"] for r in rows), default=None),
            "reset_s": sorted(r["reset_s"] for r in rows),
            "judge_s": sorted(r["judge_s"] for r in rows),
        },
        "subset": {
            "instances": [r["instance_id"] for r in rows],
            "cpus": os.cpu_count(),
            "load_average_at_write": [round(x, 1) for x in os.getloadavg()],
            "note": "the instances run on this machine so far; the rest of the shared runs "
            "are not covered by these figures",
        },
        "verdict_agreement": {
            "validated_instances": len(validated),
            "agree": agree,
            "ratio": round(agree / len(validated), 4) if validated else None,
            "all_instances": len(rows),
            "agree_all": sum(r["agree"] for r in rows),
        },
        "excluded_not_validated": {
            r["instance_id"]: r["validation_reason"] for r in rows if not r["validated"]
        },
        "disagreements": [_disagreement(r) for r in validated if not r["agree"]],
        "instances": rows,
    }
    if replays:
        actions = sum(r["actions"] for r in replays)
        summary["replay_fidelity"] = {
            "runs": len(replays),
            "actions": actions,
            "actions_match": sum(r["actions_match"] for r in replays),
            "action_match_ratio": round(sum(r["actions_match"] for r in replays) / actions, 4)
            if actions
            else None,
            "final_diff_equals_submission": sum(
                bool(r["final_diff_equals_submission"]) for r in replays
            ),
            "outcome_agree": sum(r["outcome_agree"] for r in replays),
        }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repo", action="append")
    parser.add_argument("--instance", action="append")
    parser.add_argument("--replay", action="store_true")
    parser.add_argument("--data")
    parser.add_argument("--backend", default="local", help="local or ray (builds and judging)")
    parser.add_argument("--concurrency", type=int, default=1, help="Ray tasks at a time")
    parser.add_argument("-o", "--output", default=str(REPO / "bench/results/swe_bench.json"))
    args = parser.parse_args()
    runs = data_dir(args.data) / RUNS
    have_runs = {p.name for p in (runs / "trajs").iterdir()}
    chosen = [i.instance_id for i in select_instances(args.repo, args.instance)]
    chosen = [i for i in chosen if i in have_runs]
    output = Path(args.output)
    partial = output.with_suffix(".partial.jsonl")
    done = (
        [json.loads(line) for line in partial.read_text().splitlines()] if partial.exists() else []
    )
    finished = {r["instance_id"] for r in done}
    cache = cache_dir()
    started = time.monotonic()
    todo = [i for i in chosen if i not in finished]
    heavy = functools.partial(build_and_judge, runs=runs, cache=cache)
    for number, (index, judged) in enumerate(
        run_jobs(args.backend, heavy, todo, args.concurrency), start=1
    ):
        instance_id = todo[index]
        row = bench_instance(instance_id, judged, runs, cache, args.replay)
        row["command"] = this_command()
        with open(partial, "a") as handle:
            handle.write(json.dumps(row) + "\n")
        done.append(row)
        write_summary(done, chosen, output)
        elapsed = time.monotonic() - started
        print(
            f"[{number}/{len(todo)}] {instance_id}: recorded {row['recorded_resolved']}, judged "
            f"{row['judged_resolved']} ({'validated' if row['validated'] else 'not validated'}); "
            f"{elapsed / 60:.1f} min, about {elapsed / number * (len(todo) - number) / 60:.1f} "
            "min left",
            file=sys.stderr,
            flush=True,
        )
    summary = write_summary(done, chosen, output)
    print(json.dumps(summary["verdict_agreement"]))


def write_summary(done: list[dict[str, Any]], chosen: list[str], output: Path) -> dict[str, Any]:
    """The result over the chosen instances finished so far (rewritten after each one)."""
    cache = cache_dir()
    rows = [
        _environment_of(r["instance_id"], cache) | r
        for r in done
        if r["instance_id"] in set(chosen)
    ]
    summary = summarize(rows, this_command())
    output.write_text(json.dumps(summary, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    main()

"""End to end on real runs: distil strategies from tau-bench retail and airline runs, retrieve
them for a retail task none of them was distilled from, and see them in the prompt the llm
policy sends, as the recording proxy records it."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.importers import import_paths
from trajforge.models.mock_server import MockOpenAIServer
from trajforge.proxy import ProxyConfig, ProxyServer
from trajforge.proxy.session import trajectory_id
from trajforge.rollout.tasks import select_tasks
from trajforge.store import Store, TrajectoryFilter
from trajforge.strategies.candidates import ContrastProposer
from trajforge.strategies.distil import DistilConfig, held_out_task
from trajforge.strategies.run import distil_store, retrieve_for

AIRLINE = "tau-bench/historical_trajectories/gpt-4o-airline.json"
RETAIL = "agentrx/tau-retail/tau_dataset_full.json"


def _library(db: Path, shared_data: Path) -> list:
    with Store(db) as store:
        import_paths(store, [str(shared_data / RETAIL), str(shared_data / AIRLINE)])
        stored = []
        for env in ("tau-retail", "tau-airline"):
            flt = TrajectoryFilter(environment=env)
            config = DistilConfig(family=env)
            stored += distil_store(store, flt, [ContrastProposer()], config).stored
    return stored


def test_a_distilled_strategy_reaches_the_prompt_of_an_unseen_task(
    tmp_path: Path, shared_data: Path
):
    db = tmp_path / "runs.db"
    stored = _library(db, shared_data)
    retail = [s for s in stored if s.scope.environment == "tau-retail"]
    assert retail and any(s.scope.environment == "tau-airline" for s in stored)
    # an unseen task: held out from the distillation, in none of the evidence
    task = next(t for t in select_tasks("tau-retail", "100") if held_out_task(t.id, 0.4))
    assert all(e.task_id != task.id for s in stored for e in s.evidence)
    with Store(db) as store:
        hits = retrieve_for(store, task, k=2)
    assert [h.strategy.scope.environment for h in hits] == ["tau-retail", "tau-retail"]

    tasks_file = tmp_path / "task.json"
    tasks_file.write_text(json.dumps([task.model_dump(mode="json")]))
    proxy_db = tmp_path / "proxy.db"
    with (
        MockOpenAIServer(["Could you give me your email address?"]) as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), proxy_db) as proxy,
    ):
        result = CliRunner().invoke(
            app,
            ["rollout", "--env", "tau-retail", "--tasks", str(tasks_file), "--policy", "llm",
             "--base-url", proxy.session_url("guided"), "--llm-model", "m", "--api-key", "k",
             "--strategies", "2", "--max-steps", "1", "--run", "guided", "--db", str(db), "--json"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        sent = upstream.requests[0]["messages"][0]["content"]
    recorded = Store(proxy_db).get(trajectory_id("guided"))
    system = recorded.messages[0]
    assert system.role == "system" and "## Strategies that worked on similar tasks" in system.text()
    for hit in hits:
        assert f"- {hit.strategy.text}" in system.text()
        assert hit.strategy.text in sent
    # the rollout's own record keeps the environment's system prompt as it was
    with Store(db) as store:
        [episode] = store.rows(TrajectoryFilter(run="guided"))
        run = store.get(episode.id)
    assert "Strategies that worked" not in run.messages[0].text()

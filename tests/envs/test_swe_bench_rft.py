"""`trajforge rft --env swe-bench` on a real instance (psf/requests 6028) with an LLM policy
behind the mock OpenAI-compatible server: of k=2 samples, the one whose bash actions fix the
bug is judged resolved by the real judge, verified by replay and becomes the only SFT row;
the one that does not is judged unresolved, and where the two part the fix is chosen over the
failed action in a preference pair. The rows load with `datasets`. On the Ray backend the
episodes run as Ray tasks (the mock server and the cache reached from the workers) and give
the same rows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.envs.swe.sandbox import available_backends
from trajforge.generate.rows import validate_row
from trajforge.models.mock_server import MockOpenAIServer
from trajforge.store import Store

INSTANCE = "psf__requests-6028"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),  # a cold build from PyPI when it runs alone; a guard, not a goal
    pytest.mark.skipif("bwrap" not in available_backends(), reason="needs bubblewrap"),
]


def _bash(thought: str, command: str) -> str:
    return f"THOUGHT: {thought}\n\n```bash\n{command}\n```"


LOOK = _bash(
    "find where the scheme is prepended.",
    "grep -n 'netloc, path = path, netloc' requests/utils.py",
)
FIX = _bash(
    "parse_url leaves the credentials out of netloc; put them back.",
    """python - <<'EOF'
import pathlib
path = pathlib.Path('requests/utils.py')
text = path.read_text()
old = '        netloc, path = path, netloc\\n\\n    if scheme is None:'
fix = "    if auth:\\n        netloc = '@'.join([auth, netloc])\\n    if scheme"
assert text.count(old) == 1
path.write_text(text.replace(old, old.replace('    if scheme', fix)))
EOF""",
)
WRONG = _bash(
    "mark the swap.",
    "sed -i 's/netloc, path = path, netloc$/netloc, path = path, netloc  # swapped/' "
    "requests/utils.py",
)
TESTS = _bash(
    "run the tests.", "python -m pytest -q tests/test_utils.py -k prepend_scheme | tail -3"
)
SUBMIT = _bash(
    "done.", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"
)
SCRIPT = [LOOK, FIX, TESTS, SUBMIT, LOOK, WRONG, SUBMIT]
"""Sample 0 fixes the bug; sample 1 (the episodes run in order) only adds a comment."""


def _rft(tmp_path: Path, base_url: str, backend: str) -> dict:
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps([INSTANCE]))
    args = ["rft", "--env", "swe-bench", "--tasks", str(tasks), "--policy", "llm"]
    args += ["--base-url", base_url, "--llm-model", "mock", "--k", "2", "--pairs"]
    args += ["--out", str(tmp_path / "data"), "--db", str(tmp_path / "rft.db"), "--json"]
    args += ["--backend", backend]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(params=["local", "ray"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "local":
        yield "local"
        return
    ray = pytest.importorskip("ray")
    yield "ray"
    ray.shutdown()  # the command started it, with this test's environment variables


def test_rft_keeps_the_judged_fix_and_pairs_it_with_the_failed_sample(
    tmp_path: Path, swe_bench_cache: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    import datasets

    monkeypatch.setenv("TRAJFORGE_SWE_BENCH_CACHE", str(swe_bench_cache))
    with MockOpenAIServer(SCRIPT) as server:
        summary = _rft(tmp_path, server.base_url, backend)
        assert len(server.requests) == len(SCRIPT)
    counts = {key: summary[key] for key in ("sampled", "successes", "verified", "kept", "pairs")}
    assert counts == {"sampled": 2, "successes": 1, "verified": 1, "kept": 1, "pairs": 1}
    with Store(tmp_path / "rft.db") as store:
        runs = {t.metadata["sample"]: t for t in store.query()}
    fixed, failed = runs[0], runs[1]
    assert fixed.outcome.details["status"] == "resolved"
    assert failed.outcome.details["status"] == "unresolved"
    assert "# swapped" in failed.outcome.details["patch"]

    data = tmp_path / "data"
    sft = datasets.load_dataset("json", data_files=str(data / "train.messages.jsonl"))["train"]
    assert sft["run_id"] == [fixed.id] and sft["learned"] == [[2, 4, 6, 8]]
    pairs = datasets.load_dataset("json", data_files=str(data / "train.preference.jsonl"))
    [pair] = pairs["train"]
    validate_row(pair)
    assert (pair["run_id"], pair["chosen_run_id"], pair["prompt_end"]) == (failed.id, fixed.id, 4)
    assert "if auth:" in pair["chosen"][0]["content"]
    assert "# swapped" in pair["rejected"][0]["content"]
    assert not (data / "train.prompt-completion.jsonl").exists()

"""`ServeProcess`: the real `trajforge serve` as a child process, its counters, its failures."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from trajforge.errors import UserError
from trajforge.serve.app import ServeConfig
from trajforge.serve.process import ServeProcess
from trajforge.serve.reload import RELOAD_PATH, new_reload_token, reload_headers
from trajforge.serve.student import Student, codec_identity

LONG = [{"role": "user", "content": "look " * 40}]  # past one hashed block of the cache
CHAT = {"model": "student", "messages": LONG, "max_tokens": 4}


def test_the_child_server_answers_counts_and_reloads(student_dir: Path, tmp_path: Path) -> None:
    token = new_reload_token()
    with ServeProcess(student_dir, ServeConfig(), tmp_path / "serve.log", 1, token) as server:
        assert server.running
        before = server.stats()
        assert (before["requests"], before["batches"]) == (0, 0)
        assert before["codec"] == codec_identity(Student(student_dir))
        for _ in range(2):
            answer = httpx.post(f"{server.url}/v1/chat/completions", json=CHAT, timeout=60)
            assert answer.status_code == 200
        after = server.stats()
        generated = len(answer.json()["choices"][0]["token_ids"])
        assert (after["requests"], after["batches"]) == (2, 2)
        assert after["prompt_tokens"] == 2 * answer.json()["usage"]["prompt_tokens"]
        assert after["cached_tokens"] > 0  # the second request reused the first one's states
        assert after["generated_tokens"] >= generated and after["model_seconds"] > 0
        reload = httpx.post(
            f"{server.url}{RELOAD_PATH}", json={"checkpoint": str(student_dir)},
            headers=reload_headers(token), timeout=60,
        )  # fmt: skip
        assert reload.status_code == 200
    assert not server.running


def test_a_checkpoint_that_cannot_load_fails_with_the_servers_own_words(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "trajforge.json").write_text("{not json")
    server = ServeProcess(broken, ServeConfig(), tmp_path / "serve.log")
    with pytest.raises(UserError, match="exited while starting") as caught:
        server.start()
    assert "not valid JSON" in str(caught.value)  # the child's error, from its log
    assert not server.running


PARENT = """
import sys, time
import subprocess
import sys
import time
from pathlib import Path
from trajforge.serve.app import ServeConfig
from trajforge.serve.process import ServeProcess
server = ServeProcess(Path(sys.argv[1]), ServeConfig(), Path(sys.argv[2])).start()
print(server._process.pid, flush=True)
time.sleep(600)
"""


def test_the_server_does_not_outlive_a_killed_parent(student_dir: Path, tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(student_dir), str(tmp_path / "serve.log")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    child = int(parent.stdout.readline())  # type: ignore[union-attr]
    assert _alive(child)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 60
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(child), "the server outlived the process that started it"


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie awaiting its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"

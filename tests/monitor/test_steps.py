"""Action extraction: bash-in-text (mini-swe-agent) and tool calls (tau-bench)."""

from __future__ import annotations

import orjson

from trajforge.monitor.bash import _BLOCK, classify, observation_error, parse_bash_actions
from trajforge.monitor.steps import action_format, extract_steps
from trajforge.monitor.toolcalls import parse_tool_actions
from trajforge.schema import Message, Task, ToolCall, Trajectory


def _kinds(script: str) -> list[str]:
    actions, _ = parse_bash_actions(f"THOUGHT: x\n\n```bash\n{script}\n```", "")
    return [a.kind for a in actions]


def test_bash_commands_are_classified_by_what_they_do_to_the_repo():
    assert _kinds("sed -n '10,40p' src/app.py") == ["read"]
    assert _kinds("sed -i 's/a/b/' src/app.py") == ["edit"]
    assert _kinds("grep -rn 'def f' src | head -5") == ["search", "read"]
    assert _kinds("cd /testbed && python -m pytest tests/test_app.py -x") == ["files", "test"]
    assert _kinds("git checkout src/app.py") == ["revert"]
    assert _kinds("git diff") == ["diff"]
    assert _kinds("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A") == [
        "submit",
        "search",
    ]


def test_heredoc_write_keeps_its_target_and_counts_the_lines():
    script = "cat <<'EOF' > tests/test_new.py\nimport x\n\ndef test_a():\n    pass\nEOF"
    [action] = parse_bash_actions(f"```bash\n{script}\n```", "")[0]
    assert action.kind == "write"
    assert action.paths == ("tests/test_new.py",)
    assert action.lines_written == 4
    assert action.on_test_file


def test_ranged_read_records_its_region():
    action = classify("sed -n '100,150p' django/db/models/query.py")
    assert action.region == ("django/db/models/query.py", 100, 150)


def test_observation_errors():
    assert not observation_error("<returncode>0</returncode>\n<output>\nok\n</output>")
    assert observation_error("<returncode>1</returncode>\n<output>\n</output>")
    assert observation_error("<returncode>0</returncode><output>Traceback (most recent call last)")
    assert observation_error("Please always provide EXACTLY ONE action in triple backticks")


def test_two_bash_blocks_are_a_format_error():
    actions, error = parse_bash_actions("```bash\nls\n```\n```bash\npwd\n```", "")
    assert error and [a.kind for a in actions] == ["format_error"]


def _tool_run() -> Trajectory:
    call = ToolCall(id="c1", name="get_order_details", arguments='{"order_id": "#W1"}')
    update = ToolCall(id="c2", name="cancel_pending_order", arguments='{"order_id": "#W1"}')
    return Trajectory(
        task=Task(id="t"),
        messages=[
            Message(role="system", content="policy"),
            Message(role="user", content="cancel my order"),
            Message(role="assistant", tool_calls=[call]),
            Message(role="tool", content='{"status": "pending"}', tool_call_id="c1"),
            Message(role="assistant", tool_calls=[update]),
            Message(role="tool", content="Error: order not found", tool_call_id="c2"),
            Message(role="assistant", content="Sorry, I could not cancel it."),
            Message(role="user", content="ok ###STOP###"),
        ],
    )


def test_tool_call_runs_are_read_through_their_tool_calls():
    traj = _tool_run()
    assert action_format(traj) == "tools"
    steps = extract_steps(traj)
    assert [s.index for s in steps] == [2, 4, 6]
    assert [[a.kind for a in s.actions] for s in steps] == [["read"], ["edit"], ["respond"]]
    assert [s.error for s in steps] == [False, True, False]
    assert steps[0].actions[0].paths == ("#W1",)
    assert steps[2].user_turn
    assert all(s.estimated_tokens for s in steps)


def test_real_mini_swe_agent_steps_use_the_recorded_usage(swe_trajs):
    traj = swe_trajs[0]
    steps = extract_steps(traj)
    assert action_format(traj) == "bash"
    assert len(steps) == len(traj.assistant_indices())
    recorded = {c.message_index: c.usage.prompt_tokens for c in traj.llm_calls}
    assert [s.prompt_tokens for s in steps] == [recorded[s.index] for s in steps]
    assert not any(s.estimated_tokens for s in steps)


def _as_bash_tool_calls(traj: Trajectory) -> Trajectory:
    """The same run as a tool-calling harness would record it: each ```bash block becomes a
    `bash` tool call and the observation its tool message."""
    messages = list(traj.messages)
    for index in traj.assistant_indices():
        script = _BLOCK.findall(messages[index].text())[0]
        call = ToolCall(
            id=f"c{index}", name="bash", arguments=orjson.dumps({"command": script}).decode()
        )
        messages[index] = Message(role="assistant", content="THOUGHT", tool_calls=[call])
        if index + 1 < len(messages):
            answer = messages[index + 1].text()
            messages[index + 1] = Message(role="tool", content=answer, tool_call_id=f"c{index}")
    return traj.model_copy(update={"messages": messages})


def _action_view(step) -> list[tuple]:
    return [(a.kind, a.paths, a.region, a.lines_written, a.on_test_file) for a in step.actions]


def test_bash_tool_calls_read_like_bash_blocks_on_real_runs(swe_trajs):
    def one_block_each(traj: Trajectory) -> bool:
        return all(
            len(_BLOCK.findall(traj.messages[i].text())) == 1 for i in traj.assistant_indices()
        )

    runs = [t for t in swe_trajs[:60] if one_block_each(t)][:30]
    assert len(runs) >= 20
    for traj in runs:
        as_text, as_tools = extract_steps(traj), extract_steps(_as_bash_tool_calls(traj))
        assert action_format(_as_bash_tool_calls(traj)) == "tools"
        assert [_action_view(s) for s in as_tools] == [_action_view(s) for s in as_text]
        answered = [i for i, s in enumerate(as_text) if "<returncode>" in s.observation]
        assert [as_tools[i].error for i in answered] == [as_text[i].error for i in answered]


def test_file_editor_tool_calls_are_reads_writes_and_edits():
    def editor(**arguments) -> ToolCall:
        return ToolCall(
            id="e", name="str_replace_editor", arguments=orjson.dumps(arguments).decode()
        )

    calls = [
        editor(command="view", path="/testbed/pkg/core.py", view_range=[10, 40]),
        editor(command="str_replace", path="/testbed/pkg/core.py", old_str="a", new_str="b\nc"),
        editor(command="create", path="/testbed/tests/test_core.py", file_text="x\ny\nz"),
        editor(command="undo_edit", path="/testbed/pkg/core.py"),
    ]
    message = Message(role="assistant", tool_calls=calls)
    actions, error = parse_tool_actions(message, [Message(role="tool", content="ok")])
    assert [(a.kind, a.paths, a.lines_written, a.on_test_file) for a in actions] == [
        ("read", ("pkg/core.py",), 0, False),
        ("edit", ("pkg/core.py",), 2, False),
        ("write", ("tests/test_core.py",), 3, True),
        ("revert", ("pkg/core.py",), 0, False),
    ]
    assert actions[0].region == ("pkg/core.py", 10, 40) and not error


def test_shell_tool_failures_are_errors():
    call = ToolCall(id="s", name="execute_bash", arguments='{"command": "python x.py"}')
    message = Message(role="assistant", tool_calls=[call])
    for output, failed in [
        ("done\n[Command finished with exit code 1]", True),
        ("done\n[Command finished with exit code 0]", False),
        ("Traceback (most recent call last):\n  ...", True),
        ("<returncode>2</returncode><output></output>", True),
        ("plain output", False),
    ]:
        _, error = parse_tool_actions(message, [Message(role="tool", content=output)])
        assert error is failed, output

"""The token view of a proxy-recorded run: what the RL export trains on.

It reuses the RL exporter's `token_sequences`: the session's calls cut into growing token
sequences at drift points. Each token is a cell coloured by its logprob; tokens the model
sampled (loss mask 1) are framed, tokens the harness added (tool results, user turns; mask 0)
are grey, and a new sequence (a drift point) starts with a marker saying why. Token text
needs the model's tokenizer, which the store does not keep, so cells show token ids; the
message a call produced is shown beside its tokens.
"""

from __future__ import annotations

from trajforge.export.rl import DRIFT_STATUSES, token_sequences
from trajforge.schema import LLMCall, Trajectory
from trajforge.web.html import h, run_link

MAX_TOKENS = 4000
"""Tokens drawn per sequence; the rest are counted."""


def token_view(traj: Trajectory) -> str:
    calls = {call.id: call for call in traj.llm_calls}
    sequences = list(token_sequences(traj))
    if not sequences:
        return (
            f"<h1>Tokens of {run_link(traj.id)}</h1><p id=no-tokens>this run has no model calls "
            "with token ids and logprobs (only runs recorded through the proxy have them)</p>"
        )
    parts = [
        f"<h1>Tokens of {run_link(traj.id)}</h1>",
        _legend(),
        f"<p>{len(sequences)} training sequence(s) from {len(traj.llm_calls)} model call(s)</p>",
    ]
    for number, sequence in enumerate(sequences):
        first = calls.get(sequence.call_ids[0])
        parts.append(_sequence(number, sequence, first, traj))
    return "".join(parts)


def _legend() -> str:
    swatches = "".join(
        f'<span class="tok" style="background:{_colour(lp)}">{lp:g}</span>'
        for lp in (0.0, -0.5, -1.0, -2.0, -4.0, -8.0)
    )
    return (
        f'<p class="legend">logprob: {swatches} · <span class="tok model">sampled</span> loss '
        'mask 1 · <span class="tok harness">added</span> loss mask 0 (harness: tool results, '
        'user turns) · <span class="tok prompt">prompt</span> · '
        '<span class="drift">drift</span> a new sequence starts</p>'
    )


def _start(call: LLMCall | None) -> str:
    """Why a sequence starts: the session's first call, a drift point, or a prompt that does
    not extend the sequence."""
    status = ((call.extra if call else {}).get("drift") or {}).get("status")
    if status in DRIFT_STATUSES:
        return f'<span class="drift">drift point: history {h(status)}</span>'
    if status in (None, "first"):
        return "starts at the first call"
    return f'<span class="drift">new sequence: the prompt does not extend it ({h(status)})</span>'


def _sequence(number: int, sequence, first: LLMCall | None, traj: Trajectory) -> str:
    cells = [
        f'<span class="tok prompt" title="prompt token {t}">{t}</span>'
        for t in sequence.prompt[:MAX_TOKENS]
    ]
    for token, mask, logprob in zip(
        sequence.tokens[:MAX_TOKENS], sequence.mask, sequence.logprobs, strict=False
    ):
        if mask:
            cells.append(
                f'<span class="tok model" style="background:{_colour(logprob)}" '
                f'title="token {token} logprob {logprob:.4f} mask 1" '
                f'data-logprob="{logprob:.4f}">{token}</span>'
            )
        else:
            cells.append(f'<span class="tok harness" title="token {token} mask 0">{token}</span>')
    hidden = len(sequence.prompt) + len(sequence.tokens) - len(cells)
    more = f' <span class="dim">… {hidden} more tokens</span>' if hidden > 0 else ""
    sampled = sum(sequence.mask)
    mean = sum(sequence.logprobs) / sampled if sampled else 0.0
    return (
        f'<section class="sequence" id="seq-{number}"><h2>Sequence {number}: '
        f"{_start(first)}</h2>"
        f"<p class=dim>{len(sequence.prompt)} prompt tokens, {len(sequence.tokens)} after it "
        f"({sampled} sampled, mean logprob {mean:.3f}), calls {h(', '.join(sequence.call_ids))}"
        f'</p>{_answers(sequence.call_ids, traj)}<div class="tokens">{"".join(cells)}{more}</div>'
        "</section>"
    )


def _answers(call_ids: list[str], traj: Trajectory) -> str:
    items = []
    for call in traj.llm_calls:
        if call.id in call_ids and call.message_index is not None:
            message = traj.messages[call.message_index]
            text = message.text() or " ".join(c.name for c in message.tool_calls or [])
            items.append(f"<li>message {call.message_index}: {h(text[:200])}</li>")
    return f'<ul class="answers">{"".join(items)}</ul>' if items else ""


def _colour(logprob: float) -> str:
    """Green for a likely token, through yellow, to red for an unlikely one (logprob <= -6)."""
    share = max(0.0, min(1.0, -logprob / 6.0))
    hue = 120 * (1 - share)
    return f"hsl({hue:.0f} 70% 80%)"

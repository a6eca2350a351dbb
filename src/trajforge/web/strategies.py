"""The strategies pages: the library (latest version of each) and one strategy's versions,
where it applies, its evidence (linked to the runs and messages) and its measured effect."""

from __future__ import annotations

from trajforge.errors import UserError
from trajforge.schema import Strategy, StrategySupport
from trajforge.store import Store
from trajforge.strategies.library import latest, versions
from trajforge.web.guards import NotFound
from trajforge.web.html import h, link, run_link, table, url


def _support(counts: StrategySupport) -> str:
    lift = counts.lift()
    shown = f"{lift:+.2f}" if lift is not None else "n/a"
    return (
        f"followed {counts.followed_successes}/{counts.followed}, "
        f"broken {counts.violated_successes}/{counts.violated} ({shown})"
    )


def strategies_page(store: Store) -> str:
    found = latest(store)
    head = (
        "<h1>Strategies</h1><p>Rules distilled from many runs of one task family, kept only "
        "when runs of held-out tasks support them. Success of runs that followed the rule vs "
        "runs that broke it.</p>"
    )
    if not found:
        return head + (
            "<p class=dim>no strategies yet: run <code>trajforge strategies distil</code></p>"
        )
    rows = [
        [
            link(url("/strategies/view", {"name": s.name}), s.name),
            str(s.version),
            h(s.scope.environment),
            h(s.source),
            h(_support(s.effect.held_out)) if s.effect else "-",
            str(len(s.evidence)),
            h(s.text),
        ]
        for s in found
    ]
    headers = ["name", "version", "environment", "source", "held-out", "evidence", "text"]
    return head + table(headers, rows)


def strategy_page(store: Store, name: str) -> str:
    try:
        found = versions(store, name)
    except UserError as exc:
        raise NotFound(str(exc)) from None
    current = found[-1]
    history = table(
        ["version", "source", "text"],
        [[str(s.version), h(s.source), h(s.text)] for s in reversed(found)],
    )
    return (
        f"<h1>{h(current.name)}</h1><p><strong>{h(current.text)}</strong></p>"
        f"{_scope(current)}{_effect(current)}<h2>Evidence</h2>{_evidence(current)}"
        f"<h2>Versions</h2>{history}"
    )


def _scope(s: Strategy) -> str:
    features = ", ".join(f"{k}={v}" for k, v in s.scope.task_features.items()) or "none shared"
    return (
        f"<p>Applies to <code>{h(s.scope.environment)}</code>; task features {h(features)}; "
        f"{h(s.scope.situation)}.</p>"
    )


def _effect(s: Strategy) -> str:
    if s.effect is None:
        return ""
    return (
        f"<p>In-sample: {h(_support(s.effect.distilled))}<br>Held-out "
        f"({s.effect.held_out_tasks} tasks): {h(_support(s.effect.held_out))}</p>"
    )


def _evidence(s: Strategy) -> str:
    rows = [
        [
            run_link(e.trajectory_id, {"msg": e.message_index} if e.message_index else None),
            h(e.task_id),
            str(e.message_index),
            h(e.kind),
            "decisive here" if e.decisive else "",
        ]
        for e in s.evidence
    ]
    return table(["run", "task", "message", "kind", "diagnosis"], rows)

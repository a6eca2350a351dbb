"""The datasets page: the training data this store can produce, with counts, a sample and
the command that writes it."""

from __future__ import annotations

import orjson

from trajforge.diagnose.model import Diagnosis
from trajforge.generate.views import ViewsConfig, diagnosis_item, recovery_item
from trajforge.store import Store
from trajforge.store.runs import diagnosis_counts, first_diagnosis, outcome_counts
from trajforge.web.html import h, table


def datasets_page(store: Store, db_shown: str) -> str:
    return "".join(
        [
            "<h1>Datasets</h1>",
            _diagnosis_section(store, db_shown),
            _outcome_section(store, db_shown),
        ]
    )


def _diagnosis_section(store: Store, db: str) -> str:
    counts = diagnosis_counts(store)
    rows = [
        [h(env), h(category), "yes" if verified else "no", "yes" if fix else "no", str(n)]
        for env, category, verified, fix, n in counts
    ]
    total = sum(n for *_, n in counts)
    verified = sum(n for _, _, v, _, n in counts if v)
    recovery = sum(n for _, _, v, fix, n in counts if v and fix)
    head = (
        "<h2>Diagnosis and actor-recovery views</h2>"
        f'<p id="diagnosis-counts">{total} diagnoses, {verified} verified; the diagnosis view '
        f"has one item per verified diagnosis (prefix → diagnosis), the recovery view one per "
        f"verified diagnosis with a correction ({recovery}: prefix + feedback → corrected "
        "action).</p>"
        f"<pre class=command>trajforge diagnose views --db {h(db)} --out views/</pre>"
    )
    if not counts:
        return head + "<p class=dim>no diagnoses yet: run <code>trajforge diagnose run</code></p>"
    headers = ["environment", "category", "verified", "correction", "diagnoses"]
    return head + table(headers, rows) + _sample(store)


def _sample(store: Store) -> str:
    found = first_diagnosis(store) or first_diagnosis(store, verified=False)
    if found is None:
        return ""
    traj_id, document = found
    diagnosis = Diagnosis.model_validate_json(document)
    traj = store.get(traj_id)
    items = [("diagnosis view", diagnosis_item(traj, diagnosis, ViewsConfig()))]
    recovery = recovery_item(traj, diagnosis)
    if recovery is not None:
        items.append(("recovery view", recovery))
    shown = "".join(
        f"<details><summary>sample {name} item (run {h(traj_id[:12])})</summary>"
        f"<pre>{h(orjson.dumps(item, option=orjson.OPT_INDENT_2).decode())}</pre></details>"
        for name, item in items
    )
    return shown


def _outcome_section(store: Store, db: str) -> str:
    counts = outcome_counts(store)
    rows = [[h(env), str(runs), str(ok), str(proxied)] for env, runs, ok, proxied in counts]
    return (
        "<h2>RFT sets and token-level RL samples</h2>"
        "<p>Rejection-sampling fine-tuning keeps the verified successes of K rollouts per task "
        "(deduplicated); the RL export turns proxy-recorded runs into token sequences with "
        "logprobs and loss masks.</p>"
        f"{table(['environment', 'runs', 'successes', 'recorded by the proxy'], rows)}"
        "<pre class=command>"
        f"trajforge rft ENV --db {h(db)} --k 4 --out rft/\n"
        f"trajforge export --db {h(db)} --format rl --out rl.jsonl\n"
        f"trajforge export --db {h(db)} --format sft --out sft.jsonl\n"
        f"trajforge export --db {h(db)} --format dpo --out pairs.jsonl"
        "</pre>"
    )

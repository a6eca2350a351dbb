"""Prefix features: numbers that describe a run up to step k, from the prefix alone.

`prefix_features(traj)` returns one vector per step: the vector at position k-1 describes
`messages[: steps[k-1].end]` and nothing after it. Features are computed in one pass by a
`PrefixState` that is updated step by step, so scoring every prefix costs O(steps).

`FEATURE_VERSION` names the feature set; a saved detector records it and refuses to score
with another. Bump it whenever a feature is added, removed or computed differently.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter

import numpy as np
from sklearn.feature_extraction.text import HashingVectorizer

from trajforge.monitor.actions import Action
from trajforge.monitor.steps import Step, extract_steps, step_tokens
from trajforge.schema import Trajectory

FEATURE_VERSION = "prefix-v4"

HEDGES = (
    "maybe",
    "perhaps",
    "might ",
    "seems",
    "seem ",
    "possibly",
    "not sure",
    "unclear",
    "wait",
    "hmm",
    "actually",
    "strange",
    "weird",
    "unexpected",
    "confus",
    "surpris",
    " odd",
)
RETRIES = (
    "try again",
    "another approach",
    "different approach",
    "instead",
    "still fail",
    "still not",
    "didn't work",
    "doesn't work",
    "not working",
    "did not work",
    "revert",
    "undo",
    "workaround",
    "hack",
    "mistake",
    "wrong",
    "oops",
    "let me re",
    "again",
)
CONFIDENT = (
    "confirmed",
    "works",
    "fixed",
    "passed",
    "passes",
    "success",
    "as expected",
    "correct",
    "verified",
    "resolved",
)
NUMBERED_SED = re.compile(r"-i\S*\s+['\"]?\d+(,\d+)?\s*[acdis]")
TEST_FAILED = re.compile(r"\b(\d+ failed|FAILED|failures=|errors=|\d+ error)\b")
KINDS: tuple[str, ...] = ("read", "search", "edit", "write", "test", "run", "diff", "revert")
KINDS += ("files", "respond")
KINDS += ("think", "escalate", "format_error", "submit")


class PrefixState:
    """Running counts over the steps seen so far; `vector()` gives the features."""

    def __init__(self, instruction: str | None = None) -> None:
        self.k = 0
        self.instruction_chars = len(instruction or "")
        self.tokens = 0
        self.first_prompt = 0
        self.last_prompt = 0
        self.completions: list[int] = []
        self.reasoning: list[int] = []
        self.observation_chars: list[int] = []
        self.errors: list[bool] = []
        self.texts: list[str] = []
        self.step_texts: list[str] = []
        self.step_words: list[set[str]] = []
        self.seen_texts: Counter[str] = Counter()
        self.repeats = 0
        self.near_repeats = 0
        self.cycle2 = 0
        self.cycle3 = 0
        self.kinds: Counter[str] = Counter()
        self.paths_seen: set[str] = set()
        self.last_new_path = 0
        self.reads = 0
        self.rereads = 0
        self.regions: list[tuple[str, int, int]] = []
        self.region_rereads = 0
        self.edits_per_file: Counter[str] = Counter()
        self.edit_steps: list[int] = []
        self.first_edit = 0
        self.explored_before_edit = False
        self.test_file_edits = 0
        self.lines_written: list[int] = []
        self.tests: list[tuple[int, bool]] = []
        self.runs: list[tuple[int, bool]] = []
        self.hedges: list[int] = []
        self.retries: list[int] = []
        self.confident: list[int] = []
        self.tracebacks = 0
        self.created: set[str] = set()
        self.source_edits: Counter[str] = Counter()
        self.numbered_sed_edits = 0
        self.outcomes: dict[str, bool] = {}
        self.fail_then_pass = 0
        self.last_pass = 0
        self.user_turns = 0

    def update(self, step: Step) -> None:
        self.k += 1
        self._usage(step)
        self._repeats(step)
        for action in step.actions:
            self._action(action, step)
        self._text(step)
        self.errors.append(step.error)
        self.observation_chars.append(len(step.observation))
        self.tracebacks += "Traceback (most recent call last)" in step.observation
        self.user_turns += step.user_turn

    def _usage(self, step: Step) -> None:
        self.tokens += step_tokens(step)
        if self.k == 1:
            self.first_prompt = step.prompt_tokens
        self.last_prompt = step.prompt_tokens
        self.completions.append(step.completion_tokens)
        self.reasoning.append(len(step.reasoning))

    def _repeats(self, step: Step) -> None:
        text = " ; ".join(a.text for a in step.actions) or " ".join(step.text.split())[:200]
        words = set(text.split())
        self.repeats += self.seen_texts[text] > 0
        self.near_repeats += any(_jaccard(words, w) >= 0.7 for w in self.step_words[-5:])
        self.cycle2 += len(self.step_texts) >= 2 and self.step_texts[-2] == text
        self.cycle3 += len(self.step_texts) >= 3 and self.step_texts[-3] == text
        self.seen_texts[text] += 1
        self.step_texts.append(text)
        self.step_words.append(words)

    def _action(self, action: Action, step: Step) -> None:
        self.kinds[action.kind] += 1
        new_paths = set(action.paths) - self.paths_seen
        if action.kind in ("read", "search"):
            self._read(action, known=bool(action.paths) and not new_paths)
        elif action.kind in ("edit", "write"):
            self._edit(action, new_paths)
        elif action.kind in ("test", "run"):
            self._execution(action, step)
        if new_paths:
            self.last_new_path = self.k
            self.paths_seen |= new_paths

    def _execution(self, action: Action, step: Step) -> None:
        failed = step.error or bool(TEST_FAILED.search(step.observation))
        (self.tests if action.kind == "test" else self.runs).append((self.k, failed))
        if not failed and self.outcomes.get(action.text):
            self.fail_then_pass += 1
        self.outcomes[action.text] = failed
        if not failed:
            self.last_pass = self.k

    def _read(self, action: Action, known: bool) -> None:
        self.reads += 1
        self.rereads += known
        if action.region is not None:
            self.region_rereads += any(_overlaps(action.region, r) for r in self.regions)
            self.regions.append(action.region)

    def _edit(self, action: Action, new_paths: set[str]) -> None:
        if action.kind == "write":
            self.created |= new_paths
        if action.name == "sed" and NUMBERED_SED.search(action.text):
            self.numbered_sed_edits += 1
        if not self.edit_steps:
            self.first_edit = self.k
            self.explored_before_edit = self.kinds["read"] + self.kinds["search"] > 0
        if not self.edit_steps or self.edit_steps[-1] != self.k:
            self.edit_steps.append(self.k)
        for path in action.paths:
            self.edits_per_file[path] += 1
            self.source_edits[path] += path not in self.created
        self.test_file_edits += action.on_test_file
        self.lines_written.append(action.lines_written)

    def _text(self, step: Step) -> None:
        text = f"{step.text}\n{step.reasoning}".lower()
        self.hedges.append(_count(text, HEDGES))
        self.retries.append(_count(text, RETRIES))
        self.confident.append(_count(text, CONFIDENT))

    def vector(self) -> dict[str, float]:
        """The features of the prefix seen so far."""
        return (
            self._cost_features()
            | self._loop_features()
            | self._error_features()
            | self._edit_features()
            | self._test_features()
            | self._text_features()
            | self._kind_features()
        )

    def _cost_features(self) -> dict[str, float]:
        k = self.k
        return {
            "steps": k,
            "log_tokens": math.log1p(self.tokens),
            "context_tokens": self.last_prompt,
            "context_growth_per_step": (self.last_prompt - self.first_prompt) / k,
            "completion_mean": _mean(self.completions),
            "completion_last5": _mean(self.completions[-5:]),
            "completion_trend": _mean(self.completions[-5:]) / max(1.0, _mean(self.completions)),
            "reasoning_chars_mean": _mean(self.reasoning),
            "reasoning_chars_last5": _mean(self.reasoning[-5:]),
            "observation_chars_mean": _mean(self.observation_chars),
            "observation_chars_last5": _mean(self.observation_chars[-5:]),
            "instruction_log_chars": math.log1p(self.instruction_chars),
            "user_turns": self.user_turns,
        }

    def _loop_features(self) -> dict[str, float]:
        k = self.k
        last5 = self.step_texts[-5:]
        return {
            "repeat_share": self.repeats / k,
            "near_repeat_share": self.near_repeats / k,
            "repeats_last5": len(last5) - len(set(last5)),
            "cycle2_share": self.cycle2 / k,
            "cycle3_share": self.cycle3 / k,
            "max_action_count": max(self.seen_texts.values()),
            "reread_share": self.rereads / max(1, self.reads),
            "region_rereads": self.region_rereads,
            "distinct_paths": len(self.paths_seen),
            "paths_per_step": len(self.paths_seen) / k,
            "steps_since_new_path": k - self.last_new_path,
        }

    def _error_features(self) -> dict[str, float]:
        return {
            "error_rate": _mean(self.errors),
            "error_last5": _mean(self.errors[-5:]),
            "error_streak": _streak(self.errors),
            "error_streak_max": _max_streak(self.errors),
            "tracebacks": self.tracebacks,
            "format_errors": self.kinds["format_error"],
        }

    def _edit_features(self) -> dict[str, float]:
        k = self.k
        edits = len(self.edit_steps)
        return {
            "edit_steps": edits,
            "edit_share": edits / k,
            "edits_last5": sum(1 for s in self.edit_steps if s > k - 5),
            "first_edit_step": self.first_edit or k + 1,
            "steps_since_first_edit": k - self.first_edit if self.first_edit else 0,
            "edit_before_explore": float(bool(self.edit_steps) and not self.explored_before_edit),
            "edited_files": len(self.edits_per_file),
            "max_edits_one_file": max(self.edits_per_file.values(), default=0),
            "test_file_edits": self.test_file_edits,
            "lines_written": sum(self.lines_written),
            "lines_written_last5_edits": sum(self.lines_written[-5:]),
            "reverts": self.kinds["revert"],
            "steps_since_last_edit": k - self.edit_steps[-1] if self.edit_steps else k,
            "source_files_edited": sum(1 for n in self.source_edits.values() if n),
            "source_edits": sum(self.source_edits.values()),
            "files_created": len(self.created),
            "numbered_sed_edits": self.numbered_sed_edits,
        }

    def _test_features(self) -> dict[str, float]:
        k = self.k
        failed = [f for _, f in self.tests]
        last_edit = self.edit_steps[-1] if self.edit_steps else 0
        return {
            "test_runs": len(self.tests),
            "test_fail_share": _mean(failed),
            "last_test_failed": float(failed[-1]) if failed else -1.0,
            "tests_since_last_edit": sum(1 for s, _ in self.tests if s > last_edit),
            "steps_since_last_test": k - self.tests[-1][0] if self.tests else k,
            "script_runs": len(self.runs),
            "script_error_share": _mean([f for _, f in self.runs]),
            "last_run_failed": float(self.runs[-1][1]) if self.runs else -1.0,
            "diff_checks": self.kinds["diff"],
            "fail_then_pass": self.fail_then_pass,
            "passed_since_last_edit": float(self.last_pass > last_edit > 0),
        }

    def _text_features(self) -> dict[str, float]:
        return {
            "hedges_per_step": _mean(self.hedges),
            "hedges_last5": _mean(self.hedges[-5:]),
            "retries_per_step": _mean(self.retries),
            "retries_last5": _mean(self.retries[-5:]),
            "confident_per_step": _mean(self.confident),
            "confident_last5": _mean(self.confident[-5:]),
        }

    def _kind_features(self) -> dict[str, float]:
        total = max(1, sum(self.kinds.values()))
        return {f"share_{kind}": self.kinds[kind] / total for kind in KINDS}


def _count(text: str, phrases: tuple[str, ...]) -> int:
    return sum(text.count(phrase) for phrase in phrases)


def _mean(values: list) -> float:
    return float(sum(values)) / len(values) if values else 0.0


def _streak(flags: list[bool]) -> int:
    count = 0
    for flag in reversed(flags):
        if not flag:
            break
        count += 1
    return count


def _max_streak(flags: list[bool]) -> int:
    best = current = 0
    for flag in flags:
        current = current + 1 if flag else 0
        best = max(best, current)
    return best


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def _overlaps(a: tuple[str, int, int], b: tuple[str, int, int]) -> bool:
    return a[0] == b[0] and a[1] <= b[2] and b[1] <= a[2]


TEXT_DIMS = 128
"""Width of the hashed bag of words of the agent's own text (visible text and reasoning)."""
_TEXT_HASHER = HashingVectorizer(
    n_features=TEXT_DIMS,
    alternate_sign=False,
    norm=None,
    lowercase=True,
    token_pattern=r"(?u)\b[a-z][a-z']{2,}\b",
)


@functools.cache
def feature_names() -> tuple[str, ...]:
    """The feature names, in vector order."""
    state = PrefixState()
    state.update(
        Step(index=0, end=1, text="", reasoning="", actions=[], observation="", error=False)
    )
    return (*state.vector(), *(f"text_hash_{i}" for i in range(TEXT_DIMS)))


def prefix_features(traj: Trajectory, steps: list[Step] | None = None) -> np.ndarray:
    """A (steps, features) matrix: row k-1 describes the prefix after step k."""
    steps = steps if steps is not None else extract_steps(traj)
    state = PrefixState(traj.task.instruction)
    rows = []
    for step in steps:
        state.update(step)
        rows.append(list(state.vector().values()))
    counts = np.asarray(rows, dtype=float).reshape(len(rows), -1)
    return np.hstack([counts, text_profile(steps)])


def text_profile(steps: list[Step]) -> np.ndarray:
    """(steps, TEXT_DIMS): the agent's words so far, hashed, log-scaled and L2-normalized.

    A fixed transform (nothing is fitted), so it is part of the feature version; the row for
    step k sums the words of steps 1..k only.
    """
    if not steps:
        return np.zeros((0, TEXT_DIMS))
    return normalized_profile(np.cumsum(hashed_words(steps), axis=0))


def hashed_words(steps: list[Step]) -> np.ndarray:
    """(steps, TEXT_DIMS): hashed word counts of each step's own text (not summed)."""
    return _TEXT_HASHER.transform([f"{s.text}\n{s.reasoning}" for s in steps]).toarray()


def normalized_profile(summed: np.ndarray) -> np.ndarray:
    """Rows of word counts summed over steps 1..k, log-scaled and L2-normalized."""
    profile = np.log1p(summed)
    norms = np.linalg.norm(profile, axis=1, keepdims=True)
    return profile / np.maximum(norms, 1e-9)

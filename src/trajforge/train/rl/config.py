"""The RL loop's settings, one documented field each."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

RewardKind = Literal["outcome", "process"]
Weighting = Literal["sample", "episode"]
RolloutBackend = Literal["local", "ray"]


class RLConfig(BaseModel):
    """What to roll out, how to update, what to measure."""

    iterations: int = Field(default=20, ge=1, description="Rollout-and-update iterations.")
    tasks_per_iteration: int = Field(default=8, ge=1, description="Training tasks per iteration.")
    group_size: int = Field(default=8, ge=2, description="Rollouts per task (one GRPO group).")
    difficulty: int = Field(default=1, ge=1, le=3, description="Household difficulty.")
    train_seeds: int = Field(
        default=5000, ge=1, description="Training worlds are drawn from seeds [0, train_seeds)."
    )
    max_steps: int = Field(default=20, ge=1, description="Agent steps per episode.")
    max_new_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Tokens per model call (default: the student's, 16 for a tiny one and 48 "
        "for a pretrained one, whose tool call takes about 30).",
    )
    temperature: float = Field(
        default=1.0,
        gt=0.0,
        description="Sampling temperature. At 1.0 the served logprobs are those of the sampling "
        "distribution, which the clipped ratio needs.",
    )
    concurrency: int = Field(default=32, ge=1, description="Episodes running at once.")
    backend: RolloutBackend = Field(
        default="local",
        description="Where the episodes run: threads of this process, or Ray tasks (the "
        "running Ray session, $RAY_ADDRESS, or a local Ray); the same episodes either way.",
    )
    lr: float = Field(default=1e-4, gt=0, description="Adam learning rate.")
    epochs: int = Field(default=2, ge=1, description="Passes over each iteration's samples.")
    minibatch: int = Field(default=16, ge=1, description="Sequences per optimizer step.")
    clip: float = Field(default=0.2, gt=0, description="PPO clip range of the ratio.")
    kl_coef: float = Field(default=0.0, ge=0, description="Weight of the KL to the reference.")
    reward: RewardKind = Field(
        default="outcome",
        description="outcome: the group-normalised reward on every token; process: plus the "
        "step-value advantage of forks (see train/rl/process.py).",
    )
    weighting: Weighting = Field(
        default="sample",
        description="sample: every training sample (a stretch of an episode between two "
        "retokenization cuts) weighs the same in the loss; episode: an episode's samples "
        "share one weight, so a long failed episode cut into many samples does not outweigh "
        "a success, and a group's advantages sum to zero in the loss.",
    )
    process_weight: float = Field(
        default=1.0, ge=0, description="process: weight of the step-value advantage."
    )
    eval_every: int = Field(default=5, ge=0, description="Held-out evaluation interval (0: off).")
    eval_tasks: int = Field(default=100, ge=1, description="Held-out worlds per evaluation.")
    min_correlation: float = Field(
        default=0.99,
        ge=-1,
        le=1,
        description="Stop when the rollout-training logprob correlation falls below this.",
    )
    early_stop_after: int = Field(
        default=0,
        ge=0,
        description="Fit the failure monitor on the rollouts of the first N iterations and stop "
        "doomed rollouts from then on (0: off).",
    )
    early_stop_loss: float = Field(
        default=0.05, description="Share of successful runs the monitor's threshold may stop."
    )
    strategies: int = Field(
        default=0,
        ge=0,
        description="Put this many strategies of the run's own library into each episode's "
        "system prompt; the library is distilled again from the run's rollouts after every "
        "iteration (see train/rl/strategies.py; 0: off).",
    )
    seed: int = Field(default=0, description="Seed of task draws, sampling and updates.")
    threads: int | None = Field(default=None, ge=1, description="torch CPU threads.")

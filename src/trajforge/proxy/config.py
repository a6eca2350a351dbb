"""Configuration of the recording proxy and of its upstream fault injection."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator


class FaultConfig(BaseModel):
    """Upstream failures the proxy injects on purpose (recorded as `Fault`s), by seed."""

    model_config = ConfigDict(extra="forbid")

    timeout: float = Field(default=0.0, ge=0, le=1, description="Share of calls that time out.")
    server_error: float = Field(
        default=0.0, ge=0, le=1, description="Share of calls answered with HTTP 503."
    )
    truncate: float = Field(
        default=0.0, ge=0, le=1, description="Share of calls whose answer is cut half-way."
    )
    timeout_delay_s: float = Field(
        default=0.0, ge=0, description="Seconds an injected timeout waits before answering 504."
    )
    seed: int = Field(default=0, description="Seed of the injection draws (reproducible runs).")
    header_override: bool = Field(
        default=True,
        description="Let a client force one fault with the header X-Trajforge-Fault "
        "(upstream_timeout, upstream_5xx or upstream_truncated): for targeted robustness tests.",
    )


class MonitorStopConfig(BaseModel):
    """The early-failure monitor as a stop: sessions it flags are no longer forwarded."""

    model_config = ConfigDict(extra="forbid")

    model: Path = Field(description="Model file written by `trajforge monitor train --out`.")
    loss: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="Use the model's threshold for this share of successful runs stopped "
        "(one of the losses it was trained for); default: the model's default loss (0.01).",
    )
    threshold: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Stop when the failure risk reaches this value (instead of `loss`).",
    )

    @model_validator(mode="after")
    def _one_threshold_rule(self) -> MonitorStopConfig:
        if self.loss is not None and self.threshold is not None:
            raise ValueError("give either a loss or a threshold, not both")
        return self


class ProxyConfig(BaseModel):
    """Where the proxy forwards, what it asks the upstream for, and who may call it."""

    model_config = ConfigDict(extra="forbid")

    upstream: str = Field(description="Upstream base URL, ending in /v1 (vLLM, SGLang, OpenAI...).")
    token: str | None = Field(
        default=None, description="When set, clients must send `Authorization: Bearer TOKEN`."
    )
    upstream_api_key: str | None = Field(
        default=None,
        description="Key sent upstream; when unset the client's Authorization is forwarded "
        "(unless `token` is set, which the upstream never sees).",
    )
    timeout_s: float = Field(
        default=600.0,
        gt=0,
        description="Seconds allowed for connecting to the upstream and for each read from it.",
    )
    max_body_bytes: int = Field(
        default=32 * 1024 * 1024,
        gt=0,
        description="Largest request body accepted; larger ones get HTTP 413 unread.",
    )
    ask_logprobs: bool = Field(
        default=True, description="Ask the upstream for logprobs even when the client did not."
    )
    ask_token_ids: bool = Field(
        default=True,
        description="Ask vLLM/SGLang-style upstreams for token ids (`return_token_ids`); turn "
        "off for upstreams that reject unknown fields.",
    )
    session_header: str = Field(
        default="x-trajforge-session",
        description="Header naming the session when the URL has no /s/{session} prefix.",
    )
    default_session: str = Field(default="default", description="Session of calls that name none.")
    harness: str = Field(default="proxy", description="Source harness written on trajectories.")
    answer_after_commit: bool = Field(
        default=True,
        description="Answer a call only once its row is committed, so every answer a client "
        "got is on disk whenever the proxy dies. Off: a call is handed to the writer and "
        "answered at once, its commit follows in the writer's next batch, and the session's "
        "next call is answered only once it is committed; a proxy killed then loses at most "
        "each session's last answered call (the commit overlaps the next call's forward).",
    )
    faults: FaultConfig | None = Field(default=None, description="Upstream fault injection.")
    monitor: MonitorStopConfig | None = Field(
        default=None,
        description="Early-failure monitor: refuse (HTTP 403) every request of a session "
        "whose failure risk reaches the threshold, and record termination reason `monitor`.",
    )

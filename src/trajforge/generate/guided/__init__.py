"""Guided recovery: search for guidance that makes a teacher pass a failed scenario, keep
the clean demonstration (guidance stripped, leak-checked), report and export. See README.md."""

from trajforge.generate.guided.guidance import (
    Feedback,
    Guidance,
    LLMGuidanceProposer,
    StrategyLookup,
    correction_guidance,
    oracle_plan,
    privileged_guidance,
    strategy_guidance,
)
from trajforge.generate.guided.leak import LeakConfig, find_leaks
from trajforge.generate.guided.report import (
    RecoveryReport,
    diagnosis_for,
    recover_runs,
    recover_store,
    summarize,
    write_recovered,
)
from trajforge.generate.guided.search import (
    Attempt,
    ForkRunner,
    GuidedRecovery,
    Job,
    RecoverConfig,
    RecoveryResult,
    Runner,
)
from trajforge.generate.guided.teacher import (
    GUIDANCE_HEADER,
    GuidedPolicy,
    InterveningPolicy,
    strip,
    with_guidance,
)

__all__ = [
    "GUIDANCE_HEADER",
    "Attempt",
    "Feedback",
    "ForkRunner",
    "Guidance",
    "GuidedPolicy",
    "GuidedRecovery",
    "InterveningPolicy",
    "Job",
    "LLMGuidanceProposer",
    "LeakConfig",
    "RecoverConfig",
    "RecoveryReport",
    "RecoveryResult",
    "Runner",
    "StrategyLookup",
    "correction_guidance",
    "diagnosis_for",
    "find_leaks",
    "oracle_plan",
    "privileged_guidance",
    "recover_runs",
    "recover_store",
    "strategy_guidance",
    "strip",
    "summarize",
    "with_guidance",
    "write_recovered",
]

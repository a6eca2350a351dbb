"""A full-text query in the store's syntax (SQLite FTS5's) as a regular-expression condition.

Used where the runs are not in SQLite (Parquet shards read by DuckDB), so a search gives the
runs the store's index gives: words, "quoted phrases", prefix*, AND / OR / NOT (NOT binds
tighter than AND, AND than OR; two terms side by side mean AND), and parentheses. Text is cut
into tokens as FTS5's default tokenizer (unicode61) cuts it: runs of letters and digits,
compared case-insensitively. Unlike unicode61, accents are compared as written (`café` does
not match `cafe`). Column filters (`body:`), `NEAR` and `^` are refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trajforge.errors import UserError

_TOKEN = re.compile(r'\s*(?:(")|([()+])|([^\s"()*+]+)(\*)?|(\*))')
_WORD = re.compile(r"[^\W_]+")
"""A token of the text: letters and digits (unicode61 splits on everything else)."""
_BOUNDARY = r"[^\pL\pN]"


@dataclass(frozen=True)
class Phrase:
    """Tokens that follow each other in the text; the last one a prefix when `prefix`."""

    tokens: tuple[str, ...]
    prefix: bool = False

    def pattern(self) -> str:
        """An RE2 pattern (DuckDB's `regexp_matches`) true where the phrase occurs."""
        body = f"{_BOUNDARY}+".join(re.escape(token) for token in self.tokens)
        end = r"[\pL\pN]*" if self.prefix else f"(?:$|{_BOUNDARY})"
        return f"(?i)(?:^|{_BOUNDARY}){body}{end}"


@dataclass(frozen=True)
class Node:
    """AND / OR / NOT of two parts."""

    op: str
    left: Phrase | Node
    right: Phrase | Node


def invalid(query: str, why: str) -> UserError:
    """The error of a query that cannot be read, saying how to write one."""
    return UserError(
        f'search query {query!r} is not valid: {why}. Write words, "quoted phrases", '
        "AND / OR / NOT, or prefix*"
    )


class _Parser:
    def __init__(self, query: str) -> None:
        self.query = query
        self.tokens = _lex(query)
        self.at = 0

    def fail(self, why: str) -> UserError:
        return UserError(
            f'search query {self.query!r} is not valid: {why}. Write words, "quoted phrases", '
            "AND / OR / NOT, or prefix*"
        )

    def peek(self) -> str | Phrase | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self) -> str | Phrase | None:
        token = self.peek()
        self.at += 1
        return token

    def parse(self) -> Phrase | Node:
        node = self.or_expr()
        if self.peek() is not None:
            raise self.fail(f"unexpected {self.peek()!r}")
        return node

    def or_expr(self) -> Phrase | Node:
        node = self.and_expr()
        while self.peek() == "OR":
            self.take()
            node = Node("OR", node, self.and_expr())
        return node

    def and_expr(self) -> Phrase | Node:
        node = self.not_expr()
        while self.peek() == "AND":
            self.take()
            node = Node("AND", node, self.not_expr())
        return node

    def not_expr(self) -> Phrase | Node:
        node = self.primary()
        while self.peek() == "NOT":
            self.take()
            node = Node("NOT", node, self.primary())
        return node

    def primary(self) -> Phrase | Node:
        token = self.take()
        if isinstance(token, Phrase):
            return self.phrases(token)
        if token == "(":
            node = self.or_expr()
            if self.take() != ")":
                raise self.fail("a parenthesis is not closed")
            return node
        raise self.fail("the query ends early" if token is None else f"unexpected {token!r}")

    def phrases(self, first: Phrase) -> Phrase | Node:
        """Phrases side by side (all must occur; `a+b` is the phrase "a b")."""
        chain = [first]
        while isinstance(self.peek(), Phrase) or self.peek() == "+":
            token = self.take()
            if isinstance(token, Phrase):
                chain.append(token)
                continue
            following = self.take()
            if not isinstance(following, Phrase):
                raise self.fail("a + must join two words")
            chain[-1] = Phrase(chain[-1].tokens + following.tokens, following.prefix)
        node: Phrase | Node = chain[0]
        for phrase in chain[1:]:
            node = Node("AND", node, phrase)
        return node


def _lex(query: str) -> list[str | Phrase]:
    tokens: list[str | Phrase] = []
    at = 0
    while query[at:].strip():
        match = _TOKEN.match(query, at)
        if match is None or match.group(5):
            raise invalid(query, "a * must follow a word")
        quote, punctuation, word, star, _ = match.groups()
        at = match.end()
        if quote:
            text, at = _quoted(query, at)
            star_after = query[at : at + 1] == "*"
            at += star_after
            tokens.append(_phrase(query, text, star_after))
        elif punctuation:
            tokens.append(punctuation)
        elif word in ("AND", "OR", "NOT") and not star:
            tokens.append(word)
        else:
            tokens.append(_bareword(query, word, bool(star)))
    return tokens


def _quoted(query: str, at: int) -> tuple[str, int]:
    """The text of a quoted phrase from `at` (after the opening quote; "" is a quote)."""
    parts = []
    while True:
        end = query.find('"', at)
        if end < 0:
            raise invalid(query, "a quote is not closed")
        parts.append(query[at:end])
        if query[end + 1 : end + 2] != '"':
            return '"'.join(parts), end + 1
        at = end + 2


def _bareword(query: str, word: str, prefix: bool) -> Phrase:
    if not all(char.isalnum() or char == "_" or ord(char) > 127 for char in word):
        raise invalid(query, f"{word!r} holds symbols; put it in double quotes")
    return _phrase(query, word, prefix)


def _phrase(query: str, text: str, prefix: bool) -> Phrase:
    tokens = tuple(_WORD.findall(text.lower()))
    if not tokens:
        raise invalid(query, f"{text!r} holds no word")
    return Phrase(tokens, prefix)


def parse_search(query: str) -> Phrase | Node:
    """The query's tree; a `UserError` saying how to write it when it is not valid."""
    if not query.strip():
        raise invalid(query, "the query is empty")
    return _Parser(query).parse()


def search_condition(query: str, column: str) -> tuple[str, list[str]]:
    """A SQL condition over `column` (DuckDB) true for the texts `query` matches, and its
    parameters (one regular expression per phrase)."""
    params: list[str] = []

    def condition(node: Phrase | Node) -> str:
        if isinstance(node, Phrase):
            params.append(node.pattern())
            return f"regexp_matches({column}, ?)"
        left, right = condition(node.left), condition(node.right)
        if node.op == "NOT":
            return f"({left} AND NOT {right})"
        return f"({left} {node.op} {right})"

    return condition(parse_search(query)), params

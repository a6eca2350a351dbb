"""Secret-shaped values inside text: where they are, and the text with them redacted.

One pattern set, used wherever a value may be stored (the proxy's request scrubbing): each
shape is specific enough that ordinary prose, code, hashes, ids and token counts do not
match it. What is found, and what is replaced:

- a password in a URL or DSN (`postgres://u:PASS@h/db`): the password only;
- a JSON Web Token (`eyJ....eyJ....sig`): the token;
- a private key block (PEM, OpenSSH, PGP, PuTTY): from its BEGIN line to its END line (to
  the end of the text when it has none);
- a provider key (`sk-...`, `sk_live_...`, `ghp_...`, `github_pat_...`, `xoxb-...`,
  `AKIA...`, `AIza...`, `hf_...`), also inside a longer string: the key;
- an HTTP credential (`Bearer` and a token with a digit in it, `Basic` and base64): both.

A public key, a certificate, a URL without a password, a 40-hex commit id or a UUID is kept.
"""

from __future__ import annotations

import re

REDACTED = "[redacted]"

_URL_PASSWORD = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@?#]+:(?P<secret>[^\s@/?#]+)@")
_JWT = re.compile(r"(?<![\w-])eyJ[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]*")
_KEY_BEGIN = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|PuTTY-User-Key-File-\d+:"
)
_KEY_END = re.compile(r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
_PROVIDER_KEY = re.compile(
    r"(?<![\w-])(?:sk-[\w-]{16,}|[sr]k_(?:live|test)_\w{12,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_\w{20,}|xox[abeprs]-[\w-]{10,}|(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])"
    r"|AIza[\w-]{30,}|hf_[A-Za-z0-9]{20,})"
)
_HTTP_CREDENTIAL = re.compile(
    r"\b(?:bearer\s+(?=[\w.~+/-]*\d)[\w.~+/-]{16,}=*|basic\s+(?=\S*[\d+/=])[A-Za-z0-9+/]{12,}={0,2})",
    re.IGNORECASE,
)
_WHOLE_MATCH = (_JWT, _PROVIDER_KEY, _HTTP_CREDENTIAL)


def secret_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every secret-shaped part of `text`, sorted, overlaps merged."""
    spans = [m.span("secret") for m in _URL_PASSWORD.finditer(text)]
    for pattern in _WHOLE_MATCH:
        spans.extend(m.span() for m in pattern.finditer(text))
    spans.extend(_key_blocks(text))
    return _merged(spans)


def _key_blocks(text: str) -> list[tuple[int, int]]:
    blocks = []
    position = 0
    while begin := _KEY_BEGIN.search(text, position):
        end = _KEY_END.search(text, begin.end())
        stop = len(text) if end is None else end.end()
        blocks.append((begin.start(), stop))
        position = stop
    return blocks


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def redact_secrets(text: str) -> str:
    """`text` with each secret-shaped part replaced by `[redacted]` (the rest kept)."""
    spans = secret_spans(text)
    if not spans:
        return text
    parts = []
    position = 0
    for start, end in spans:
        parts.append(text[position:start])
        parts.append(REDACTED)
        position = end
    parts.append(text[position:])
    return "".join(parts)

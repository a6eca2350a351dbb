"""Action extractor for bash-in-text harnesses (mini-swe-agent): one ```bash block per step.

The command is split into simple commands (on `&&`, `||`, `;`, `|` and new lines, after
heredoc bodies are cut out) and each is classified by what it does to the repository: read a
file, search, edit in place, write a file, run tests, run a script, look at the diff, revert,
or submit. Observations are `<returncode>N</returncode><output>...</output>`; a nonzero return
code, a Python traceback, or a reply without exactly one bash block is an error.
"""

from __future__ import annotations

import contextlib
import re
import shlex

from trajforge.monitor.actions import Action

_BLOCK = re.compile(r"```bash\s*\n(.*?)```", re.S)
_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?([^\n]*)\n(.*?)\n\s*\1\s*(?:\n|$)", re.S)
_SPLIT = re.compile(r"&&|\|\||;|\n|\|")
_REDIRECT = re.compile(r"(?<![0-9&])>>?\s*([^\s;&|<>]+)")
_RANGE = re.compile(r"(\d+)\s*,\s*(\d+)\s*p")
_FILE_LIKE = re.compile(r"^[\w./-]+\.[A-Za-z0-9]{1,5}$|/")
_SUBMIT = "COMPLETE_TASK_AND_SUBMIT"

READ_COMMANDS = {"cat", "head", "tail", "nl", "less", "more", "awk", "view", "bat"}
SEARCH_COMMANDS = {"grep", "rg", "ag", "find", "ls", "tree", "locate", "which", "pwd", "wc"}
TEST_MARKERS = ("pytest", "runtests", "bin/test", "unittest", "tox", "manage.py test", "nosetests")
GIT_REVERTS = {"checkout", "restore", "stash", "reset"}
BACKUP_SUFFIXES = (".orig", ".bak", ".backup")
EDIT_COMMANDS = {"patch", "perl", "ed", "applypatch"}


def parse_bash_actions(text: str, observation: str) -> tuple[list[Action], bool]:
    """(actions, error) of one assistant message and the observation that answered it."""
    blocks = _BLOCK.findall(text)
    if len(blocks) != 1:
        return [Action(kind="format_error", name="", text="")], True
    actions = [classify(cmd, body) for cmd, body in split_commands(blocks[0])]
    return [a for a in actions if a.kind != "empty"], observation_error(observation)


def observation_error(observation: str) -> bool:
    """Nonzero return code, a traceback, or no return code at all (a rejected reply)."""
    match = _RETURNCODE.search(observation)
    if match is None:
        return True
    return match.group(1) != "0" or "Traceback (most recent call last)" in observation


def returncode(observation: str) -> int | None:
    match = _RETURNCODE.search(observation)
    return int(match.group(1)) if match else None


def split_commands(script: str) -> list[tuple[str, str]]:
    """[(simple command, heredoc body it feeds or "")] in order."""
    bodies: list[str] = []

    def cut(match: re.Match[str]) -> str:
        bodies.append(match.group(3))
        return f"<<HEREDOC{len(bodies) - 1} {match.group(2)}\n"

    script = _HEREDOC.sub(cut, script.replace("\\\n", " "))
    result = []
    for part in _SPLIT.split(script):
        part = part.strip()
        body = ""
        marker = re.search(r"<<HEREDOC(\d+)", part)
        if marker:
            body = bodies[int(marker.group(1))]
            part = part.replace(marker.group(0), "").strip()
        if part and not part.startswith("#"):
            result.append((part, body))
    return result


def _words(command: str) -> list[str]:
    words = command.split()
    if len(command) <= SHLEX_LIMIT and ("'" in command or '"' in command):
        with contextlib.suppress(ValueError):
            words = shlex.split(command, comments=False)
    while words and (("=" in words[0] and not words[0].startswith("-")) or words[0] in _PREFIXES):
        words = words[1:]
    return words


SHLEX_LIMIT = 400
"""Longer commands (inline scripts) are split on white space: shlex is slow on them."""
_PREFIXES = {"sudo", "env", "time", "timeout", "exec", "command", "5s", "10s", "30s", "60s"}


def classify(command: str, body: str = "") -> Action:
    """The `Action` of one simple command (with the heredoc body it reads, if any)."""
    words = _words(command)
    if not words:
        return Action(kind="empty", name="", text="")
    name = words[0].rsplit("/", 1)[-1] if not words[0].startswith(".") else words[0]
    kind = _kind(command, name, words, body)
    paths = _paths(words[1:], command)
    written = len(body.splitlines()) if kind in ("write", "edit") else 0
    if kind == "edit" and not written:
        written = _inline_lines(words)
    return Action(
        kind=kind,
        name=name,
        text=" ".join(words),
        paths=paths,
        region=_region(words, paths) if kind == "read" else None,
        lines_written=written,
        on_test_file=kind in ("edit", "write") and any(is_test_path(p) for p in paths),
    )


def _kind(command: str, name: str, words: list[str], body: str) -> str:
    if _SUBMIT in command:
        return "submit"
    if _is_revert(name, words):
        return "revert"
    if name == "git":
        return _git_kind(words)
    if any(marker in command for marker in TEST_MARKERS):
        return "test"
    if _REDIRECT.search(command) and name in ("cat", "echo", "printf", "tee"):
        return "write"
    return _plain_kind(name, words, body)


def _is_revert(name: str, words: list[str]) -> bool:
    if name == "git":
        return len(words) > 1 and words[1] in GIT_REVERTS
    sources = [w for w in words[1:] if not w.startswith("-")]
    return name in ("mv", "cp") and bool(sources) and sources[0].endswith(BACKUP_SUFFIXES)


def _git_kind(words: list[str]) -> str:
    sub = words[1] if len(words) > 1 else ""
    if sub in ("diff", "status"):
        return "diff"
    if sub in ("apply", "am"):
        return "edit"
    return "search"


def _plain_kind(name: str, words: list[str], body: str) -> str:
    if name == "sed":
        return "edit" if any(w.startswith("-i") for w in words[1:]) else "read"
    if name in READ_COMMANDS:
        return "read"
    if name in SEARCH_COMMANDS:
        return "search"
    if name in EDIT_COMMANDS or name == "tee":
        return "edit"
    if name.startswith("python"):
        return _python_kind(words, body)
    if name in ("rm", "mkdir", "touch", "mv", "cp", "cd", "chmod"):
        return "files"
    if name in ("pip", "conda", "apt-get"):
        return "install"
    return "run"


def _python_kind(words: list[str], body: str) -> str:
    code = body + " ".join(words)
    if re.search(r"open\([^)]*['\"][wa]\+?['\"]", code) or ".write(" in code:
        return "edit"
    return "run"


def _paths(args: list[str], command: str) -> tuple[str, ...]:
    found = [a for a in args if not a.startswith("-") and _FILE_LIKE.search(a)]
    found += _REDIRECT.findall(command)
    clean = (clean_path(p) for p in found)
    return tuple(dict.fromkeys(p for p in clean if p and not p.startswith("/dev/")))


def clean_path(path: str) -> str:
    """A path as the features compare it: unquoted, relative to the repository root."""
    return path.strip("'\"").removeprefix("./").removeprefix("/testbed/")


def _region(words: list[str], paths: tuple[str, ...]) -> tuple[str, int, int] | None:
    if not paths:
        return None
    for word in words:
        match = _RANGE.search(word)
        if match:
            return paths[-1], int(match.group(1)), int(match.group(2))
    return None


def _inline_lines(words: list[str]) -> int:
    return max(1, sum(w.count("\\n") for w in words[1:]))


def is_test_path(path: str) -> bool:
    """A path that looks like a test file of the project (tests/..., test_x.py, x_test.py)."""
    lowered = path.lower()
    base = lowered.rsplit("/", 1)[-1]
    return "/tests/" in f"/{lowered}" or base.startswith("test_") or base.endswith("_test.py")

"""Function templates for generated repositories: correct code, seeded bugs, test cases.

Each bug is a textual mutation of the correct source (`old` → `new`) from one family:
off_by_one, wrong_operator, wrong_default, missing_case, swapped_args.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Bug:
    family: str
    old: str
    new: str


@dataclass(frozen=True)
class Template:
    name: str
    topic: str
    source: str
    bugs: tuple[Bug, ...]
    cases: tuple[tuple[str, str], ...]  # (call, expected value as Python source)


TEMPLATES: tuple[Template, ...] = (
    Template(
        "clamp",
        "numbers",
        'def clamp(value, low, high):\n    """Limit value to [low, high]."""\n'
        "    if value < low:\n        return low\n    if value > high:\n        return high\n"
        "    return value\n",
        (
            Bug("wrong_operator", "if value < low:", "if value > low:"),
            Bug("swapped_args", "        return high\n", "        return low\n"),
        ),
        (("clamp(5, 0, 10)", "5"), ("clamp(-3, 0, 10)", "0"), ("clamp(12, 0, 10)", "10")),
    ),
    Template(
        "window_sums",
        "sequences",
        'def window_sums(values, size):\n    """Sums of each `size` consecutive values."""\n'
        "    return [sum(values[i : i + size]) for i in range(len(values) - size + 1)]\n",
        (Bug("off_by_one", "len(values) - size + 1", "len(values) - size"),),
        (("window_sums([1, 2, 3, 4], 2)", "[3, 5, 7]"), ("window_sums([5], 1)", "[5]")),
    ),
    Template(
        "split_words",
        "text",
        'def split_words(text, sep=","):\n    """Non-empty, stripped fields of `text`."""\n'
        "    return [w.strip() for w in text.split(sep) if w.strip()]\n",
        (Bug("wrong_default", 'sep=","', 'sep=" "'),),
        (('split_words("a, b,c")', '["a", "b", "c"]'), ('split_words("x;y", ";")', '["x", "y"]')),
    ),
    Template(
        "grade",
        "numbers",
        'def grade(score):\n    """Letter grade of a score out of 100."""\n'
        '    if score >= 90:\n        return "A"\n    if score >= 80:\n        return "B"\n'
        '    if score >= 70:\n        return "C"\n    return "F"\n',
        (
            Bug("missing_case", '    if score >= 80:\n        return "B"\n', ""),
            Bug("off_by_one", "score >= 90", "score > 90"),
        ),
        (("grade(95)", '"A"'), ("grade(90)", '"A"'), ("grade(85)", '"B"'), ("grade(10)", '"F"')),
    ),
    Template(
        "percent",
        "numbers",
        'def percent(part, whole):\n    """`part` as a percentage of `whole`, one decimal."""\n'
        "    return round(100 * part / whole, 1)\n",
        (Bug("swapped_args", "100 * part / whole", "100 * whole / part"),),
        (("percent(1, 4)", "25.0"), ("percent(2, 2)", "100.0")),
    ),
    Template(
        "last_items",
        "sequences",
        'def last_items(items, count):\n    """The last `count` items."""\n'
        "    return items[-count:] if count > 0 else []\n",
        (Bug("off_by_one", "items[-count:]", "items[-count + 1 :]"),),
        (("last_items([1, 2, 3], 2)", "[2, 3]"), ("last_items([1, 2], 0)", "[]")),
    ),
    Template(
        "safe_divide",
        "numbers",
        'def safe_divide(a, b, default=0.0):\n    """a / b, or `default` when b is zero."""\n'
        "    if b == 0:\n        return default\n    return a / b\n",
        (
            Bug("wrong_default", "default=0.0", "default=1.0"),
            Bug("wrong_operator", "if b == 0:", "if b != 0:"),
        ),
        (("safe_divide(1, 0)", "0.0"), ("safe_divide(6, 3)", "2.0")),
    ),
    Template(
        "compound",
        "money",
        'def compound(principal, rate, years):\n    """Value after `years` of yearly interest."""\n'
        "    return round(principal * (1 + rate) ** years, 2)\n",
        (Bug("wrong_operator", "(1 + rate) ** years", "(1 + rate) * years"),),
        (("compound(100, 0.1, 2)", "121.0"), ("compound(50, 0.0, 3)", "50.0")),
    ),
    Template(
        "is_leap",
        "dates",
        'def is_leap(year):\n    """Whether `year` is a leap year (Gregorian)."""\n'
        "    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n",
        (Bug("missing_case", "(year % 100 != 0 or year % 400 == 0)", "year % 100 != 0"),),
        (("is_leap(2000)", "True"), ("is_leap(1900)", "False"), ("is_leap(2024)", "True")),
    ),
    Template(
        "join_path",
        "text",
        'def join_path(base, name):\n    """`base` and `name` joined by exactly one slash."""\n'
        '    return base.rstrip("/") + "/" + name.lstrip("/")\n',
        (
            Bug(
                "swapped_args",
                'base.rstrip("/") + "/" + name.lstrip("/")',
                'name.rstrip("/") + "/" + base.lstrip("/")',
            ),
        ),
        (('join_path("a/", "/b")', '"a/b"'), ('join_path("x", "y")', '"x/y"')),
    ),
    Template(
        "count_vowels",
        "text",
        'def count_vowels(text):\n    """Number of vowels, either case."""\n'
        '    return sum(1 for c in text.lower() if c in "aeiou")\n',
        (Bug("missing_case", "text.lower()", "text"),),
        (('count_vowels("AbE")', "2"), ('count_vowels("xyz")', "0")),
    ),
    Template(
        "median",
        "sequences",
        'def median(values):\n    """Median of a non-empty list of numbers."""\n'
        "    ordered = sorted(values)\n    mid = len(ordered) // 2\n"
        "    if len(ordered) % 2:\n        return ordered[mid]\n"
        "    return (ordered[mid - 1] + ordered[mid]) / 2\n",
        (
            Bug(
                "off_by_one",
                "(ordered[mid - 1] + ordered[mid])",
                "(ordered[mid] + ordered[mid + 1])",
            ),
        ),
        (("median([3, 1, 2])", "2"), ("median([4, 1, 3, 2])", "2.5")),
    ),
)

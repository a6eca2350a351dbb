"""Inline SVG plots: a line over steps with a threshold and a marked point, and histograms."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trajforge.web.html import h

WIDTH, HEIGHT, PAD = 640, 200, 32


def _x(i: int, n: int) -> float:
    return PAD + (WIDTH - 2 * PAD) * (i / max(n - 1, 1))


def _y(value: float, top: float) -> float:
    return HEIGHT - PAD - (HEIGHT - 2 * PAD) * (value / top if top else 0.0)


def risk_plot(
    risks: Sequence[float], threshold: float | None, stop: int | None, labels: Sequence[str]
) -> str:
    """Risk after each step (0..1); a dashed threshold; the stop step (1-based) marked red.

    `labels[k]` is the tooltip of step k+1 (for example its message index).
    """
    n = len(risks)
    points = " ".join(f"{_x(i, n):.1f},{_y(r, 1.0):.1f}" for i, r in enumerate(risks))
    dots = "".join(
        f'<circle cx="{_x(i, n):.1f}" cy="{_y(r, 1.0):.1f}" r="3" class="dot">'
        f"<title>step {i + 1}: risk {r:.3f} ({h(labels[i])})</title></circle>"
        for i, r in enumerate(risks)
    )
    parts = [_axes(n, 1.0, "step", "failure risk"), f'<polyline points="{points}" class="line"/>']
    if threshold is not None:
        y = _y(min(threshold, 1.0), 1.0)
        parts.append(
            f'<line x1="{PAD}" x2="{WIDTH - PAD}" y1="{y:.1f}" y2="{y:.1f}" class="threshold">'
            f"<title>stop threshold {threshold:.3f}</title></line>"
        )
    parts.append(dots)
    if stop is not None:
        x, y = _x(stop - 1, n), _y(risks[stop - 1], 1.0)
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="7" class="stop" id="stop-point">'
            f"<title>stop at step {stop}</title></circle>"
            f'<text x="{x + 9:.1f}" y="{y - 9:.1f}" class="stop-label">stop</text>'
        )
    return _svg("".join(parts), "risk-plot")


def histogram(groups: dict[str, Sequence[float]], bins: int = 12, label: str = "") -> str:
    """Overlaid histograms of several groups (one colour each), over a shared range."""
    values = [v for group in groups.values() for v in group]
    if not values:
        return '<p class="dim">no values</p>'
    low, high = min(values), max(values)
    width = (high - low) / bins or 1.0
    counts = {
        name: [sum(1 for v in group if _bin(v, low, width, bins) == b) for b in range(bins)]
        for name, group in groups.items()
    }
    top = max(max(c) for c in counts.values()) or 1
    bar_w = (WIDTH - 2 * PAD) / bins / max(len(groups), 1)
    bars = []
    for g, (name, bin_counts) in enumerate(counts.items()):
        for b, count in enumerate(bin_counts):
            x = PAD + (WIDTH - 2 * PAD) * b / bins + g * bar_w
            y = _y(count, top)
            bars.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w - 1:.1f}" '
                f'height="{HEIGHT - PAD - y:.1f}" class="series{g % 6}">'
                f"<title>{h(name)}: {count} in [{low + b * width:.0f}, "
                f"{low + (b + 1) * width:.0f})</title></rect>"
            )
    axis = _axes(0, top, f"{label} ({low:.0f} to {high:.0f})", "runs")
    return _svg(axis + "".join(bars), "histogram")


def _bin(value: float, low: float, width: float, bins: int) -> int:
    return min(int((value - low) / width), bins - 1)


def _axes(n: int, top: float, x_label: str, y_label: str) -> str:
    base = HEIGHT - PAD
    ticks = ""
    if n > 1:
        step = max(1, n // 10)
        ticks = "".join(
            f'<text x="{_x(i, n):.1f}" y="{base + 14}" class="tick">{i + 1}</text>'
            for i in range(0, n, step)
        )
    return (
        f'<line x1="{PAD}" y1="{base}" x2="{WIDTH - PAD}" y2="{base}" class="axis"/>'
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{base}" class="axis"/>'
        f'<text x="{PAD - 4}" y="{PAD + 4}" class="tick end">{top:g}</text>'
        f'<text x="{PAD - 4}" y="{base}" class="tick end">0</text>{ticks}'
        f'<text x="{WIDTH / 2}" y="{HEIGHT - 4}" class="axis-label">{h(x_label)}</text>'
        f'<text x="10" y="{HEIGHT / 2}" class="axis-label" '
        f'transform="rotate(-90 10 {HEIGHT / 2})">{h(y_label)}</text>'
    )


def _svg(inner: str, cls: str) -> str:
    return _sized_svg(inner, cls, WIDTH, HEIGHT)


Point = tuple[int, float]
"""(x, value): an iteration and what was measured there."""


def series_plot(
    series: Mapping[str, Sequence[Point]],
    low: float,
    high: float,
    y_label: str,
    *,
    bands: Mapping[str, Sequence[tuple[int, float, float]]] | None = None,
    threshold: float | None = None,
    size: tuple[int, int] = (420, 180),
) -> str:
    """Lines of values over iterations (one colour per series, in order), with error bars
    `(x, lo, hi)` for the series named in `bands` and an optional dashed threshold."""
    width, height = size
    xs = [x for points in series.values() for x, _ in points]
    if not xs:
        return '<p class="dim">nothing measured yet</p>'
    left, right = min(xs), max(max(xs), min(xs) + 1)
    span = (high - low) or 1.0

    def px(x: float) -> float:
        return PAD + (width - 2 * PAD) * (x - left) / (right - left)

    def py(value: float) -> float:
        clipped = min(max(value, low), high)
        return height - PAD - (height - 2 * PAD) * (clipped - low) / span

    parts = [_frame(width, height, left, right, low, high, y_label, px)]
    if threshold is not None:
        y = py(threshold)
        parts.append(
            f'<line x1="{PAD}" x2="{width - PAD}" y1="{y:.1f}" y2="{y:.1f}" class="threshold">'
            f"<title>{threshold:g}</title></line>"
        )
    for index, (name, points) in enumerate(series.items()):
        colour = f"series{index % 6}"
        for x, lo, hi in (bands or {}).get(name, []):
            parts.append(
                f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{py(lo):.1f}" y2="{py(hi):.1f}" '
                f'class="ci {colour}"><title>{h(name)} at {x}: 95% CI [{lo:.3f}, {hi:.3f}]'
                "</title></line>"
            )
        line = " ".join(f"{px(x):.1f},{py(v):.1f}" for x, v in points)
        parts.append(f'<polyline points="{line}" class="trend {colour}"/>')
        parts.extend(
            f'<circle cx="{px(x):.1f}" cy="{py(v):.1f}" r="3" class="{colour}">'
            f"<title>{h(name)} at {x}: {v:.4g}</title></circle>"
            for x, v in points
        )
    return _sized_svg("".join(parts), "series-plot", width, height)


def _frame(
    width: int, height: int, left: int, right: int, low: float, high: float, y_label: str, px
) -> str:
    base = height - PAD
    step = max(1, (right - left) // 8)
    ticks = "".join(
        f'<text x="{px(x):.1f}" y="{base + 14}" class="tick">{x}</text>'
        for x in range(left, right + 1, step)
    )
    return (
        f'<line x1="{PAD}" y1="{base}" x2="{width - PAD}" y2="{base}" class="axis"/>'
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{base}" class="axis"/>'
        f'<text x="{PAD - 4}" y="{PAD + 4}" class="tick end">{high:g}</text>'
        f'<text x="{PAD - 4}" y="{base}" class="tick end">{low:g}</text>{ticks}'
        f'<text x="{width / 2}" y="{height - 4}" class="axis-label">iteration</text>'
        f'<text x="10" y="{height / 2}" class="axis-label" '
        f'transform="rotate(-90 10 {height / 2})">{h(y_label)}</text>'
    )


def _sized_svg(inner: str, cls: str, width: int, height: int) -> str:
    return (
        f'<svg class="{cls}" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" xmlns="http://www.w3.org/2000/svg">{inner}</svg>'
    )

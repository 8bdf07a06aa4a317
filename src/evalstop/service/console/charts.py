"""Server-rendered SVG charts (no script, no external assets; presentation attributes only, so a
strict Content-Security-Policy needs no inline styles)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from markupsafe import Markup

from .evidence import Evidence, RewindMark

WIDTH, HEIGHT = 760, 320
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 40
MAX_POINTS = 2000  # longer curves are thinned for drawing (every marker still drawn)
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


@dataclass(frozen=True)
class Scale:
    lo: float
    hi: float
    a: float  # pixel range
    b: float

    def __call__(self, v: float) -> float:
        span = self.hi - self.lo or 1.0
        return round(self.a + (v - self.lo) / span * (self.b - self.a), 2)


def _limits(values: Sequence[float]) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    pad = (hi - lo) * 0.05
    return lo - pad, hi + pad


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(n + 2) if first + i * step <= hi]


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def _text_width(text: str, size: float = 11) -> float:
    """About how wide ``text`` is drawn (system-ui digits and letters average ~0.6 em)."""
    return 0.6 * size * len(text)


def _anchor(px: float, width: float, lo: float = LEFT, hi: float = WIDTH - RIGHT) -> tuple[float, str]:
    """Where to put a label of ``width`` centred on ``px`` so that it stays within ``lo..hi``:
    centred when it fits, else flush with the nearer edge."""
    if px - width / 2 < lo:
        return lo, "start"
    if px + width / 2 > hi:
        return hi, "end"
    return px, "middle"


def _axes(x: Scale, y: Scale, time_format: str | None = None, xlabel: str = "step", *,
          top: float = TOP, height: float = HEIGHT) -> list[str]:
    base = height - BOTTOM
    out = [f'<line x1="{LEFT}" y1="{base}" x2="{WIDTH - RIGHT}" y2="{base}" stroke="#555"/>',
           f'<line x1="{LEFT}" y1="{top}" x2="{LEFT}" y2="{base}" stroke="#555"/>']
    for t in _ticks(y.lo, y.hi):
        py = y(t)
        out.append(f'<line x1="{LEFT}" y1="{py}" x2="{WIDTH - RIGHT}" y2="{py}" stroke="#eee"/>')
        out.append(f'<text x="{LEFT - 6}" y="{py + 4}" text-anchor="end" font-size="11">{_fmt(t)}</text>')
    for t in _ticks(x.lo, x.hi):
        label = _fmt(t) if time_format is None else time.strftime(time_format, time.gmtime(t))
        px, anchor = _anchor(x(t), _text_width(label), LEFT + 2, WIDTH)
        out.append(f'<text x="{px}" y="{base + 16}" text-anchor="{anchor}" font-size="11">{label}</text>')
    out.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{height - 4}" text-anchor="middle" '
               f'font-size="11" fill="#555">{escape(xlabel)}</text>')
    return out


def _thin(points: Sequence[tuple[int, float]]) -> Sequence[tuple[int, float]]:
    if len(points) <= MAX_POINTS:
        return points
    stride = math.ceil(len(points) / MAX_POINTS)
    return [*points[::stride], points[-1]]


def _polyline(points: Sequence[tuple[float, float]], x: Scale, y: Scale, **attrs: str) -> str:
    pts = " ".join(f"{x(a)},{y(b)}" for a, b in points)
    extra = " ".join(f'{k.rstrip("_").replace("_", "-")}="{v}"' for k, v in attrs.items())
    return f'<polyline points="{pts}" fill="none" {extra}/>'


def _steps(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """A step line through ``points`` (the value holds until the next point)."""
    out: list[tuple[float, float]] = []
    for a, b in points:
        if out:
            out.append((a, out[-1][1]))
        out.append((a, b))
    return out


def curve_svg(
    points: Sequence[tuple[int, float]], evidence: Evidence, *, best_step: int | None,
    stop_step: int | None, stop_label: str = "stop",
) -> Markup:
    """The eval curve with the rule's evidence, a best-checkpoint marker and a stop marker. The
    markers carry ``data-step`` (the step they mark) and ids ``marker-best``/``marker-stop``."""
    if not points:
        return Markup('<p class="muted">No evals yet.</p>')
    ys = [v for _, v in points] + [v for _, v in evidence.band] + [v for _, v in evidence.best]
    x = Scale(*_limits([s for s, _ in points]), LEFT, WIDTH - RIGHT)
    y = Scale(*_limits(ys), HEIGHT - BOTTOM, TOP)
    by_step = dict(points)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
             f'role="img" aria-label="eval curve" id="curve">', *_axes(x, y)]
    if evidence.band:
        parts.append(_polyline(_steps(_thin(evidence.band)), x, y, stroke="#d62728", stroke_width="1",
                               stroke_dasharray="4 3", id="band"))
    parts.append(_polyline(_steps(_thin(evidence.best)), x, y, stroke="#2ca02c", stroke_width="1.5",
                           id="best"))
    parts += _attempts(points, evidence.rewinds, x, y)
    if len(points) <= 300:
        parts += [f'<circle cx="{x(s)}" cy="{y(v)}" r="2.5" fill="#1f77b4"/>' for s, v in points]
    parts += [f'<circle class="counted" data-step="{s}" cx="{x(s)}" cy="{y(by_step[s])}" r="6" fill="none" '
              f'stroke="#ff7f0e" stroke-width="2"/>' for s in evidence.counted if s in by_step]
    if best_step is not None and best_step in by_step:
        parts.append(_best_marker(best_step, x(best_step), y(by_step[best_step])))
    if stop_step is not None:
        parts.append(_stop_marker(stop_step, x(stop_step), stop_label))
    parts.append("</svg>")
    return Markup("".join(parts))


def _attempts(
    points: Sequence[tuple[int, float]], rewinds: Sequence[RewindMark], x: Scale, y: Scale
) -> list[str]:
    """The eval curve: one segment per attempt (a rewind starts a new one after its detection),
    each rewind drawn as a dashed jump back to its checkpoint's score and a marker carrying
    ``data-step`` (the detection), ``data-to-step`` (the checkpoint) and ``data-correction``."""
    if not rewinds:
        return [_polyline(_thin(points), x, y, stroke="#1f77b4", stroke_width="2", id="evals",
                          class_="attempt", data_attempt="1")]
    out, ends = [], [r.step for r in rewinds]
    for n, (lo, hi) in enumerate(zip([-math.inf, *ends], [*ends, math.inf], strict=True), start=1):
        segment = [(s, v) for s, v in points if lo < s <= hi]
        if segment:
            out.append(_polyline(_thin(segment), x, y, stroke=PALETTE[(n - 1) % len(PALETTE)],
                                 stroke_width="2", id=f"evals-{n}", class_="attempt", data_attempt=str(n)))
    for i, r in enumerate(rewinds):
        after = next(((s, v) for s, v in points if s > r.step), None)
        out.append(_rewind_marker(r, x, y, after, row=i))
    return out


def _rewind_marker(
    r: RewindMark, x: Scale, y: Scale, after: tuple[int, float] | None, row: int
) -> str:
    rx = x(r.step)
    jump = ""
    if r.best_score is not None:
        ry = y(r.best_score)
        end = f'<line x1="{rx}" y1="{ry}" x2="{x(after[0])}" y2="{y(after[1])}" stroke="#9467bd" ' \
              f'stroke-dasharray="2 2"/>' if after is not None else ""
        jump = f'<circle cx="{rx}" cy="{ry}" r="4" fill="#9467bd"/>{end}'
    text = f"rewind {r.number} to step {r.to_step}" + (f" ({r.correction})" if r.correction else "")
    # labelled at the foot of the plot: the stop and best-checkpoint labels sit near its top
    right = rx + 4 + _text_width(text) <= WIDTH - RIGHT
    tx, anchor = (rx + 4, "start") if right else (rx - 4, "end")
    return (f'<g class="marker-rewind" data-step="{r.step}" data-to-step="{r.to_step}" '
            f'data-correction="{escape(r.correction)}" data-checkpoint="{escape(r.checkpoint or "")}">'
            f'<line x1="{rx}" y1="{TOP}" x2="{rx}" y2="{HEIGHT - BOTTOM}" stroke="#9467bd" '
            f'stroke-width="1.5" stroke-dasharray="6 3"/>{jump}'
            f'<text x="{tx}" y="{HEIGHT - BOTTOM - 6 - 13 * row}" text-anchor="{anchor}" font-size="11" '
            f'fill="#9467bd">'
            f'{escape(text)}</text></g>')


def _time_format(span_s: float) -> str:
    return "%H:%M:%S" if span_s < 3600 else "%m-%d %H:%M" if span_s < 3 * 86400 else "%Y-%m-%d"


def _best_marker(step: int, bx: float, by: float) -> str:
    diamond = f"{bx},{by - 9} {bx + 8},{by} {bx},{by + 9} {bx - 8},{by}"
    label = f"best checkpoint (step {step})"
    tx, anchor = _anchor(bx, _text_width(label))
    ty = by - 13 if by - 13 > TOP + 11 else by + 22  # below the marker when it sits at the top
    return (f'<g id="marker-best" data-step="{step}">'
            f'<polygon points="{diamond}" fill="#2ca02c" stroke="#fff"/>'
            f'<text x="{tx}" y="{ty}" text-anchor="{anchor}" font-size="11" fill="#2ca02c">'
            f'{label}</text></g>')


def _stop_marker(step: int, sx: float, label: str) -> str:
    """A vertical line at the stop; its label at the top of the plot, on the side with room."""
    text = f"{label} (step {step})"
    right = sx + 4 + _text_width(text) <= WIDTH - RIGHT
    tx, anchor = (sx + 4, "start") if right else (sx - 4, "end")
    return (f'<g id="marker-stop" data-step="{step}">'
            f'<line x1="{sx}" y1="{TOP}" x2="{sx}" y2="{HEIGHT - BOTTOM}" stroke="#d62728" stroke-width="2"/>'
            f'<text x="{tx}" y="{TOP + 11}" text-anchor="{anchor}" font-size="11" fill="#d62728">'
            f'{escape(text)}</text></g>')


def _legend(names: Sequence[str], texts: Sequence[str]) -> tuple[list[str], float]:
    """Legend entries laid out in rows above the plot (never on its lines); their height."""
    out, px, row = [], float(LEFT), 0
    for n, text in enumerate(texts):
        width = _text_width(text, 12) + 18
        if px + width > WIDTH - RIGHT and px > LEFT:
            px, row = float(LEFT), row + 1
        color = PALETTE[n % len(PALETTE)]
        out.append(f'<text x="{px}" y="{TOP + 12 + 16 * row}" font-size="12" fill="{color}" '
                   f'class="legend-entry" data-tenant="{escape(names[n])}">{escape(text)}</text>')
        px += width
    return out, 16.0 * (row + 1) + 6


def series_svg(series: dict[str, Sequence[tuple[float, float]]], now: float) -> Markup:
    """Cumulative step lines, one per tenant, over wall-clock time (x: UTC); the legend sits in a
    band above the plot."""
    drawn = dict(sorted((name, pts) for name, pts in series.items() if pts))
    if not drawn:
        return Markup('<p class="muted">No enforced stops yet.</p>')
    legend, band = _legend(list(drawn), [f"{name}: {pts[-1][1]:.2f} GPU-h" for name, pts in drawn.items()])
    top, height = TOP + band, HEIGHT + band
    ts = [t for pts in drawn.values() for t, _ in pts] + [now]
    x = Scale(*_limits(ts), LEFT, WIDTH - RIGHT)
    y = Scale(*_limits([0.0] + [v for pts in drawn.values() for _, v in pts]), height - BOTTOM, top)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
             f'role="img" aria-label="reclaimed GPU-hours" id="reclaimed-chart">',
             *_axes(x, y, _time_format(x.hi - x.lo), xlabel="time (UTC)", top=top, height=height), *legend]
    for n, (name, pts) in enumerate(drawn.items()):
        color = PALETTE[n % len(PALETTE)]
        line = _steps([(pts[0][0], 0.0), *pts, (now, pts[-1][1])])
        parts.append(_polyline(line, x, y, stroke=color, stroke_width="2", data_tenant=escape(name)))
    parts.append("</svg>")
    return Markup("".join(parts))

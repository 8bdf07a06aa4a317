"""Server-rendered SVG charts (no script, no external assets; presentation attributes only, so a
strict Content-Security-Policy needs no inline styles).

Each chart is drawn twice, for a wide and for a narrow screen (:data:`WIDE`, :data:`NARROW`;
the style sheet shows one): an SVG scales with its container, so one drawn 760 units wide has
its 11-unit text at about 5 px on a 390 px phone. The narrow drawing is 330 units wide, so its
text is 10 px or more on a 360 px screen. The wide drawing keeps the ids (``curve``,
``marker-stop``, ...); the narrow one's carry the prefix ``narrow-``.

Values may be any finite floats, from denormals to ±1.8e308: a :class:`Scale` never overflows.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape

from markupsafe import Markup

from .evidence import Evidence, RewindMark

MAX_POINTS = 2000  # longer curves are thinned for drawing (every marker still drawn)
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
#: The attempts' colours: none of the running best's green, the rule's and the stop's red, or the
#: rewinds' purple.
ATTEMPTS = ("#1f77b4", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")
BIG = sys.float_info.max
#: A white outline under a marker's label, so it reads over the lines it crosses.
HALO = ' stroke="#fff" stroke-width="3" paint-order="stroke" stroke-linejoin="round"'
Points = Sequence[tuple[int, float]]


@dataclass(frozen=True)
class Layout:
    """One drawing's size (SVG units), margins, text size and number of ticks."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    font: int
    ticks: int
    prefix: str  # put before every id
    media: str  # the class the style sheet shows or hides by screen width

    @property
    def plot_right(self) -> int:
        return self.width - self.right

    def id(self, name: str) -> str:
        return self.prefix + name


WIDE = Layout(760, 320, 64, 16, 16, 40, 11, 5, "", "chart-wide")
NARROW = Layout(330, 260, 46, 8, 16, 36, 11, 4, "narrow-", "chart-narrow")


@dataclass(frozen=True)
class Scale:
    """Values ``lo..hi`` onto pixels ``a..b``. Any finite values: a difference that would
    overflow is taken on halves; a value far outside is clamped."""

    lo: float
    hi: float
    a: float  # pixel range
    b: float

    def __call__(self, v: float) -> float:
        span, off = self.hi - self.lo, v - self.lo
        if math.isfinite(span) and math.isfinite(off):
            f = off / span if span > 0 else 0.5
        else:
            half = self.hi / 2 - self.lo / 2
            f = (v / 2 - self.lo / 2) / half if half > 0 else 0.5
        f = min(max(f, -0.5), 1.5) if math.isfinite(f) else 0.5
        return round(self.a + f * (self.b - self.a), 2)


def _finite(values: Iterable[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def _limits(values: Iterable[float]) -> tuple[float, float]:
    """The drawn range of ``values`` (finite ones; 0..1 for none) with a 5 % margin, within ±BIG."""
    shown = _finite(values) or [0.0, 1.0]
    lo, hi = min(shown), max(shown)
    pad = (hi / 2 - lo / 2) * 0.1 if hi > lo else max(0.5, abs(lo) * 0.05)
    return max(lo - pad, -BIG), min(hi + pad, BIG)


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    raw = (hi / 2 - lo / 2) / n * 2
    mag = 10.0 ** math.floor(math.log10(raw)) if raw > 0 else 0.0
    if not 0 < mag < BIG / 10:  # a span of denormals, or none: the ends only
        return sorted({lo, hi})
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    if not math.isfinite(lo / step):
        return sorted({lo, hi})
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(n + 2) if first + i * step <= hi]


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def _text_width(text: str, size: float = 11) -> float:
    """About how wide ``text`` is drawn (system-ui digits and letters average ~0.6 em)."""
    return 0.6 * size * len(text)


def _anchor(px: float, width: float, lo: float, hi: float) -> tuple[float, str]:
    """Where to put a label of ``width`` centred on ``px`` so that it stays within ``lo..hi``:
    centred when it fits, else flush with the nearer edge."""
    if px - width / 2 < lo:
        return lo, "start"
    if px + width / 2 > hi:
        return hi, "end"
    return px, "middle"


def _beside(px: float, width: float, g: Layout) -> tuple[float, str]:
    """A label next to the vertical line at ``px``: to its right when it fits, else to its left,
    else across it, within the plot."""
    if px + 4 + width <= g.plot_right:
        return px + 4, "start"
    if px - 4 - width >= g.left:
        return px - 4, "end"
    return _anchor(px, width, g.left, g.plot_right)


def _axes(g: Layout, x: Scale, y: Scale, time_format: str | None = None, xlabel: str = "step", *,
          top: float | None = None, height: float | None = None) -> list[str]:
    top = g.top if top is None else top
    base = (g.height if height is None else height) - g.bottom
    out = [f'<line x1="{g.left}" y1="{base}" x2="{g.plot_right}" y2="{base}" stroke="#555"/>',
           f'<line x1="{g.left}" y1="{top}" x2="{g.left}" y2="{base}" stroke="#555"/>']
    for t in _ticks(y.lo, y.hi, g.ticks):
        py = y(t)
        out.append(f'<line x1="{g.left}" y1="{py}" x2="{g.plot_right}" y2="{py}" stroke="#eee"/>')
        out.append(f'<text x="{g.left - 5}" y="{py + 4}" text-anchor="end" '
                   f'font-size="{g.font}">{_fmt(t)}</text>')
    for t in _ticks(x.lo, x.hi, g.ticks):
        label = _fmt(t) if time_format is None else time.strftime(time_format, time.gmtime(t))
        px, anchor = _anchor(x(t), _text_width(label, g.font), g.left + 2, g.width)
        out.append(f'<text x="{px}" y="{base + 16}" text-anchor="{anchor}" '
                   f'font-size="{g.font}">{label}</text>')
    out.append(f'<text x="{(g.left + g.plot_right) / 2}" y="{base + g.bottom - 4}" text-anchor="middle" '
               f'font-size="{g.font}" fill="#555">{escape(xlabel)}</text>')
    return out


def _thin(points: Sequence[tuple[float, float]]) -> Sequence[tuple[float, float]]:
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


def _svg(g: Layout, height: float, svg_id: str, label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {g.width} {height}" role="img" '
            f'aria-label="{label}" id="{g.id(svg_id)}" class="{g.media}" data-layout="{g.media}">')


# -- the job page's eval curve --------------------------------------------------------------------
@dataclass(frozen=True)
class Marks:
    """What the curve marks besides the evals: the best checkpoint and the stop (None: none)."""

    best_step: int | None
    stop_step: int | None
    stop_label: str = "stop"


def curve_charts(
    runs: Sequence[Points], evidence: Evidence, *, best_step: int | None, stop_step: int | None,
    stop_label: str = "stop",
) -> Markup:
    """The eval curve (:func:`curve_svg`) drawn for a wide and for a narrow screen."""
    marks = Marks(best_step, stop_step, stop_label)
    if not any(runs):
        return Markup('<p class="muted">No evals yet.</p>')
    return Markup(curve_svg(runs, evidence, marks, WIDE) + curve_svg(runs, evidence, marks, NARROW))


def curve_svg(runs: Sequence[Points], evidence: Evidence, marks: Marks, g: Layout = WIDE) -> str:
    """The eval curve, one segment per attempt (``runs``, first to current), with the rule's
    evidence, a marker per rewind, a best-checkpoint marker and a stop marker. Markers carry
    ``data-step`` (the step they mark); the best and stop markers have ids ``marker-best`` and
    ``marker-stop``."""
    every = [p for run in runs for p in run]
    lines = [v for line in (*evidence.band, *evidence.best) for _, v in line]
    x = Scale(*_limits([s for s, _ in every]), g.left, g.plot_right)
    # the data stays clear of a row at the top (the stop's label) and one per rewind at the foot
    foot = (g.font + 3) * len(evidence.rewinds) + (4 if evidence.rewinds else 0)
    y = Scale(*_limits([v for _, v in every] + lines), g.height - g.bottom - foot, g.top + g.font + 6)
    parts = [_svg(g, g.height, "curve", "eval curve"), *_axes(g, x, y)]
    for n, band in enumerate(evidence.band, start=1):
        if band:
            parts.append(_polyline(_steps(_thin(band)), x, y, stroke="#d62728", stroke_width="1",
                                   stroke_dasharray="4 3", class_="band",
                                   id=g.id(_numbered("band", n, runs))))
    for n, best in enumerate(evidence.best, start=1):
        parts.append(_polyline(_steps(_thin(best)), x, y, stroke="#2ca02c", stroke_width="1.5",
                               class_="best", id=g.id(_numbered("best", n, runs))))
    parts += _attempts(runs, evidence.rewinds, x, y, g)
    if len(every) <= 300:
        parts += [f'<circle cx="{x(s)}" cy="{y(v)}" r="2.5" fill="#1f77b4"/>' for s, v in every]
    last = dict(runs[-1]) if runs else {}
    parts += [f'<circle class="counted" data-step="{s}" cx="{x(s)}" cy="{y(last[s])}" r="6" fill="none" '
              f'stroke="#ff7f0e" stroke-width="2"/>' for s in evidence.counted if s in last]
    best_at = _value_at(runs, marks.best_step)
    if marks.best_step is not None and best_at is not None:
        parts.append(_best_marker(marks.best_step, x(marks.best_step), y(best_at), g))
    if marks.stop_step is not None:
        parts.append(_stop_marker(marks.stop_step, x(marks.stop_step), marks.stop_label, g))
    parts.append("</svg>")
    return "".join(parts)


def _numbered(name: str, n: int, runs: Sequence[Points]) -> str:
    """``name`` for a job with one attempt (the ids it always had), ``name-n`` with several."""
    return name if len(runs) == 1 else f"{name}-{n}"


def _value_at(runs: Sequence[Points], step: int | None) -> float | None:
    """The score at ``step`` in the latest attempt that has one."""
    for run in reversed(runs):
        found = dict(run).get(step) if step is not None else None
        if found is not None:
            return found
    return None


def _attempts(
    runs: Sequence[Points], rewinds: Sequence[RewindMark], x: Scale, y: Scale, g: Layout
) -> list[str]:
    """One segment per attempt; each later one starts with a dashed jump from the checkpoint it
    went back to. Segments carry ``data-attempt``; rewind markers ``data-step`` (the detection),
    ``data-to-step`` (the checkpoint) and ``data-correction``."""
    if len(runs) == 1:
        return [_polyline(_thin(runs[0]), x, y, stroke="#1f77b4", stroke_width="2", id=g.id("evals"),
                          class_="attempt", data_attempt="1")]
    out = []
    for n, run in enumerate(runs, start=1):
        color = ATTEMPTS[(n - 1) % len(ATTEMPTS)]
        back = rewinds[n - 2] if 1 < n <= len(rewinds) + 1 else None
        if back is not None and back.to_step is not None and back.best_score is not None and run:
            start = (back.to_step, back.best_score)
            out.append(_polyline([start, run[0]], x, y, stroke=color, stroke_width="1.5",
                                 stroke_dasharray="3 3", class_="jump", data_attempt=str(n)))
        if run:
            out.append(_polyline(_thin(run), x, y, stroke=color, stroke_width="2", id=g.id(f"evals-{n}"),
                                 class_="attempt", data_attempt=str(n)))
    out += [_rewind_marker(r, x, y, g, row=i, rows=len(rewinds)) for i, r in enumerate(rewinds)]
    return out


def rewind_text(r: RewindMark) -> str:
    return f"rewind {r.number} to step {r.to_step}" + (f" ({r.correction})" if r.correction else "")


def _rewind_marker(r: RewindMark, x: Scale, y: Scale, g: Layout, row: int, rows: int) -> str:
    """A dashed line at the detection, a dot at the checkpoint's score, and the label at the foot
    of the plot (one row per rewind; the stop and best-checkpoint labels sit near its top)."""
    rx = x(r.step)
    dot = "" if r.best_score is None or r.to_step is None else \
        f'<circle cx="{x(r.to_step)}" cy="{y(r.best_score)}" r="4" fill="#9467bd"/>'
    text = rewind_text(r)
    tx, anchor = _beside(rx, _text_width(text, g.font), g)
    ty = g.height - g.bottom - 6 - (g.font + 3) * (rows - 1 - row)
    return (f'<g class="marker-rewind" data-step="{r.step}" data-to-step="{r.to_step}" '
            f'data-correction="{escape(r.correction)}" data-checkpoint="{escape(r.checkpoint or "")}">'
            f'<line x1="{rx}" y1="{g.top}" x2="{rx}" y2="{g.height - g.bottom}" stroke="#9467bd" '
            f'stroke-width="1.5" stroke-dasharray="6 3"/>{dot}'
            f'<text x="{tx}" y="{ty}" text-anchor="{anchor}" font-size="{g.font}" fill="#6b3fa0"{HALO}>'
            f'{escape(text)}</text></g>')


def _best_marker(step: int, bx: float, by: float, g: Layout) -> str:
    diamond = f"{bx},{by - 9} {bx + 8},{by} {bx},{by + 9} {bx - 8},{by}"
    label = f"best checkpoint (step {step})"
    tx, anchor = _anchor(bx, _text_width(label, g.font), g.left, g.plot_right)
    ty = by - 13 if by - 13 > g.top + 2 * g.font + 6 else by + 22  # below it when near the stop's label
    return (f'<g id="{g.id("marker-best")}" data-step="{step}" class="marker-best">'
            f'<polygon points="{diamond}" fill="#2ca02c" stroke="#fff"/>'
            f'<text x="{tx}" y="{ty}" text-anchor="{anchor}" font-size="{g.font}" fill="#1e7a1e"{HALO}>'
            f'{label}</text></g>')


def _stop_marker(step: int, sx: float, label: str, g: Layout) -> str:
    """A vertical line at the stop; its label at the top of the plot, on the side with room."""
    text = f"{label} (step {step})"
    tx, anchor = _beside(sx, _text_width(text, g.font), g)
    return (f'<g id="{g.id("marker-stop")}" data-step="{step}" class="marker-stop">'
            f'<line x1="{sx}" y1="{g.top}" x2="{sx}" y2="{g.height - g.bottom}" stroke="#d62728" '
            f'stroke-width="2"/><text x="{tx}" y="{g.top + g.font}" text-anchor="{anchor}" '
            f'font-size="{g.font}" fill="#d62728"{HALO}>{escape(text)}</text></g>')


# -- the savings page's reclaimed GPU-hours -------------------------------------------------------
def _time_format(span_s: float) -> str:
    return "%H:%M:%S" if span_s < 3600 else "%m-%d %H:%M" if span_s < 3 * 86400 else "%Y-%m-%d"


def _legend(names: Sequence[str], texts: Sequence[str], g: Layout) -> tuple[list[str], float]:
    """Legend entries laid out in rows above the plot (never on its lines); their height."""
    out, px, row = [], float(g.left), 0
    size = g.font + 1
    for n, text in enumerate(texts):
        width = _text_width(text, size) + 18
        if px + width > g.plot_right and px > g.left:
            px, row = float(g.left), row + 1
        color = PALETTE[n % len(PALETTE)]
        out.append(f'<text x="{px}" y="{g.top + size + (size + 4) * row}" font-size="{size}" fill="{color}" '
                   f'class="legend-entry" data-tenant="{escape(names[n])}">{escape(text)}</text>')
        px += width
    return out, (size + 4.0) * (row + 1) + 6


def series_charts(series: dict[str, Sequence[tuple[float, float]]], now: float) -> Markup:
    """:func:`series_svg` drawn for a wide and for a narrow screen."""
    if not any(series.values()):
        return Markup('<p class="muted">No enforced stops yet.</p>')
    return Markup(series_svg(series, now, WIDE) + series_svg(series, now, NARROW))


def series_svg(series: dict[str, Sequence[tuple[float, float]]], now: float, g: Layout = WIDE) -> str:
    """Cumulative step lines, one per tenant, over wall-clock time (x: UTC); the legend sits in a
    band above the plot."""
    drawn = dict(sorted((name, pts) for name, pts in series.items() if pts))
    legend, band = _legend(list(drawn), [f"{name}: {pts[-1][1]:.2f} GPU-h" for name, pts in drawn.items()], g)
    top, height = g.top + band, g.height + band
    ts = [t for pts in drawn.values() for t, _ in pts] + [now]
    x = Scale(*_limits(ts), g.left, g.plot_right)
    y = Scale(*_limits([0.0] + [v for pts in drawn.values() for _, v in pts]), height - g.bottom, top)
    parts = [_svg(g, height, "reclaimed-chart", "reclaimed GPU-hours"),
             *_axes(g, x, y, _time_format(x.hi - x.lo), xlabel="time (UTC)", top=top, height=height), *legend]
    for n, (name, pts) in enumerate(drawn.items()):
        color = PALETTE[n % len(PALETTE)]
        line = _steps([(pts[0][0], 0.0), *pts, (now, pts[-1][1])])
        parts.append(_polyline(line, x, y, stroke=color, stroke_width="2", data_tenant=escape(name)))
    parts.append("</svg>")
    return "".join(parts)


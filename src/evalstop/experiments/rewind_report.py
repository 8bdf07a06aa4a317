"""The report's rewind section: the real-training table of ``evalstop rewind`` (from the shipped
runs, no training) and its figure, delivered quality against GPU-hours per arm."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from .rewind_cmd import read_runs
from .rewind_study import SHIPPED, analyse_families, headline
from .rewind_table import format_families

TITLE = "Beyond the paper: rewind instead of stop (real TRL GRPO training)"


def rewind_section(figures_dir: Path | None) -> tuple[list[str], str, Path | None]:
    """(Markdown lines, HTML, the figure's path or None); empty when the runs are not shipped."""
    if not SHIPPED.is_file():
        return [], "", None
    batches = read_runs(SHIPPED)
    families = analyse_families(batches)
    result = headline(families)
    figure = None
    if figures_dir is not None:
        from .rewind_figure import plot

        figure = plot(result, figures_dir / "rewind.png")
    table = format_families(families)
    runs = '; '.join(str(c) for c in result['command'])
    source = f"evalstop rewind (docs/rewind.md; the runs: {runs})"
    lines = ["", f"## {TITLE}", "", source, ""]
    parts = [f"<h2 id='rewind'>{html.escape(TITLE)}</h2>", f"<p class='note'>{html.escape(source)}</p>"]
    if figure is not None:
        lines += [f"![rewind: quality vs GPU-hours]({figure.parent.name}/{figure.name})", ""]
        data = base64.b64encode(figure.read_bytes()).decode()
        parts.append(f"<img alt='rewind' src='data:image/png;base64,{data}'>")
    lines += [table, ""]
    parts.append(f"<pre>{html.escape(table)}</pre>")
    return lines, "\n".join(parts), figure

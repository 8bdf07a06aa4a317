"""The testbed's report: ``report.md``, ``report.html`` (figures embedded) and the PNGs, in the
style of the studies report (:mod:`evalstop.experiments.report`).

Sections: the run's provenance and command; per arm, the measured figures (JCT, slot-hours,
start-up, delivered quality, the rule's precision/recall/FPR); the simulator held against the
enforced arm (mean and p95 JCT error, per-job start-time error, slot-hours saved, stops); the
JCT CDF of the real arms and their simulations; each job's watched and gold curves with its
stop and delivered checkpoint; the per-job table.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path
from typing import Any

from .predict import markdown as prediction_markdown
from .simcheck import markdown as sim_markdown
from .summary import markdown as summary_markdown

#: Shown in place of the figures when matplotlib is missing (the report is still written).
NO_FIGURES = "Figures omitted: matplotlib is not installed (pip install -e '.[plot]')."
NO_PREDICTION = (
    "\nNo held-out prediction: run `evalstop testbed calibrate` on another trace and pass its "
    "`engine-model.json` with `--engine-model`.\n"
)
FIGURES = (("jct_cdf.png", "JCT CDF, real and simulated"), ("curves.png", "Each job's curves and stop"))


def write_report(
    out: Path, summary: dict[str, Any], raw: dict[str, list[dict[str, Any]]], *, figures: bool = True
) -> list[Path]:
    """Write ``summary.md`` (the text the command prints), ``report.md``, ``report.html`` and the
    PNGs (unless ``figures`` is false) into ``out``; return the report's paths."""
    pngs = _write_figures(summary, raw, out) if figures else []
    text = summary_markdown(summary, summary.get("command", ""))
    if "prediction" in summary:
        text += prediction_markdown(summary["prediction"], summary["prediction"]["model"])
    else:
        text += NO_PREDICTION
    text += sim_markdown(summary["simulator"])
    (out / "summary.md").write_text(text)
    md = text + "\n## Figures\n\n"
    if not pngs:
        md += (NO_FIGURES if figures else "Figures not drawn.") + "\n"
    for path, title in pngs:
        md += f"![{title}]({path.name})\n\n"
    (out / "report.md").write_text(md)
    (out / "report.html").write_text(render_html(md, out))
    return [out / "report.md", out / "report.html", *(p for p, _ in pngs)]


def _write_figures(
    summary: dict[str, Any], raw: dict[str, list[dict[str, Any]]], out: Path
) -> list[tuple[Path, str]]:
    try:
        from .figures import jct_cdf, job_curves
    except ModuleNotFoundError:
        return []
    jct_cdf(summary, out / FIGURES[0][0])
    job_curves(summary, raw, out / FIGURES[1][0])
    return [(out / name, title) for name, title in FIGURES]


_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 6px}
th{background:#f3f3f3}img{max-width:100%;border:1px solid #eee;margin:.5em 0}code{font-size:12px}"""
_IMAGE = re.compile(r"^!\[(?P<alt>[^\]]*)\]\((?P<src>[^)]+)\)$")


def render_html(md: str, folder: Path) -> str:
    """The report's Markdown (headings, paragraphs, tables, images) as one self-contained HTML
    file: images are embedded as base64."""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>EvalStop testbed</title>",
        f"<style>{_CSS}</style></head><body>",
    ]
    for block in md.split("\n\n"):
        lines = [line for line in block.strip().splitlines() if line.strip()]
        if not lines:
            continue
        if lines[0].startswith("#"):
            level = len(lines[0]) - len(lines[0].lstrip("#"))
            parts.append(f"<h{level}>{_inline(lines[0].lstrip('#').strip())}</h{level}>")
            lines = lines[1:]
            if not lines:
                continue
        if lines[0].startswith("|"):
            parts.append(_table(lines))
        elif (image := _IMAGE.match(lines[0])) is not None:
            parts.append(_image(folder / image["src"], image["alt"]))
        else:
            parts.append(f"<p>{_inline(' '.join(lines))}</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _inline(text: str) -> str:
    """Escape, then `code` and **bold**."""
    out = html.escape(text)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)


def _table(lines: list[str]) -> str:
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in lines
        if not line.startswith("|---")
    ]
    head = "".join(f"<th>{_inline(c)}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in rows[1:])
    return f"<table><tr>{head}</tr>{body}</table>"


def _image(path: Path, alt: str) -> str:
    if not path.exists():
        return f"<p>(missing figure: {html.escape(path.name)})</p>"
    data = base64.b64encode(path.read_bytes()).decode()
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{data}'>"

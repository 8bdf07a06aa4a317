"""``evalstop report RESULTS_DIR``: Markdown, PNG figures and one self-contained HTML file.

The claims table comes first: each claim of the paper, the paper's value, ours with its 95 %
CI and p-value, and the verdict (and by how much it misses). Then one section per study: what
it varies, its figures, and a table of every policy's means at every point. The HTML embeds
the figures (base64), so it is one file to send around.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .legend import legend_lines
from .rewind_report import rewind_section

__all__ = ["ResultsError", "add_arguments", "load_results", "render_markdown", "run", "write_report"]

_ROLE_TITLES = {
    "paper": "The paper's claims, in the paper's setting",
    "transfer": "The same claims beyond the paper's setting (realistic preset, Philly trace)",
}
#: (metric, column header, scale, decimals)
_TABLE = (("precision", "precision %", 100, 1), ("recall", "recall %", 100, 1), ("fpr", "FPR %", 100, 1),
          ("jct_mean_s", "JCT mean h", 1 / 3600, 2), ("jct_p95_s", "JCT p95 h", 1 / 3600, 2),
          ("wasted_gpu_hours", "wasted GPU-h", 1, 0), ("hacking_gpu_hours", "GPU-h on hacking", 1, 0),
          ("mean_regret_hacking", "regret (hacking)", 1, 3))
_LEGEND = ("precision", "recall", "FPR", "JCT", "wasted GPU-h", "GPU-h on hacking", "regret (hacking)",
           "evals per RLHF job", "eval GPU-h", "total GPU-h", "JCT change", "p (t / Wilcoxon)", "d_z",
           "[lo, hi]", "—")
#: Shown in place of the figures when matplotlib is missing (the report is still written).
NO_FIGURES = "Figures omitted: matplotlib is not installed (pip install -e '.[plot]', then evalstop report)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_dir", type=Path, help="a directory written by `evalstop reproduce --all`")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if not args.results_dir.is_dir():
        what = "is a file" if args.results_dir.exists() else "does not exist"
        print(f"evalstop report: RESULTS_DIR {args.results_dir} {what}: give the directory that "
              "`evalstop reproduce --all` wrote (its --out, default results)", file=sys.stderr)
        return 2
    try:
        paths = write_report(args.results_dir)
    except (FileNotFoundError, ResultsError) as exc:
        print(f"evalstop report: {exc}", file=sys.stderr)
        return 2
    if not have_matplotlib():
        print(NO_FIGURES, file=sys.stderr)
    print("\n".join(str(p) for p in paths))
    return 0


def write_report(results_dir: Path) -> list[Path]:
    """Write ``report.md``, ``report.html`` and ``figures/*.png``; return their paths."""
    source = results_dir / "results.json"
    if not source.is_file():
        raise FileNotFoundError(f"{source} not found (run `evalstop reproduce --all --out {results_dir}`)")
    doc = load_results(source)
    figures = _write_figures(doc, results_dir / "figures") if have_matplotlib() else {}
    md = render_markdown(doc, figures, relative_to=results_dir)
    rewind_md, rewind_html, rewind_png = rewind_section(results_dir / "figures" if figures else None)
    (results_dir / "report.md").write_text(md + "\n".join(rewind_md))
    page = render_html(doc, figures).replace("</body></html>", rewind_html + "\n</body></html>")
    (results_dir / "report.html").write_text(page)
    extra = [] if rewind_png is None else [rewind_png]
    return [results_dir / "report.md", results_dir / "report.html", *figures.values(), *extra]


class ResultsError(ValueError):
    """A results.json that is not one ``evalstop reproduce`` wrote (corrupt, cut short, other)."""


#: The top-level keys of results.json the report reads, and their JSON types.
RESULTS_KEYS = {"studies": dict, "claims": list, "tasks": dict}


def load_results(source: Path) -> dict[str, Any]:
    """``source`` parsed and checked for the keys the report reads; a ResultsError names the file."""
    rerun = f"run `evalstop reproduce --all --out {source.parent}` again (finished tasks come from its cache)"
    try:
        doc = json.loads(source.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{source} is not valid JSON ({exc}): is it cut short? {rerun}") from None
    if not isinstance(doc, dict):
        kind = type(doc).__name__
        raise ResultsError(f"{source} holds a {kind}, not the object `evalstop reproduce` writes; {rerun}")
    wrong = [k for k, kind in RESULTS_KEYS.items() if not isinstance(doc.get(k), kind)]
    if wrong:
        raise ResultsError(f"{source} lacks {', '.join(map(repr, wrong))} (or has the wrong type): not a "
                           f"results file of `evalstop reproduce --all`; {rerun}")
    return doc


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _write_figures(doc: Mapping[str, Any], folder: Path) -> dict[tuple[str, str], Path]:
    from matplotlib import pyplot as plt

    from .figures import FIGURES

    folder.mkdir(parents=True, exist_ok=True)
    out: dict[tuple[str, str], Path] = {}
    for name, study in doc["studies"].items():
        if study["status"] != "ok":
            continue
        for kind in study["figures"]:
            fig = FIGURES[kind](study)
            path = folder / f"{name}--{kind}.png"
            fig.savefig(path, dpi=110)
            plt.close(fig)
            out[(name, kind)] = path
    return out


# -- Markdown --------------------------------------------------------------------------------
def render_markdown(
    doc: Mapping[str, Any], figures: Mapping[tuple[str, str], Path], relative_to: Path
) -> str:
    lines = ["# EvalStop: every claim of the paper, reproduced", "", _provenance(doc), ""]
    if not figures:
        lines += [NO_FIGURES, ""]
    lines += _claims_md(doc)
    lines += _beyond_md(doc)
    lines += ["## Columns", "", *legend_lines(_LEGEND, prefix="- "), ""]
    for name, study in doc["studies"].items():
        lines += ["", f"## {study['title']}", ""]
        if study["status"] != "ok":
            lines += [f"Skipped: {study['reason']}"]
            continue
        lines += [study["description"], "", _setting(study), ""]
        for kind in study["figures"]:
            path = figures.get((name, kind))
            if path is not None:
                lines += [f"![{name} {kind}]({path.relative_to(relative_to)})", ""]
        lines += _study_table(study)
        cost = _eval_cost_table(study)
        if cost:
            lines += ["", *cost]
    return "\n".join(lines) + "\n"


def _provenance(doc: Mapping[str, Any]) -> str:
    tasks = doc["tasks"]
    return (f"evalstop {doc['code_version']}, {doc['created_utc']}, {doc['backend']}; "
            f"{tasks['ran']} tasks run and {tasks['cached']} read from the cache in {doc['wall_s']} s. "
            "Means over seeds with bootstrap 95 % CIs; changes are paired by seed (every policy sees the "
            "same workloads), p from the paired t-test (Wilcoxon in results.json).")


def _claims_md(doc: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    for role, title in _ROLE_TITLES.items():
        claims = [c for c in doc["claims"] if c["role"] == role]
        if not claims:
            continue
        n_ok = sum(c["reproduced"] for c in claims)
        lines += [f"## {title}: {n_ok} of {len(claims)} reproduced", "",
                  "| study | claim | paper | ours (95 % CI) | tolerance | verdict |",
                  "|---|---|---|---|---|---|"]
        for c in claims:
            mark = "✅" if c["reproduced"] else "❌"
            lines.append(f"| {c['study']} | {c['name']} | {c['paper']} | {c['ours']} | {c['tolerance']} | "
                         f"{mark} {c['verdict']} |")
        notes = [c for c in claims if c["note"] and not c["reproduced"]]
        if notes:
            lines += ["", "Why we believe the misses miss:", ""]
            lines += [f"- **{c['study']}: {c['name']}.** {' '.join(c['note'].split())}" for c in notes]
        lines.append("")
    return lines


_BEYOND = (("precision", "precision %", 100, 1), ("recall", "recall %", 100, 1), ("fpr", "FPR %", 100, 1),
           ("jct_mean_s", "JCT mean h", 1 / 3600, 2), ("mean_regret", "regret (all jobs)", 1, 3),
           ("mean_regret_hacking", "regret (hacking)", 1, 3))


def _beyond_md(doc: Mapping[str, Any]) -> list[str]:
    """The recommended (default) rule beside the paper's rule on every ``beyond`` study: one
    table, every policy of each study, with the JCT change against the study's baseline."""
    studies = [s for s in doc["studies"].values() if s.get("role") == "beyond" and s["status"] == "ok"]
    if not studies:
        return []
    head = ["study", "policy", *[t[1] for t in _BEYOND], "JCT change vs baseline"]
    lines = ["## Beyond the paper: the default rule beside the paper's rule", "",
             "The rule evalstop uses when none is named (`DEFAULT_SPEC`) and the paper's rule on the same "
             "workloads per seed (means and 95 % CIs over seeds; sections below give each setting).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for study in studies:
        for label, stats in study["summary"][0].items():
            cells = [study["name"], label, *[_stat(stats[m], scale, d) for m, _, scale, d in _BEYOND]]
            cells.append(_jct_change(study["comparisons"][0].get(label))[0])
            lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _setting(study: Mapping[str, Any]) -> str:
    w = study["points"][0]["workload"]
    trace = " Arrivals, sizes and durations from the Philly trace." if study["points"][0]["trace"] else ""
    swept = f" Swept: `{study['x_param']}` = {study['x_values']}." if study["x_param"] else ""
    return (f"Setting: {w['total_gpus']} GPUs, {w['n_jobs']} jobs per run, load {w['offered_load']}, "
            f"{100 * w['rlhf_share']:.0f} % RLHF ({100 * w['hacking_share']:.0f} % of them hacking), "
            f"{w['evals_per_job']} evals per job, eval noise sd {w['eval_noise']}; "
            f"{len(study['seeds'])} seeds; "
            f"baseline {study['baseline']}.{swept}{trace}")


def _study_table(study: Mapping[str, Any]) -> list[str]:
    swept = bool(study["x_param"])
    head = ["point"] if swept else []
    head += ["policy", *[t[1] for t in _TABLE], "JCT change", "p (t / Wilcoxon)", "d_z"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, point in enumerate(study["summary"]):
        x = (study["tick_labels"] or study["x_values"])[i]
        for label, stats in point.items():
            cells = [str(x)] if swept else []
            cells += [label, *[_stat(stats[m], scale, unit) for m, _, scale, unit in _TABLE]]
            cells += _jct_change(study["comparisons"][i].get(label))
            lines.append("| " + " | ".join(cells) + " |")
    return lines


#: (metric, column header, scale, decimals) of a study whose evals cost GPU time
_EVAL_COST = (("evals_per_rlhf_job", "evals per RLHF job", 1, 1), ("eval_gpu_hours", "eval GPU-h", 1, 0),
              ("gpu_hours_total", "total GPU-h", 1, 0), ("mean_regret_hacking", "regret (hacking)", 1, 3))


def _eval_cost_table(study: Mapping[str, Any]) -> list[str]:
    """What evals cost and what each policy saves of it, when the study's evals cost GPU time
    (its runs counted the evals they ran); empty otherwise."""
    timed = any(stats["evals_per_rlhf_job"]["mean"] is not None
                for point in study["summary"] for stats in point.values() if "evals_per_rlhf_job" in stats)
    if not timed:
        return []
    swept = bool(study["x_param"])
    head = ["point"] if swept else []
    head += ["policy", *[t[1] for t in _EVAL_COST], "eval GPU-h change", "total GPU-h change", "JCT change"]
    lines = [f"Eval cost: evals run, GPU-hours (evals included in the total) and changes against "
             f"{study['baseline']}, paired by seed (95 % CI).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, point in enumerate(study["summary"]):
        x = (study["tick_labels"] or study["x_values"])[i]
        for label, stats in point.items():
            compared = study["comparisons"][i].get(label) or {}
            cells = [str(x)] if swept else []
            cells += [label, *[_stat(stats[m], scale, d) for m, _, scale, d in _EVAL_COST]]
            cells += [_change(compared.get(m)) for m in ("eval_gpu_hours", "gpu_hours_total", "jct_mean_s")]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def _change(c: Mapping[str, Any] | None) -> str:
    if c is None or c["rel_change"] is None:
        return "—"
    return f"{100 * c['rel_change']:+.1f} % [{_pct(c['rel_change_ci_lo'])}, {_pct(c['rel_change_ci_hi'])}]"


def _stat(stat: Mapping[str, Any], scale: float, digits: int) -> str:
    if stat["mean"] is None:
        return "—"
    text = f"{scale * stat['mean']:.{digits}f}"
    if stat["lo"] is not None:
        text += f" [{scale * stat['lo']:.{digits}f}, {scale * stat['hi']:.{digits}f}]"
    return text


def _jct_change(comparisons: Mapping[str, Any] | None) -> list[str]:
    c = None if comparisons is None else comparisons.get("jct_mean_s")
    if c is None or c["rel_change"] is None:
        return ["—", "—", "—"]
    change = f"{100 * c['rel_change']:+.1f} % [{_pct(c['rel_change_ci_lo'])}, {_pct(c['rel_change_ci_hi'])}]"
    p = f"{_p(c['p_ttest'])} / {_p(c['p_wilcoxon'])}"
    dz = "—" if c["cohens_dz"] is None else f"{c['cohens_dz']:.2f}"
    return [change, p, dz]


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:+.1f}"


def _p(v: float | None) -> str:
    return "—" if v is None else f"{v:.2g}"


# -- HTML ------------------------------------------------------------------------------------
_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 6px}
th{background:#f3f3f3}tr.ok td.verdict{background:#e6f4e6}tr.miss td.verdict{background:#fbe3e3}
img{max-width:100%;border:1px solid #eee;margin:.5em 0}.note{font-size:13px;color:#444}"""


def render_html(doc: Mapping[str, Any], figures: Mapping[tuple[str, str], Path]) -> str:
    e = html.escape
    parts = ["<!doctype html><html><head><meta charset='utf-8'>",
             "<title>EvalStop: every claim of the paper, reproduced</title>",
             f"<style>{_CSS}</style></head><body>",
             "<h1>EvalStop: every claim of the paper, reproduced</h1>", f"<p>{e(_provenance(doc))}</p>"]
    if not figures:
        parts.append(f"<p class='note'>{e(NO_FIGURES)}</p>")
    for role, title in _ROLE_TITLES.items():
        claims = [c for c in doc["claims"] if c["role"] == role]
        if not claims:
            continue
        n_ok = sum(c["reproduced"] for c in claims)
        parts.append(f"<h2>{e(title)}: {n_ok} of {len(claims)} reproduced</h2><table id='claims-{role}'>")
        parts.append("<tr><th>study</th><th>claim</th><th>paper</th><th>ours (95 % CI)</th><th>tolerance</th>"
                     "<th>verdict</th></tr>")
        for c in claims:
            cls = "ok" if c["reproduced"] else "miss"
            keys = ("study", "name", "paper", "ours", "tolerance")
            cells = "".join(f"<td>{e(str(c[k]))}</td>" for k in keys)
            parts.append(f"<tr class='{cls}'>{cells}<td class='verdict'>{e(c['verdict'])}</td></tr>")
        parts.append("</table>")
        for c in claims:
            if c["note"] and not c["reproduced"]:
                note = e(" ".join(c["note"].split()))
                parts.append(f"<p class='note'><b>{e(c['study'])}: {e(c['name'])}.</b> {note}</p>")
    items = "".join(f"<li>{e(line)}</li>" for line in legend_lines(_LEGEND))
    parts.append(f"<h2 id='columns'>Columns</h2><ul class='note'>{items}</ul>")
    for name, study in doc["studies"].items():
        parts.append(f"<h2 id='{e(name)}'>{e(study['title'])}</h2>")
        if study["status"] != "ok":
            parts.append(f"<p>Skipped: {e(study['reason'])}</p>")
            continue
        parts.append(f"<p>{e(study['description'])}</p><p class='note'>{e(_setting(study))}</p>")
        for kind in study["figures"]:
            path = figures.get((name, kind))
            if path is not None:
                data = base64.b64encode(path.read_bytes()).decode()
                parts.append(f"<img alt='{e(name)} {e(kind)}' src='data:image/png;base64,{data}'>")
        parts.append(_md_table_to_html(_study_table(study)))
        cost = _eval_cost_table(study)
        if cost:
            parts += [f"<p class='note'>{e(cost[0])}</p>", _md_table_to_html(cost[2:])]
    parts.append("</body></html>")
    return "\n".join(parts)


def _md_table_to_html(lines: list[str]) -> str:
    e = html.escape
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines if not line.startswith("|---")]
    head = "".join(f"<th>{e(c)}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows[1:])
    return f"<table><tr>{head}</tr>{body}</table>"

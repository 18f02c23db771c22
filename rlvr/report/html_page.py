"""report/index.html: the summary table, the plots and, per domain, the best and worst validation responses of the
last validation. One self-contained page (images beside it, no scripts, no network)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from rlvr.report.plots import PLOTS
from rlvr.report.run_data import RunData
from rlvr.report.summary import Summary, checkpoints_line, table_rows

SAMPLES_PER_SIDE = 3
_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ccc; padding: 4px 10px; text-align: left; font-size: 14px; vertical-align: top; }
th { background: #f3f3f3; }
figure { margin: 1.5em 0; }
figure img { max-width: 100%; border: 1px solid #eee; }
pre { white-space: pre-wrap; margin: 0; font-size: 13px; max-height: 12em; overflow: auto; }
.note { color: #a40; }
.good { background: #eef8ee; } .bad { background: #fbeeee; }
"""


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def summary_table(summary: Summary) -> str:
    header, cells = table_rows(summary)
    rows = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in cells)
    parts = [f'<table class="summary"><thead><tr>{"".join(f"<th>{_e(h)}</th>" for h in header)}</tr></thead>'
             f"<tbody>{rows}</tbody></table>"]
    if summary.phases:
        parts.append("<p>Time per step (mean seconds): " + " | ".join(
            f"{_e(k)} {v:.1f}" for k, v in summary.phases.items()) + "</p>")
    if summary.tokens_per_s:
        parts.append("<p>Tokens/s: " + " | ".join(f"{_e(k)} {v:.1f}" for k, v in summary.tokens_per_s.items())
                     + "</p>")
    if line := checkpoints_line(summary):
        parts.append(f"<p>{_e(line[0].upper() + line[1:])}</p>")
    parts += [f'<p class="note">{_e(p)}</p>' for p in summary.problems]
    return "\n".join(parts)


def _goodness(sample: dict) -> tuple[bool, float]:
    reward = sample.get("reward")
    return bool(sample.get("correct")), reward if reward is not None else float("-inf")


def best_and_worst(run: RunData, domain: str, n: int = SAMPLES_PER_SIDE) -> tuple[int | None, list, list]:
    """The last validation's responses of `domain`: the n best and the n worst (correct first, then reward)."""
    rows = [s for s in run.val_samples if s.get("domain") == domain]
    if not rows:
        return None, [], []
    step = max(s["step"] for s in rows)
    rows = [s for s in rows if s["step"] == step]
    ranked = sorted(rows, key=_goodness, reverse=True)
    n = min(n, max(1, len(ranked) // 2))  # few responses: half best, half worst, never one in both
    best = ranked[:n]
    worst = [s for s in ranked[::-1] if s not in best][:n]
    return step, best, worst


def _samples_section(run: RunData, tag: str = "") -> str:
    parts = [f"<h2>{_e(tag)}Validation samples</h2>"]
    any_rows = False
    for d in run.domains:
        step, best, worst = best_and_worst(run, d)
        if step is None:
            continue
        any_rows = True
        parts.append(f"<h3>{_e(d)} (validation at step {step})</h3><table class=\"samples\"><tr><th></th>"
                     "<th>prompt</th><th>response</th><th>ground truth</th><th>reward</th><th>correct</th>"
                     "<th>status</th></tr>")
        for label, rows, css in (("best", best, "good"), ("worst", worst, "bad")):
            for s in rows:
                prompt = s.get("question") or s.get("prompt")
                parts.append(f'<tr class="{css}"><td>{label}</td><td><pre>{_e(prompt)}</pre></td>'
                             f"<td><pre>{_e(s.get('response'))}</pre></td><td><pre>{_e(s.get('ground_truth'))}"
                             f"</pre></td><td>{_e(s.get('reward'))}</td><td>{_e(s.get('correct'))}</td>"
                             f"<td>{_e(s.get('status'))}</td></tr>")
        parts.append("</table>")
    if not any_rows:
        parts.append("<p>No validation samples were recorded (val_samples.jsonl is empty or missing).</p>")
    return "\n".join(parts)


def write_index(runs: list[RunData], summaries: list[Summary], images: dict[str, Path], out_dir: Path) -> Path:
    title = "rlvr report: " + " vs ".join(r.name for r in runs)
    parts = [f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{_e(title)}</title>"
             f"<style>{_CSS}</style></head><body><h1>{_e(title)}</h1>"]
    for i, (run, summary) in enumerate(zip(runs, summaries)):
        tag = f"[{i + 1}] " if len(runs) > 1 else ""
        parts.append(f"<h2>{_e(tag)}{_e(run.name)}: {_e(summary.progress)}</h2>"
                     f"<p><code>{_e(run.path)}</code></p>{summary_table(summary)}")
    parts.append("<h2>Plots</h2>")
    for name, path in images.items():
        caption = PLOTS[name][0]
        parts.append(f'<figure><img src="{_e(path.name)}" alt="{_e(caption)}"><figcaption>{_e(caption)}'
                     "</figcaption></figure>")
    for i, run in enumerate(runs):  # each run's best and worst answers, in the order of the summaries
        parts.append(_samples_section(run, f"[{i + 1}] {run.name}: " if len(runs) > 1 else ""))
    parts.append("</body></html>")
    out = out_dir / "index.html"
    out.write_text("\n".join(parts))
    return out

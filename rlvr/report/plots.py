"""The report's PNG plots (matplotlib, no display needed). Every plot takes one run or several: colour names the
domain (or worker, or phase), line style names the run, so two runs overlay on the same axes."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")  # files only; never a window, never a display server
import matplotlib.pyplot as plt  # noqa: E402

from rlvr.report.run_data import RunData  # noqa: E402

RUN_STYLES = ("-", "--", ":", "-.")
COLORS = plt.get_cmap("tab10").colors
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")  # with shrinking sizes: coinciding lines stay visible


def _domains(runs: list[RunData]) -> list[str]:
    out: list[str] = []
    for run in runs:
        out += [d for d in run.domains if d not in out]
    return out


def _label(label: str, run_index: int, runs: list[RunData]) -> str:
    return label if len(runs) == 1 else f"{label} [{run_index + 1}]"


Points = Callable[[RunData], "list[tuple[int, float]]"]


def _key(key: str) -> Points:
    return lambda run: run.series(key)


def _lines(ax, runs: list[RunData], series: dict[str, Points], title: str, ylabel: str,
           kind: str = "value") -> bool:
    """One line per (label, run): `series` maps a label to its (step, value) points in a run. kind "fraction"
    fixes the y range to [0, 1], "count" starts it at 0."""
    drawn, top, steps = False, 0.0, set()
    for i, run in enumerate(runs):
        for j, (label, points_of) in enumerate(series.items()):
            points = points_of(run)
            if not points:
                continue
            xs, ys = zip(*points)
            ax.plot(xs, ys, RUN_STYLES[i % len(RUN_STYLES)], marker=MARKERS[j % 10],
                    markersize=max(3.0, 9.0 - 1.5 * j), color=COLORS[j % 10], label=_label(label, i, runs),
                    alpha=0.85)
            drawn, top = True, max(top, *ys)
            steps.update(xs)
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if kind == "fraction":
        ax.set_ylim(-0.05, 1.05)
    elif kind == "count":
        ax.set_ylim(-0.05 * max(top, 1.0), max(top, 1.0) * 1.1)
    if drawn:
        ax.legend(fontsize=8)
        ax.xaxis.get_major_locator().set_params(integer=True)
        if len(steps) == 1:  # one point: a readable axis around it, not +-0.04
            (only,) = steps
            ax.set_xlim(only - 1, only + 1)
            ax.set_xticks([only - 1, only, only + 1])
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="grey")
    return drawn


def _figure(runs: list[RunData], ncols: int, title: str, width: float = 5.0, nrows: int = 1):
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, 3.8 * nrows), squeeze=False)
    if len(runs) > 1:
        title += "\n" + "   ".join(f"[{i + 1}] {RUN_STYLES[i % 4]} {r.name}" for i, r in enumerate(runs))
    fig.suptitle(title, fontsize=10)
    return fig, list(axes.flat)


def _save(fig, path: Path, drawn: bool) -> Path | None:
    try:
        if not drawn:
            return None
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        return path
    finally:
        plt.close(fig)


def plot_val_correct(runs: list[RunData], path: Path) -> Path | None:
    fig, (ax,) = _figure(runs, 1, "validation accuracy", width=7)
    series = {d: _key(f"val_correct/{d}/mean") for d in _domains(runs)}
    series["all"] = _key("val_correct/all/mean")
    drawn = _lines(ax, runs, series, "val_correct per domain", "val_correct", kind="fraction")
    return _save(fig, path, drawn)


def plot_train_reward(runs: list[RunData], path: Path) -> Path | None:
    fig, (ax,) = _figure(runs, 1, "training reward", width=7)
    series = {d: _key(f"{d}/reward/mean") for d in _domains(runs)}
    return _save(fig, path, _lines(ax, runs, series, "mean reward of the trained samples per domain", "reward"))


def plot_response_length(runs: list[RunData], path: Path) -> Path | None:
    fig, axes = _figure(runs, 2, "response length (tokens)")
    domains = _domains(runs)
    drawn = _lines(axes[0], runs, {d: _key(f"{d}/response_length/mean") for d in domains},
                   "training samples, mean", "tokens")
    drawn |= _lines(axes[1], runs, {d: _key(f"val/{d}/response_length/mean") for d in domains},
                    "validation responses, mean", "tokens")
    return _save(fig, path, drawn)


def _phases(runs: list[RunData]) -> list[str]:
    out: list[str] = []
    for run in runs:
        out += [k for k in run.keys(r"time/[\w\-]+") if k != "time/step" and k not in out]
    return out


def plot_time_per_phase(runs: list[RunData], path: Path) -> Path | None:
    phases = _phases(runs)
    if not phases:
        return None
    fig, (ax,) = _figure(runs, 1, "time per phase", width=8)
    if len(runs) == 1:  # stacked seconds per step
        run, bottoms = runs[0], {}
        for j, key in enumerate(phases):
            points = run.series(key)
            xs = [s for s, _ in points]
            ys = [v for _, v in points]
            ax.bar(xs, ys, bottom=[bottoms.get(s, 0.0) for s in xs], color=COLORS[j % 10], label=key[5:])
            for s, v in points:
                bottoms[s] = bottoms.get(s, 0.0) + v
        ax.set_xlabel("step")
        ax.set_ylabel("seconds")
        ax.set_title("seconds per step, by phase (val: the validation logged at that step)")
        ax.xaxis.get_major_locator().set_params(integer=True)
    else:  # mean seconds per phase, runs side by side
        width = 0.8 / len(runs)
        for i, run in enumerate(runs):
            means = []
            for key in phases:
                values = [v for _, v in run.series(key)]
                means.append(sum(values) / len(values) if values else 0.0)
            ax.bar([p + i * width for p in range(len(phases))], means, width, label=f"[{i + 1}] {run.name}",
                   color=COLORS[i % 10])
        ax.set_xticks([p + 0.4 - width / 2 for p in range(len(phases))], [k[5:] for k in phases], rotation=30)
        ax.set_ylabel("mean seconds per step")
        ax.set_title("mean time per phase")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path, True)


def plot_filter_scheduler(runs: list[RunData], path: Path) -> Path | None:
    fig, axes = _figure(runs, 2, "dynamic sampling: filters and scheduler", width=6, nrows=2)
    domains = _domains(runs)
    drawn = False
    panels = [("filter/kept_frac", "share of finished groups kept", "fraction", "fraction"),
              ("scheduler/groups_kept", "groups kept (the quota, unless short)", "groups", "count"),
              ("scheduler/refill_rounds", "refill rounds", "rounds", "count"),
              (None, "groups dropped by the filters", "groups", "count")]
    for ax, (suffix, title, ylabel, kind) in zip(axes, panels):
        if suffix is None:
            series = {d: (lambda r, d=d: r.series_sum(f"{d}/filter/dropped_")) for d in domains}
        else:
            series = {d: _key(f"{d}/{suffix}") for d in domains}
        drawn |= _lines(ax, runs, series, title, ylabel, kind=kind)
    return _save(fig, path, drawn)


def plot_reward_latency(runs: list[RunData], path: Path) -> Path | None:
    fig, axes = _figure(runs, 3, "reward latency per call (s)", width=4.5)
    domains = _domains(runs)
    drawn = False
    for ax, q in zip(axes, ("p50", "p95", "max")):
        drawn |= _lines(ax, runs, {d: _key(f"{d}/reward/latency/{q}") for d in domains}, q, "s", kind="count")
    return _save(fig, path, drawn)


def plot_system(runs: list[RunData], path: Path) -> Path | None:
    workers: list[str] = []
    for run in runs:
        workers += [k.split("/", 1)[1].rsplit("/", 1)[0] for k in run.keys(r"system/.+/rss_gib")
                    if k.split("/", 1)[1].rsplit("/", 1)[0] not in workers and "total" not in k]
    fig, axes = _figure(runs, 3, "system", width=5)
    drawn = _lines(axes[0], runs, {w: _key(f"system/{w}/rss_gib") for w in workers},
                   "resident memory per worker", "GiB", kind="count")
    drawn |= _lines(axes[1], runs, {w: _key(f"system/{w}/cpu_percent") for w in workers},
                    "CPU per worker (100 = one core)", "%", kind="count")
    drawn |= _lines(axes[2], runs, {"generation": _key("system/response_tokens_per_s"),
                                    "training": _key("system/train_tokens_per_s")},
                    "throughput (response tokens)", "tokens/s")
    for ax in axes[:2]:
        if ax.get_legend():
            ax.legend(fontsize=6, ncol=2)
    return _save(fig, path, drawn)


def plot_rollout_corr(runs: list[RunData], path: Path) -> Path | None:
    """The rollout-trainer mismatch (rlvr/algorithms/rollout_correction.py): logged when the samples carry
    behaviour logprobs."""
    fig, axes = _figure(runs, 3, "rollout-trainer mismatch (rollout_corr/*)", width=5)
    key = lambda name: _key(f"rollout_corr/{name}")  # noqa: E731
    drawn = _lines(axes[0], runs, {"kl": key("kl"), "k3_kl": key("k3_kl"), "log_ppl_abs_diff":
                                   key("log_ppl_abs_diff")}, "KL(rollout || train), |log ppl diff|", "nats")
    ppl_ratio_less_1 = lambda r: [(s, v - 1) for s, v in r.series("rollout_corr/ppl_ratio")]  # noqa: E731
    drawn |= _lines(axes[1], runs, {"chi2_token": key("chi2_token"), "chi2_seq": key("chi2_seq"),
                                    "ppl_ratio - 1": ppl_ratio_less_1}, "chi-square, perplexity ratio", "value")
    drawn |= _lines(axes[2], runs, {"ESS": key("rollout_is_eff_sample_size"),
                                    "truncated": key("rollout_is_ratio_fraction_high"),
                                    "rejected": key("rollout_rs_masked_fraction")},
                    "importance weights: ESS, truncated and rejected tokens", "fraction", kind="fraction")
    return _save(fig, path, drawn)


PLOTS: dict[str, tuple[str, Callable[[list[RunData], Path], Path | None]]] = {
    "val_correct": ("Validation accuracy per domain", plot_val_correct),
    "train_reward": ("Training reward per domain", plot_train_reward),
    "response_length": ("Response length", plot_response_length),
    "time_per_phase": ("Time per phase", plot_time_per_phase),
    "filter_scheduler": ("Filter and scheduler counters", plot_filter_scheduler),
    "reward_latency": ("Reward latency percentiles", plot_reward_latency),
    "system": ("System: memory, CPU, throughput", plot_system),
    "rollout_corr": ("Rollout-trainer mismatch", plot_rollout_corr),
}


def write_plots(runs: list[RunData], out_dir: Path) -> dict[str, Path]:
    """Every plot that has data, as `<out_dir>/<name>.png`; returns {name: path}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, (_, plot) in PLOTS.items():
        path = plot(runs, out_dir / f"{name}.png")
        if path is not None:
            written[name] = path
    return written

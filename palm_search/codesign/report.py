"""``report.html`` of a co-design run: the chips' throughput against their cost, the front, the
best chip against the base, and each hardware dimension's sensitivity (plotly, one self-contained
page)."""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from palm_search.codesign.search import CodesignRun, front_ranks
from spaces.hardware import PARAM_PREFIX


def cost_axis(run: CodesignRun) -> tuple[str, str, float]:
    """The cost the front is drawn against: (column, axis title, factor from SI to the axis unit)."""
    if run.spec.objective in ("pareto_power", "throughput_per_power"):
        return "power_W", "full-activity power (W)", 1.0
    return "area_m2", "silicon area (mm^2)", 1e6


def front(frame: pd.DataFrame, cost: str) -> pd.DataFrame:
    """The refined chips on the Pareto front of simulated samples/s (up) against ``cost`` (down),
    cheapest first."""
    refined = frame[(frame["samples_per_s"] > 0) & (frame["label"] != "base")]
    ranks = front_ranks(list(zip(refined["samples_per_s"], refined[cost], strict=True)))
    return refined[[r == 0 for r in ranks]].sort_values(cost)


def sensitivity(run: CodesignRun, frame: pd.DataFrame) -> pd.DataFrame:
    """For each searched dimension and choice: the best estimated and simulated samples/s of the
    chips with that choice ("none fits" / "not simulated" where no chip of it has one)."""
    rows = []
    chips = frame[frame["label"] != "base"]
    for name in (k.removeprefix(PARAM_PREFIX) for k in run.chips[0].screen.params):
        for value, group in chips.groupby(name, sort=False):
            rows.append({"dimension": name, "choice": value, "chips": len(group),
                         "feasible": int(group["feasible"].sum()),
                         "best estimated samples/s": _or(group["estimated_samples_per_s"].max(), "none fits"),
                         "best simulated samples/s": _or(group["samples_per_s"].max(), "not simulated")})
    return pd.DataFrame(rows)


def _or(value: float, missing: str) -> str:
    """``value`` to 4 significant digits, or what its absence means where it is 0 (a throughput
    no chip reached)."""
    return f"{value:.4g}" if value > 0 else missing


def _readable(chips: pd.DataFrame) -> pd.DataFrame:
    """The chips table as a person reads it: area in mm^2, "not simulated" instead of 0 samples/s."""
    table = chips.copy()
    if "area_m2" in table:
        table.insert(table.columns.get_loc("area_m2"), "area_mm2", table.pop("area_m2") * 1e6)
    for column in ("samples_per_s", "estimated_samples_per_s"):
        if column in table:
            table[column] = [_or(v, "not simulated") for v in table[column]]
    return table


def figure(run: CodesignRun, frame: pd.DataFrame) -> go.Figure:
    """Samples/s against cost: infeasible chips at 0, estimates, simulations, the front, the base."""
    cost, title, factor = cost_axis(run)
    fig = go.Figure()
    groups = (("over budget or no mapping", ~frame["feasible"], "estimated_samples_per_s", "x", "lightgrey"),
              ("estimated (closed form)", frame["feasible"], "estimated_samples_per_s", "circle-open", "steelblue"),
              ("simulated (event-driven)", frame["samples_per_s"] > 0, "samples_per_s", "circle", "navy"))
    for name, mask, column, symbol, color in groups:
        part = frame[mask & (frame["label"] != "base")]
        fig.add_trace(go.Scatter(x=part[cost] * factor, y=part[column], mode="markers", name=name,
                                 text=part["label"] + "<br>" + part["reason"],
                                 marker={"symbol": symbol, "color": color, "size": 8}))
    line = front(frame, cost)
    fig.add_trace(go.Scatter(x=line[cost] * factor, y=line["samples_per_s"], mode="lines", name="front",
                             line={"color": "crimson", "dash": "dot"}))
    base = frame[frame["label"] == "base"]
    fig.add_trace(go.Scatter(x=base[cost] * factor, y=base["samples_per_s"], mode="markers", name="base chip",
                             marker={"symbol": "star", "size": 14, "color": "orange"}))
    budget = run.power_budget_W if cost == "power_W" else run.area_budget_m2 * factor
    fig.add_vline(x=budget, line_dash="dash", line_color="grey", annotation_text="budget")
    fig.update_layout(xaxis_title=title, yaxis_title=f"mean samples/s over {', '.join(run.spec.models)}",
                      template="plotly_white", height=520)
    return fig


def _rho(value: float | None) -> str:
    return "n/a (fewer than 3 chips)" if value is None else f"{value:.2f}"


def write_report(run: CodesignRun, frame: pd.DataFrame, summary: dict, path: Path) -> None:
    """Write the page to ``path``."""
    best, base = summary["best"], summary["base"]
    lines = [f"<h1>Co-design: {html.escape(', '.join(run.spec.models))} on chips around "
             f"{html.escape(run.spec.hardware)}</h1>",
             f"<p>{summary['chips']} chips screened ({summary['feasible_chips']} within the budgets of "
             f"{run.area_budget_m2 * 1e6:,.0f} mm<sup>2</sup> and {run.power_budget_W:,.0f} W), "
             f"{summary['estimated_mappings']:,} mappings estimated, {summary['simulations']} simulated; "
             f"screen {summary['screen_s']:.1f} s, refine {summary['refine_s']:.1f} s; rank agreement of"
             f" estimate and simulation over the refined chips (Spearman): {_rho(summary['rank_agreement'])}.</p>"]
    for title, chip in (("Best chip", best), ("Base chip", base)):
        if chip is None:
            continue
        per_model = "".join(f"<li>{html.escape(n)}: {m['samples_per_s']:.4g} samples/s, {html.escape(m['mapping'])}"
                            "</li>" for n, m in chip["per_model"].items())
        lines.append(f"<h2>{title}: {html.escape(chip['label'])}</h2><p>{chip['samples_per_s']:.4g} samples/s"
                     f" (mean), {chip['area_m2'] * 1e6:,.0f} mm<sup>2</sup>, {chip['power_W']:,.0f} W</p>"
                     f"<ul>{per_model}</ul>")
    if best and best.get("speedup_over_base"):
        lines.append(f"<p><b>{best['speedup_over_base']:.3f}x</b> the base chip's mean throughput.</p>")
    lines.append(figure(run, frame).to_html(full_html=False, include_plotlyjs=True))
    lines.append("<h2>Sensitivity</h2>" + sensitivity(run, frame).to_html(index=False, float_format="%.4g"))
    shown = frame[frame["refined"]].sort_values("samples_per_s", ascending=False)
    lines.append("<h2>Refined chips</h2>" + _readable(shown).to_html(index=False, float_format="%.4g"))
    path.write_text("<!doctype html><meta charset='utf-8'><title>palm-search codesign</title>"
                    "<body style='font-family:sans-serif;max-width:1200px;margin:auto'>"
                    + "\n".join(lines) + "</body>")

"""``palm-search report RUN_DIR``: one self-contained HTML page on a search and why its best
mapping wins; and the ``--trace`` / ``--plots`` files of ``palm-search simulate``.

The page holds the study summary, the top mappings, the optimisation history, parallel
coordinates of the searched dimensions, the answer explained (:mod:`.explain`) with each
dimension's effect on the best throughput, the Pareto front (two objectives), and the best
mapping's timeline, placement and heat map beside the baseline's (timelines on one time axis).
Plotly's JavaScript and the pictures (base64 PNG) are embedded: it opens offline.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable
from pathlib import Path

import optuna
import pandas as pd

from palm_search.views.artifacts import mapping_dir
from palm_search.views.explain import LABELS, effect_sizes, explain, fields_of, ranked, sentences
from palm_search.views.outputs import baseline_row, top_mappings, trials_frame
from palm_search.views.plots import (
    PICTURES,
    render_mapping,
    render_timeline,
    shared_timelines,
    timeline_window_s,
    write_plots,
)
from simulator import InputError, Strategy, is_inference, load_hardware, load_model
from simulator.trace import Timeline, write_chrome_trace

STYLE = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1380px;color:#222}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f3f3f3}h2{margin-top:1.6em;border-bottom:1px solid #ddd}.pair{display:flex;gap:12px}
.pair figure{flex:1;margin:0}.pair img{width:100%;border:1px solid #ddd}figcaption{font-weight:bold}
.note{color:#666;font-size:13px}"""


def write_visuals(timeline: Timeline, trace_path: Path | None, plots_dir: Path | None) -> list[Path]:
    """Write the Chrome trace and/or the pictures of a simulated ``timeline``.

    Raises:
        InputError: the strategy exceeds memory (nothing to draw).
    """
    if not timeline.result.feasible:
        raise InputError(f"strategy is infeasible, nothing to draw: {timeline.result.reason}")
    if trace_path:
        trace_path.parent.mkdir(parents=True, exist_ok=True)  # e.g. runs/t.json on a fresh clone
    written = [write_chrome_trace(timeline, trace_path)] if trace_path else []
    return written + (write_plots(timeline, plots_dir) if plots_dir else [])


def load_run(run_dir: Path) -> optuna.Study:
    """The study of a run directory.

    Raises:
        InputError: no study journal in ``run_dir``.
    """
    from palm_search.search.driver import storage_for
    from palm_search.search.storage import JOURNAL

    if not (run_dir / JOURNAL).is_file():
        raise InputError(f"report: {run_dir / JOURNAL} does not exist (run palm-search optimize first)")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=None, storage=storage_for(run_dir, None))


def write_report(run_dir: Path, on_progress: Callable[[str], None] = lambda text: None) -> Path:
    """Write ``RUN_DIR/report.html`` and return its path.

    Raises:
        InputError: no study in ``run_dir``, or a study without the palm-search spec.
    """
    study = load_run(run_dir)
    spec = study.user_attrs.get("spec")
    if not spec:
        raise InputError(f"report: the study in {run_dir} was not made by palm-search optimize")
    frame = trials_frame(study)
    sections = [_summary(study, spec, frame), _explanation(study, spec, frame), _top(frame)]
    sections += _plot_sections(study, spec, on_progress)
    sections.append(_comparison(study, spec, frame, run_dir, on_progress))
    name = html.escape(study.study_name)
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>palm-search report: {name}</title>"
            f"<style>{STYLE}</style></head><body><h1>palm-search report: {name}</h1>"
            + "".join(sections) + "</body></html>")
    path = run_dir / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


def _section(anchor: str, title: str, body: str) -> str:
    return f"<section id='{anchor}'><h2>{html.escape(title)}</h2>{body}</section>"


def _summary(study: optuna.Study, spec: dict, frame: pd.DataFrame) -> str:
    base = baseline_row(frame) or {}
    feasible = frame[frame.get("feasible", pd.Series(dtype=bool)) == True] if len(frame) else frame  # noqa: E712
    best = feasible["samples_per_s"].max() if len(feasible) else float("nan")
    rows = {"model": spec["model"], "hardware": spec["hardware"], "network": spec["network"],
            "objectives": ", ".join(spec["objectives"]), "searched": ", ".join(spec["searched"]),
            "sampler": study.user_attrs.get("sampler"), "finished trials": len(frame),
            "feasible": len(feasible), "failed": int((frame["state"] == "FAIL").sum()) if len(frame) else 0,
            "baseline": f"{study.user_attrs.get('baseline_note', '')}: {base.get('samples_per_s', 0):.4g} samples/s",
            "best samples/s": f"{best:.4g}",
            "speedup over baseline": f"{best / base['samples_per_s']:.3g}x" if base.get("samples_per_s") else "-"}
    body = "".join(f"<tr><th>{html.escape(k)}</th><td style='text-align:left'>{html.escape(str(v))}</td></tr>"
                   for k, v in rows.items())
    return _section("summary", "Study summary", f"<table>{body}</table>")


def _explanation(study: optuna.Study, spec: dict, frame: pd.DataFrame) -> str:
    """The answer explained (:func:`.explain.explain`), one paragraph a sentence."""
    top = top_mappings(frame, 10)
    if not len(top):
        return ""
    best = study.trials[int(top.iloc[0]["trial"])].user_attrs
    unit = "tokens/s" if is_inference(spec.get("mode")) else "samples/s"
    lines = sentences(explain(frame, top, best), unit)
    body = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    return _section("explanation", "Why this answer", f"<ul>{body}</ul><p class='note'>Ties in {unit} go to the"
                    " lower trial number everywhere (this page, the terminal, best.json and optuna-dashboard's"
                    " best trial).</p>")


def _top(frame: pd.DataFrame) -> str:
    top = top_mappings(frame, 10)
    if not len(top):
        return _section("top-mappings", "Top mappings", "<p>No feasible mapping.</p>")
    shown, fixed = varying_columns(top)
    note = ("<p class='note'>The same in every row: " + html.escape(", ".join(f"{k} {v}" for k, v in fixed.items()))
            + "</p>") if fixed else ""
    table = shown.to_html(index=False, float_format=lambda x: f"{x:.4g}", border=0, classes="top")
    return _section("top-mappings", "Top mappings", note + table)


def varying_columns(table: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """``table`` without its constant columns (but ``trial``), and those columns' one value."""
    fixed = {c: _plain(table[c].iloc[0]) for c in table.columns
             if c != "trial" and len(table) > 1 and table[c].map(_plain).nunique() == 1}
    return table.drop(columns=list(fixed)), fixed


def _plain(value) -> str:
    """A cell as text: a missing value (None, NaN) as ``-``."""
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _plot_sections(study: optuna.Study, spec: dict, on_progress) -> list[str]:
    """History, parallel coordinates, importance and Pareto front as embedded plotly figures."""
    from optuna import visualization as vis

    on_progress("report: study plots")
    serving = is_inference(spec.get("mode"))
    unit = "system tokens/s" if serving else "samples/s"
    target = {"target": lambda t: t.values[0], "target_name": unit}
    figures = [("history", "Optimisation history", lambda: vis.plot_optimization_history(study, **target)),
               ("parallel-coordinates", "Parallel coordinates of the searched dimensions (the baseline included)",
                lambda: _parallel_coordinates(trials_frame(study), "tokens_per_s" if serving else "samples_per_s",
                                              unit)),
               ("importance", f"What matters: each dimension's effect on the best {unit}",
                lambda: _effects(trials_frame(study), unit))]
    if serving and len(spec["objectives"]) == 2:
        names = study.metric_names or spec["objectives"]
        figures.append(("pareto", f"Pareto front: {names[0]} against {names[1]} (infeasible trials apart)",
                        lambda: vis.plot_pareto_front(study, target_names=names)))
    elif len(spec["objectives"]) == 2:
        figures.append(("pareto", "Pareto front: samples/s against peak memory per device (GiB)",
                        lambda: vis.plot_pareto_front(study, target_names=["samples/s", "peak memory GiB"])))
    sections, first = [], True
    for anchor, title, make in figures:
        body, used_js = _figure_html(make, include_js=first)
        first = first and not used_js
        sections.append(_section(anchor, title, body))
    return sections


def _parallel_coordinates(frame: pd.DataFrame, value: str, unit: str):
    """Parallel coordinates of the feasible trials, the baseline included, by the strategy's
    readable fields that vary among them (not the sampler's encoded parameters), coloured by
    ``value``."""
    import plotly.graph_objects as go

    trials = ranked(frame, value)
    names = [n for n in fields_of(trials) if trials[n].map(_plain).nunique() > 1]
    if len(trials) < 2 or not names:
        raise ValueError("fewer than two feasible trials or no varying dimension")
    dimensions = []
    for name in names:
        text = trials[name].map(_plain)
        levels = sorted(text.unique(), key=lambda v: (not v.lstrip("-").isdigit(), int(v) if v.lstrip("-").isdigit()
                                                      else 0, v))
        dimensions.append({"label": LABELS.get(name, name), "values": text.map(levels.index).tolist(),
                           "tickvals": list(range(len(levels))), "ticktext": levels})
    dimensions.append({"label": unit, "values": trials[value].tolist()})
    figure = go.Figure(go.Parcoords(line={"color": trials[value].tolist(), "colorscale": "Viridis",
                                          "showscale": True}, dimensions=dimensions))
    figure.update_layout(height=480, margin={"l": 60, "r": 60})
    return figure


def _effects(frame: pd.DataFrame, unit: str):
    """Bars of :func:`.explain.effect_sizes`: per dimension, how far apart (%) the best throughput
    of its values is, over the feasible searched trials (named in the axis title). Optuna's
    fANOVA importance is not drawn: it apportions the variance among the (screened, near-tied)
    trials and ranked a dimension that moves throughput by 0.05% first."""
    import plotly.graph_objects as go

    effects = effect_sizes(frame)
    if not effects:
        raise ValueError("no dimension takes two values among the feasible searched trials")
    trials = len(ranked(frame)) - int((ranked(frame).get("baseline") == True).sum())  # noqa: E712
    effects = effects[::-1]
    figure = go.Figure(go.Bar(x=[100 * e["spread"] for e in effects], y=[LABELS.get(e["field"], e["field"])
                                                                         for e in effects], orientation="h",
                              text=[f"{100 * e['spread']:.2f}%" for e in effects], textposition="outside",
                              hovertext=[", ".join(f"{k}: {v:.4g}" for k, v in e["best"].items()) for e in effects]))
    figure.update_layout(xaxis_title=(f"spread of the best {unit} over the dimension's values (%), 1 - lowest /"
                                      f" highest, over the {trials} feasible searched trials (baseline excluded)"),
                         height=200 + 28 * len(effects))
    return figure


def _figure_html(make, include_js: bool) -> tuple[str, bool]:
    """(HTML of the figure or a note why there is none, whether plotly's JS was embedded)."""
    try:
        figure = make()
    except Exception as error:  # noqa: BLE001 - too few trials, one-point spaces...: say so, go on
        return f"<p class='note'>not available: {html.escape(str(error) or type(error).__name__)}</p>", False
    return figure.to_html(full_html=False, include_plotlyjs=True if include_js else False), include_js


def _comparison(study: optuna.Study, spec: dict, frame: pd.DataFrame, run_dir: Path, on_progress) -> str:
    """The best mapping's pictures beside the baseline's (rendered now if missing)."""
    top, base = top_mappings(frame, 1), baseline_row(frame)
    if not len(top):
        return _section("best-vs-baseline", "Best mapping and baseline", "<p>No feasible mapping.</p>")
    columns = [("best", int(top.iloc[0]["trial"]))]
    if base is not None and base.get("feasible"):
        columns.append(("baseline", int(base["trial"])))
    folders = {label: _pictures(study, spec, number, run_dir, on_progress) for label, number in columns}
    files = {(label, p): folders[label] / f"{p}.png" for label, _ in columns for p in PICTURES}
    files.update(_common_timelines(study, spec, columns, folders, on_progress))
    body = ""
    for picture in PICTURES:
        figures = "".join(
            f"<figure><figcaption>{label} (trial {number})</figcaption>{_img(files[label, picture])}"
            "</figure>" for label, number in columns)
        body += f"<h3>{picture}</h3><div class='pair'>{figures}</div>"
    note = ("<p class='note'>Timeline: the simulated window of microbatches (fill, steady state, drain, gradient"
            " update) on one time axis for both mappings; grey is idle (bubble). Heat map: utilisation over the"
            " whole iteration.</p>")
    return _section("best-vs-baseline", "Best mapping and baseline: timeline, placement, heat map", note + body)


def _common_timelines(study: optuna.Study, spec: dict, columns: list[tuple[str, int]], folders: dict[str, Path],
                      on_progress) -> dict[tuple[str, str], Path]:
    """The timelines of the mappings whose window is shorter than the longest, redrawn on the
    longest's time axis (:func:`~palm_search.views.plots.shared_timelines`)."""
    numbers = dict(columns)

    def draw(label: str, path: Path, window_s: float) -> None:
        on_progress(f"report: drawing trial {numbers[label]}'s timeline on the shared time axis")
        strategy = Strategy.from_dict(study.trials[numbers[label]].user_attrs["strategy"])
        render_timeline(load_model(spec["model"]), load_hardware(spec["hardware"]), strategy, spec["network"],
                        path, window_s)

    redrawn = shared_timelines({label: folders[label] for label, _ in columns}, draw)
    return {(label, "timeline"): path for label, path in redrawn.items()}


def _pictures(study: optuna.Study, spec: dict, number: int, run_dir: Path, on_progress) -> Path:
    folder = mapping_dir(run_dir, number)
    if not all((folder / f"{p}.png").is_file() for p in PICTURES) or timeline_window_s(folder) is None:
        on_progress(f"report: simulating trial {number} for its pictures")
        strategy = Strategy.from_dict(study.trials[number].user_attrs["strategy"])
        render_mapping(load_model(spec["model"]), load_hardware(spec["hardware"]), strategy, spec["network"], folder)
    return folder


def _img(path: Path) -> str:
    if not path.is_file():
        return "<p class='note'>no picture (infeasible)</p>"
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f"<img alt='{path.stem}' src='data:image/png;base64,{data}'>"

"""``palm-search report RUN_DIR``: one self-contained HTML page on a search and why its best
mapping wins; and the ``--trace`` / ``--plots`` files of ``palm-search simulate``.

The page holds the study summary, the top mappings, the optimisation history, parallel
coordinates of the searched dimensions, parameter importance (when Optuna can compute it), the
Pareto front (two objectives), and the best mapping's timeline, placement and heat map beside the
baseline's. Plotly's JavaScript and the pictures (base64 PNG) are embedded: it opens offline.
"""

from __future__ import annotations

import base64
import html
import warnings
from collections.abc import Callable
from pathlib import Path

import optuna
import pandas as pd

from palm_search.views.artifacts import mapping_dir
from palm_search.views.outputs import baseline_row, top_mappings, trials_frame
from palm_search.views.plots import PICTURES, render_mapping, write_plots
from simulator import InputError, Strategy, load_hardware, load_model
from simulator.trace import Timeline, write_chrome_trace

STYLE = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1500px;color:#222}
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
    sections = [_summary(study, spec, frame), _top(frame)]
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


def _top(frame: pd.DataFrame) -> str:
    top = top_mappings(frame, 10)
    if not len(top):
        return _section("top-mappings", "Top mappings", "<p>No feasible mapping.</p>")
    table = top.to_html(index=False, float_format=lambda x: f"{x:.4g}", border=0)
    return _section("top-mappings", "Top mappings", table)


def _plot_sections(study: optuna.Study, spec: dict, on_progress) -> list[str]:
    """History, parallel coordinates, importance and Pareto front as embedded plotly figures."""
    from optuna import visualization as vis

    on_progress("report: study plots")
    searched = _searched(study)
    serving = spec.get("mode") == "inference"
    unit = "system tokens/s" if serving else "samples/s"
    target = {"target": lambda t: t.values[0], "target_name": unit}
    figures = [("history", "Optimisation history", lambda: vis.plot_optimization_history(study, **target)),
               ("parallel-coordinates", "Parallel coordinates of the searched dimensions",
                lambda: vis.plot_parallel_coordinate(searched, **target)),
               ("importance", f"Parameter importance ({unit})", lambda: _importance(searched))]
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


def _searched(study: optuna.Study) -> optuna.Study:
    """An in-memory copy of the study's completed searched trials (the baseline has no parameters)."""
    copy = optuna.create_study(directions=study.directions)
    copy.add_trials([t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
                     if t.params])
    return copy


def _importance(study: optuna.Study):
    import plotly.graph_objects as go

    with warnings.catch_warnings():  # PED-ANOVA ranks for low targets: samples/s is negated
        warnings.simplefilter("ignore", UserWarning)
        importances = optuna.importance.get_param_importances(study, target=lambda t: -t.values[0])
    names = list(importances)[::-1]
    figure = go.Figure(go.Bar(x=[importances[n] for n in names], y=names, orientation="h"))
    figure.update_layout(xaxis_title="importance for high samples/s (Optuna default evaluator, normalised)",
                         height=200 + 24 * len(names))
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
    body = ""
    for picture in PICTURES:
        figures = "".join(
            f"<figure><figcaption>{label} (trial {number})</figcaption>{_img(folders[label] / f'{picture}.png')}"
            "</figure>" for label, number in columns)
        body += f"<h3>{picture}</h3><div class='pair'>{figures}</div>"
    note = ("<p class='note'>Timeline: the simulated window of microbatches (fill, steady state, drain, gradient"
            " update); grey is idle (bubble). Heat map: utilisation over the whole iteration.</p>")
    return _section("best-vs-baseline", "Best mapping and baseline: timeline, placement, heat map", note + body)


def _pictures(study: optuna.Study, spec: dict, number: int, run_dir: Path, on_progress) -> Path:
    folder = mapping_dir(run_dir, number)
    if not all((folder / f"{p}.png").is_file() for p in PICTURES):
        on_progress(f"report: simulating trial {number} for its pictures")
        strategy = Strategy.from_dict(study.trials[number].user_attrs["strategy"])
        render_mapping(load_model(spec["model"]), load_hardware(spec["hardware"]), strategy, spec["network"], folder)
    return folder


def _img(path: Path) -> str:
    if not path.is_file():
        return "<p class='note'>no picture (infeasible)</p>"
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f"<img alt='{path.stem}' src='data:image/png;base64,{data}'>"

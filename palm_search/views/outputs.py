"""What a search leaves behind and shows: the top mappings, best.json, trials.csv, a summary."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
from optuna.trial import TrialState

from palm_search.search.driver import Search, candidate_of
from palm_search.search.evaluate import TABLE_KEYS
from palm_search.search.screen import ESTIMATE_KEY, rank_agreement
from palm_search.search.storage import ARTIFACTS
from palm_search.views.explain import explain, ranked
from simulator import SCHEMA_VERSION, hardware_tables, strategy_fields

COLUMNS = ("trial", *strategy_fields(column=True), "samples_per_s", "model_flops_utilisation", "peak_memory_GiB",
           "bubble_fraction", "speedup", "feasible", "cached", "baseline")
"""The trials table's columns: the strategy fields a search varies (``column`` in
:func:`simulator.strategy_fields`), then the metrics."""
SERVING_COLUMNS = (*COLUMNS[:COLUMNS.index("samples_per_s") + 1], "users", "tokens_per_s", "tokens_per_s_per_user",
                   "ttft_s", "time_per_output_token_s", "peak_memory_GiB", "speedup", "feasible", "cached", "baseline")
"""The same for a serving study (decode samples/s are system tokens/s)."""


def trials_frame(study: optuna.Study) -> pd.DataFrame:
    """One row per finished trial: strategy fields, metrics, speedup over the baseline."""
    rows = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)):
        attrs = trial.user_attrs
        row = {"trial": trial.number, "state": trial.state.name, **attrs.get("strategy", {})}
        row.update({k: v for k, v in attrs.items() if k != "strategy" and k not in TABLE_KEYS})
        row["peak_memory_GiB"] = (attrs.get("peak_memory_bytes") or 0.0) / 2**30
        rows.append(row)
    frame = pd.DataFrame(rows)
    if frame.empty or "samples_per_s" not in frame:  # no trial, or every one failed
        return frame
    base = frame.loc[frame.get("baseline", False) == True, "samples_per_s"]  # noqa: E712
    base_value = float(base.iloc[0]) if len(base) and base.iloc[0] else float("nan")
    frame["speedup"] = frame["samples_per_s"] / base_value
    return frame


def top_mappings(frame: pd.DataFrame, k: int, columns: tuple[str, ...] = COLUMNS) -> pd.DataFrame:
    """The ``k`` fastest feasible, distinct mappings, as ``columns`` (none when no trial
    completed); ties in samples/s go to the lower trial number (:func:`.explain.ranked`), as
    optuna-dashboard's best trial does."""
    if frame.empty or "feasible" not in frame:
        return frame.iloc[0:0]
    ordered = ranked(frame)  # throughput descending, then trial number: the tie-break of every view
    strategy_cols = [c for c in COLUMNS[1:COLUMNS.index("samples_per_s")] if c in ordered]
    distinct = ordered.drop_duplicates(strategy_cols)
    return distinct.head(k)[[c for c in columns if c in distinct]]


def family_bests(frame: pd.DataFrame) -> dict[str, dict]:
    """The fastest feasible trial of each way people train a model on a GPU cluster, among the
    run's trials: ``data parallel`` (TP 1 and PP 1: DDP, ZeRO, FSDP's sharding, with or without
    context parallelism) and ``3D parallel`` (TP or PP > 1); a way the run has no feasible trial
    of is left out. Each: trial number and samples/s."""
    if frame.empty or "feasible" not in frame:
        return {}
    feasible = frame[(frame["state"] == "COMPLETE") & (frame["feasible"] == True)]  # noqa: E712
    model_parallel = (feasible["tp"] > 1) | (feasible["pp"] > 1)
    members = {"data parallel": feasible[~model_parallel], "3D parallel": feasible[model_parallel]}
    return {name: {"trial": int(rows.loc[rows["samples_per_s"].idxmax(), "trial"]),
                   "samples_per_s": float(rows["samples_per_s"].max())}
            for name, rows in members.items() if len(rows)}


def baseline_row(frame: pd.DataFrame) -> dict | None:
    """The baseline trial's row, if any."""
    if frame.empty or "baseline" not in frame:
        return None
    rows = frame[frame["baseline"] == True]  # noqa: E712
    return plain(rows.iloc[0].to_dict()) if len(rows) else None


def plain(value: Any) -> Any:
    """``value`` with every NaN or infinite float (pandas' missing value) as None, so that it
    is strict JSON (RFC 8259 has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def strict_json(document: Any, indent: int | None = None) -> str:
    """``document`` as strict JSON (:func:`plain`; other objects as their ``str``)."""
    return json.dumps(plain(document), indent=indent, default=str, allow_nan=False)


def write_outputs(search: Search, run_dir: Path) -> dict:
    """Write ``best.json`` and ``trials.csv`` into ``run_dir``; return the summary document."""
    frame = trials_frame(search.study)
    run_dir.mkdir(parents=True, exist_ok=True)
    frame.to_csv(run_dir / "trials.csv", index=False)
    top = top_mappings(frame, search.spec.top, SERVING_COLUMNS if search.spec.serving else COLUMNS)
    summary = _summary(search, frame, top, run_dir)
    if summary["best"] is not None:
        candidate = candidate_of(search, search.study.get_trials(deepcopy=False)[summary["best"]["trial"]])
        best = {"schema_version": SCHEMA_VERSION, "model": search.spec.model, "hardware": candidate.hardware.name,
                "network": search.spec.network,
                "strategy": summary["best"]["strategy"], "machine": hardware_tables(candidate.hardware),
                "result": summary["best"]}
        (run_dir / "best.json").write_text(strict_json(best, indent=2))
    return summary


def dashboard_command(run_dir: Path, storage: str | None) -> str:
    """The shell command that opens the study in optuna-dashboard with the mappings' pictures:
    ``palm-search dashboard RUN_DIR`` for a journal, ``optuna-dashboard URL --artifact-dir`` for
    an RDB study, each program named as it runs from here (:func:`installed`)."""
    if storage:
        return f"{installed('optuna-dashboard')} {storage} --artifact-dir {run_dir / ARTIFACTS}"
    return f"{installed('palm-search')} dashboard {run_dir}"


def installed(program: str) -> str:
    """``program`` as a shell runs it from the working directory: the script installed beside
    this Python (a virtual environment's ``bin/``, e.g. ``.venv/bin/palm-search`` after ``make
    demo``), relative to the working directory when under it; the bare name (from ``PATH``)
    when there is none."""
    script = Path(sys.executable).parent / program
    if not script.exists():
        return program
    if not script.is_relative_to(Path.cwd()):
        return str(script)
    relative = os.path.relpath(script)
    return relative if os.sep in relative else os.path.join(".", relative)


def _summary(search: Search, frame: pd.DataFrame, top: pd.DataFrame, run_dir: Path) -> dict:
    best = None
    if len(top):
        number = int(top.iloc[0]["trial"])
        trial = copy.deepcopy(search.study.get_trials(deepcopy=False)[number])  # one trial, not all copied
        best = {"trial": number, "strategy": trial.user_attrs["strategy"],
                **{k: v for k, v in trial.user_attrs.items() if k != "strategy"}}
    failed = int((frame["state"] == "FAIL").sum()) if len(frame) else 0
    return {
        "schema_version": SCHEMA_VERSION, "study": search.spec.name, "model": search.spec.model,
        "hardware": search.spec.hardware,
        "mode": search.spec.mode, "objectives": list(search.spec.objectives),
        "sampler": search.study.user_attrs.get("sampler"),
        "memory_prescreen": search.study.user_attrs.get("memory_prescreen"),
        "screen": _screen(search.study),
        "trials": len(frame), "failed": failed,
        "feasible": int((frame["feasible"] == True).sum()) if "feasible" in frame else 0,  # noqa: E712
        "baseline": baseline_row(frame), "best": best,
        "families": {} if search.spec.serving else family_bests(frame),
        "explanation": explain(frame, top, best or {}, "samples_per_s"),
        "top": json.loads(top.to_json(orient="records")) if len(top) else [],
        "pareto_front": (_pareto(search) if len(search.spec.objectives) > 1 else []) if not search.spec.serving
        else serving_front(search.study, search.spec.objectives),
        "run_dir": str(run_dir), "dashboard": dashboard_command(run_dir, None),
    }


def _screen(study: optuna.Study) -> dict | None:
    """The screen's figures and the rank agreement of its estimates with the simulations."""
    screened = study.user_attrs.get("screen")
    if not screened:
        return None
    trials = study.get_trials(deepcopy=False)
    simulated = sum(t.state == TrialState.COMPLETE and ESTIMATE_KEY in t.user_attrs for t in trials)
    screened = {**screened, "queued_simulated": simulated}
    agreement = rank_agreement(trials)
    if agreement is None:
        return {**screened, "spearman": None, "compared": 0}
    return {**screened, **dataclasses.asdict(agreement)}


def _pareto(search: Search) -> list[dict]:
    front = [t for t in search.study.best_trials if t.user_attrs.get("feasible")]
    return [{"trial": t.number, "samples_per_s": t.values[0], "peak_memory_GiB": t.values[1],
             "strategy": t.user_attrs.get("strategy")} for t in sorted(front, key=lambda t: -t.values[0])]


def serving_front(study: optuna.Study, objectives: tuple[str, ...]) -> list[dict]:
    """A serving study's Pareto front of system tokens/s against tokens/s per user among its
    feasible trials (each: trial, users, the two rates, time to first token, degrees,
    microbatch, placement, groups), highest tokens/s per user first; empty for one objective
    other than the two."""
    if "tokens_per_s_per_user" not in objectives:
        return []
    rows = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.user_attrs.get("feasible") and t.user_attrs.get("tokens_per_s")]
    front, seen = [], set()
    for t in sorted(rows, key=lambda t: t.number):  # one trial per point (group layouts often tie)
        point = (t.user_attrs["tokens_per_s"], t.user_attrs["tokens_per_s_per_user"])
        if point not in seen and not any(_dominates(o, t) for o in rows):
            front.append(t)
            seen.add(point)
    keys = ("tp", "pp", "dp", "microbatch_size", "placement", "group_layout", "group_order")
    return [{"trial": t.number, "users": t.user_attrs.get("users"), "tokens_per_s": t.user_attrs["tokens_per_s"],
             "tokens_per_s_per_user": t.user_attrs["tokens_per_s_per_user"], "ttft_s": t.user_attrs.get("ttft_s"),
             **{k: t.user_attrs["strategy"].get(k) for k in keys}}
            for t in sorted(front, key=lambda t: (-t.user_attrs["tokens_per_s_per_user"], -t.user_attrs["tokens_per_s"],
                                                  t.number))]


def _dominates(a: optuna.trial.FrozenTrial, b: optuna.trial.FrozenTrial) -> bool:
    """Whether ``a`` is at least as good as ``b`` in system tokens/s and tokens/s per user, and
    better in one."""
    pa = (a.user_attrs["tokens_per_s"], a.user_attrs["tokens_per_s_per_user"])
    pb = (b.user_attrs["tokens_per_s"], b.user_attrs["tokens_per_s_per_user"])
    return all(x >= y for x, y in zip(pa, pb, strict=True)) and pa != pb

"""What a co-design run leaves in its run directory.

* ``trials.csv``: one row per chip of the space (and the base chip): its parameters, area (m^2),
  power (W), feasibility and reason, estimated and simulated samples/s per model and their mean.
* ``study.journal``: the same chips as an Optuna study (refined chips COMPLETE with the
  objective's values, the others PRUNED with their reason), for ``palm-search dashboard RUN_DIR``.
* ``best-hardware.toml``: the best chip as a hardware file (``palm-search simulate --hw``).
* ``best.json``: the best chip, its score and each model's best mapping; ``best-<model>.json``:
  that mapping in ``optimize``'s format (``palm-search simulate --strategy``).
* ``report.html``: throughput against area (or power) with the front, and each dimension's
  sensitivity.

The directory is written whole in a sibling and then swapped in, so a failure leaves the previous
run as it was.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import optuna
import pandas as pd
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from palm_search.codesign.evaluate import chip_space, objective_values, simulated_samples_per_s
from palm_search.codesign.report import write_report
from palm_search.codesign.search import Chip, CodesignRun
from palm_search.search.screen import spearman
from palm_search.search.storage import journal_storage
from palm_search.views.outputs import strict_json
from simulator import SCHEMA_VERSION, hardware_tables, hardware_to_toml
from spaces.hardware import PARAM_PREFIX, build_hardware, hardware_label


def chips_frame(run: CodesignRun) -> pd.DataFrame:
    """One row per chip, the base chip last (module docstring)."""
    rows = []
    for number, chip in enumerate([*run.chips, run.base]):
        screen = chip.screen
        row: dict = {"chip": number, "label": hardware_label(screen.params) or "base",
                     **{k.removeprefix(PARAM_PREFIX): v for k, v in screen.params.items()},
                     "area_m2": screen.area_m2, "power_W": screen.power_W, "feasible": not screen.reason,
                     "reason": screen.reason, "estimated_samples_per_s": screen.samples_per_s,
                     "refined": chip.refined, "samples_per_s": chip.samples_per_s,
                     "simulations": chip.simulations}
        for name in run.spec.models:
            record = chip.simulated.get(name, {})
            row[f"estimated_samples_per_s[{name}]"] = screen.estimates.get(name, 0.0)
            row[f"samples_per_s[{name}]"] = simulated_samples_per_s(record)
            row[f"mapping[{name}]"] = _mapping(record.get("strategy"))
        rows.append(row)
    return pd.DataFrame(rows)


def _mapping(strategy: dict | None) -> str:
    """A strategy in a few words: ``TP8 PP20 DP2 mb1 1f1b full SP ZeRO1``."""
    if not strategy:
        return ""
    s = {"tp": 1, "pp": 1, "dp": 1, "microbatch_size": 1, "schedule": "1f1b", "recompute": "none",
         "sequence_parallel": False, "zero_stage": 0, **strategy}
    return (f"TP{s['tp']} PP{s['pp']} DP{s['dp']} mb{s['microbatch_size']} {s['schedule']} {s['recompute']}"
            f"{' SP' if s['sequence_parallel'] else ''} ZeRO{s['zero_stage']}")


def write_codesign(run: CodesignRun, run_dir: Path) -> dict:
    """Write the run directory (module docstring); return the summary document.

    Raises:
        InputError: the run directory's journal cannot be written.
    """
    staging = run_dir.with_name(run_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    frame = chips_frame(run)
    frame.to_csv(staging / "trials.csv", index=False)
    _write_study(run, staging)
    best = run.best()
    summary = summary_of(run, frame, best)
    if best is not None:
        _write_best(run, best, staging, summary)
    write_report(run, frame, summary, staging / "report.html")
    if run_dir.exists():
        shutil.rmtree(run_dir)
    staging.rename(run_dir)
    return summary


def summary_of(run: CodesignRun, frame: pd.DataFrame, best: Chip | None) -> dict:
    """The run in a JSON-ready document (``--json``, ``best.json``)."""
    spec = run.spec
    base = run.base.samples_per_s
    summary: dict = {
        "study": spec.name, "models": list(spec.models), "base_hardware": spec.hardware,
        "objective": spec.objective, "technology": spec.technology,
        "area_budget_m2": run.area_budget_m2, "power_budget_W": run.power_budget_W,
        "chips": len(run.chips), "feasible_chips": int(frame["feasible"][:-1].sum()),
        "refined_chips": sum(c.refined for c in run.chips), "estimated_mappings": run.estimated_mappings,
        "simulations": run.simulations, "screen_s": run.screen_s, "refine_s": run.refine_s,
        "rank_agreement": _agreement(frame),
        "base": _chip_document(run, run.base), "best": None,
    }
    if best is not None:
        speedup = best.samples_per_s / base if base else None
        summary["best"] = {**_chip_document(run, best), "speedup_over_base": speedup}
    return summary


def _agreement(frame: pd.DataFrame) -> float | None:
    """Spearman's rank correlation between the refined chips' estimated and simulated mean
    samples/s (None with fewer than 3): how far the screen's order held."""
    refined = frame[frame["samples_per_s"] > 0]
    if len(refined) < 3:
        return None
    rho = spearman(refined["estimated_samples_per_s"], refined["samples_per_s"])
    return None if math.isnan(rho) else rho


def _chip_document(run: CodesignRun, chip: Chip) -> dict:
    return {"label": hardware_label(chip.screen.params) or "base", "params": chip.screen.params,
            "area_m2": chip.screen.area_m2, "power_W": chip.screen.power_W, "reason": chip.screen.reason,
            "samples_per_s": chip.samples_per_s,
            "objective": objective_values(run.spec, chip.samples_per_s, chip.screen),
            "per_model": {name: {"samples_per_s": simulated_samples_per_s(r), "strategy": r.get("strategy"),
                                 "mapping": _mapping(r.get("strategy")),
                                 "model_flops_utilisation": r.get("model_flops_utilisation")}
                          for name, r in chip.simulated.items()}}


def _write_best(run: CodesignRun, best: Chip, directory: Path, summary: dict) -> None:
    hardware = build_hardware(chip_space(run.spec), best.screen.params)
    (directory / "best-hardware.toml").write_text(hardware_to_toml(hardware))
    machine = hardware_tables(hardware)
    (directory / "best.json").write_text(strict_json({"schema_version": SCHEMA_VERSION, **summary,
                                                      "machine": machine}, indent=2))
    for name, record in best.simulated.items():
        document = {"schema_version": SCHEMA_VERSION, "model": name, "hardware": hardware.name,
                    "network": run.spec.network, "strategy": record["strategy"], "machine": machine,
                    "result": {k: v for k, v in record.items() if k != "strategy"}}
        (directory / mapping_file(name)).write_text(strict_json(document, indent=2))


def mapping_file(model: str) -> str:
    """The name of the file holding ``model``'s best mapping in a run directory:
    ``best-<preset>.json``, or ``best-<file stem>.json`` for a model file."""
    return f"best-{Path(model).stem if Path(model).is_file() else model}.json"


def _write_study(run: CodesignRun, directory: Path) -> None:
    """The chips as an Optuna study in the directory's journal (module docstring)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=run.spec.name, storage=journal_storage(directory),
                                directions=run.spec.directions)
    study.set_user_attr("codesign", {"models": list(run.spec.models), "objective": run.spec.objective,
                                     "hardware": run.spec.hardware})
    distributions = {PARAM_PREFIX + n: CategoricalDistribution(list(v))
                     for n, v in chip_space(run.spec).choices.items()}
    for chip in run.chips:
        screen = chip.screen
        attrs = {"area_m2": screen.area_m2, "power_W": screen.power_W, "reason": screen.reason,
                 "estimated_samples_per_s": screen.samples_per_s, "samples_per_s": chip.samples_per_s,
                 **{f"mapping[{n}]": _mapping(r.get("strategy")) for n, r in chip.simulated.items()}}
        state = TrialState.COMPLETE if chip.samples_per_s > 0 else TrialState.PRUNED
        values = objective_values(run.spec, chip.samples_per_s, screen) if state == TrialState.COMPLETE else None
        study.add_trial(create_trial(state=state, values=values, params=screen.params,
                                     distributions=distributions, user_attrs=attrs))

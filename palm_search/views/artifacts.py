"""Why a mapping wins, as files: its Chrome trace and pictures, attached to the search's trials.

After ``palm-search optimize`` the baseline and the top ``artifacts_top`` trials are simulated
again with records (:func:`simulator.simulate_timeline`); their ``trace.json`` and timeline /
placement / heat-map PNG and SVG go to ``RUN_DIR/mappings/trial-N/`` and are uploaded as Optuna
artifacts into ``RUN_DIR/artifacts`` (``optuna.artifacts.FileSystemArtifactStore``), which
``palm-search dashboard RUN_DIR`` serves. The driver's loop is not involved.

Optuna storages refuse to change a finished trial (``UpdateFinishedTrialError``), and the top
trials are only known once they are finished, so the files are *study* artifacts named
``trial-N-<file>`` (the dashboard's study page lists them), and the study's user attribute
``artifacts`` maps each trial number to ``{file name: artifact id}``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import optuna
from joblib import Parallel, delayed
from optuna.artifacts import FileSystemArtifactStore, get_all_artifact_meta, upload_artifact

from palm_search.search.storage import ARTIFACTS, trial_id
from palm_search.views.outputs import baseline_row, top_mappings, trials_frame
from palm_search.views.plots import PICTURES, render_mapping, render_timeline, shared_timelines
from simulator import MEGATRON_CORE, Hardware, ModelSpec, Stack, Strategy

MAPPINGS = "mappings"
MIMETYPES = {".png": "image/png", ".svg": "image/svg+xml", ".json": "application/json"}


ARTIFACT_FILES = frozenset({"trace.json", *(f"{p}.png" for p in PICTURES)})
"""The files an illustrated trial holds: its Chrome trace and its pictures (PNG: the dashboard
shows images, and one format keeps its list free of duplicates)."""


def artifact_store(run_dir: Path) -> FileSystemArtifactStore:
    """The run directory's artifact store (``RUN_DIR/artifacts``, created if missing)."""
    directory = run_dir / ARTIFACTS
    directory.mkdir(parents=True, exist_ok=True)
    return FileSystemArtifactStore(str(directory))


def mapping_dir(run_dir: Path, number: int) -> Path:
    """Where the files of trial ``number`` go."""
    return run_dir / MAPPINGS / f"trial-{number}"


def chosen_trials(study: optuna.Study, k: int) -> list[int]:
    """Trial numbers to illustrate: the top ``k`` distinct feasible mappings and the baseline."""
    frame = trials_frame(study)
    numbers = [int(n) for n in top_mappings(frame, k)["trial"]] if k and len(frame) else []
    base = baseline_row(frame)
    if base is not None and base.get("feasible") and int(base["trial"]) not in numbers:
        numbers.append(int(base["trial"]))
    return numbers


def attach_artifacts(study: optuna.Study, storage: optuna.storages.BaseStorage, model: ModelSpec,
                     hardware: Hardware, network: str, run_dir: Path, k: int,
                     on_progress: Callable[[int, int], None] = lambda done, total: None,
                     jobs: int = 1, stack: Stack = MEGATRON_CORE) -> list[int]:
    """Render the files of :func:`chosen_trials` on ``jobs`` joblib worker processes and upload
    them from this process as they arrive; files a trial already holds (a resumed run) are not
    uploaded twice. ``storage`` is the one ``study`` was created or loaded with (the dashboard's
    notes and artifact links name the study and trials by their storage ids). Returns the trial
    numbers illustrated. Every mapping is simulated under the study's ``stack``."""
    chosen = chosen_trials(study, k)
    store = artifact_store(run_dir)
    index = dict(study.user_attrs.get("artifacts", {}))
    numbers = [n for n in chosen if not ARTIFACT_FILES <= set(index.get(str(n), {}))]  # drawn once, not per run
    tasks = (delayed(render_mapping)(model, hardware, _strategy(study, n), network, mapping_dir(run_dir, n), stack)
             for n in numbers)
    on_progress(0, len(numbers))
    rendered = Parallel(n_jobs=min(jobs, max(len(numbers), 1)), return_as="generator")(tasks)
    for done, (number, files) in enumerate(zip(numbers, rendered, strict=True), start=1):
        on_progress(done, len(numbers))
        held = index.setdefault(str(number), {})
        for path in files:
            if path.name not in held:
                held[path.name] = _upload(study, store, path, f"trial-{number}-{path.name}")
    common = _share_time_axis(study, store, index, chosen, run_dir,
                              lambda n, path, window_s: render_timeline(model, hardware, _strategy(study, n),
                                                                        network, path, window_s, stack))
    for number in chosen:
        if index.get(str(number)):
            _show_on_trial_page(study, storage, number, index[str(number)], common.get(number))
    study.set_user_attr("artifacts", index)
    on_progress(len(numbers), len(numbers))
    return chosen


def _strategy(study: optuna.Study, number: int) -> Strategy:
    return Strategy.from_dict(study.get_trials(deepcopy=False)[number].user_attrs["strategy"])


def _share_time_axis(study: optuna.Study, store: FileSystemArtifactStore, index: dict, chosen: list[int],
                     run_dir: Path, draw: Callable[[int, Path, float], object]) -> dict[int, str]:
    """Redraw the illustrated trials' timelines on the longest one's time axis
    (:func:`~palm_search.views.plots.shared_timelines`), upload each once
    (``timeline-common-<window>.png``) and return its file name by trial number: the trial page
    shows it instead of the trial's own window."""
    folders = {n: mapping_dir(run_dir, n) for n in chosen if index.get(str(n))}
    redrawn = shared_timelines(folders, draw)
    for number, path in redrawn.items():
        held = index[str(number)]
        if path.name not in held:
            held[path.name] = _upload(study, store, path, f"trial-{number}-{path.name}")
    return {number: path.name for number, path in redrawn.items()}


def _show_on_trial_page(study: optuna.Study, storage: optuna.storages.BaseStorage, number: int,
                        held: dict[str, str], common: str | None = None) -> None:
    """Put trial ``number``'s pictures and trace on its own dashboard page, as the trial's note
    (Markdown linking the study artifacts). Optuna 5 refuses artifacts on a finished trial
    (``UpdateFinishedTrialError``); optuna-dashboard keeps a trial's note among the study's
    attributes, so a finished trial can have one."""
    from optuna_dashboard import save_note

    served = f"/artifacts/{storage.get_study_id_from_name(study.study_name)}"
    files = {f"{p}.png": f"{p}.png" for p in PICTURES} | ({"timeline.png": common} if common else {})
    pictures = "\n\n".join(f"![{p}]({served}/{held[files[f'{p}.png']]})" for p in PICTURES
                           if files[f"{p}.png"] in held)
    if common:
        pictures += "\n\nThe timeline is drawn on the time axis shared by the illustrated trials (the longest window)."
    trace = f"\n\n[Chrome trace]({served}/{held['trace.json']}) (open in https://ui.perfetto.dev)" \
        if "trace.json" in held else ""
    save_note(optuna.Trial(study, trial_id(storage, study, number)), f"## Trial {number}\n\n{pictures}{trace}")


def _upload(study: optuna.Study, store: FileSystemArtifactStore, path: Path, name: str) -> str:
    """Upload ``path`` as the study artifact ``name``; returns its artifact id."""
    named = path.with_name(name)
    named.write_bytes(path.read_bytes())
    try:
        return upload_artifact(artifact_store=store, file_path=str(named), study_or_trial=study,
                               mimetype=MIMETYPES.get(path.suffix))
    finally:
        named.unlink()


def trial_artifacts(study: optuna.Study) -> dict[int, list[str]]:
    """Artifact file names uploaded for each illustrated trial (from the artifact metadata)."""
    names: dict[int, list[str]] = {}
    for meta in get_all_artifact_meta(study):
        number, _, filename = meta.filename.removeprefix("trial-").partition("-")
        if number.isdigit():
            names.setdefault(int(number), []).append(filename)
    return names

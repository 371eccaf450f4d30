"""The run directory's journal: one fsync per change of a trial's state, every record readable."""

from __future__ import annotations

import os
from pathlib import Path

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from palm_search.search.baseline import choose_baseline
from palm_search.search.driver import open_search, optimize, run_baseline
from palm_search.search.storage import JOURNAL
from palm_search.search.study import load_study

DATA = Path(__file__).parent / "data"


def test_a_search_fsyncs_its_journal_a_few_times_per_trial_and_optuna_reads_every_record(tmp_path, monkeypatch):
    fsyncs = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: fsyncs.append(fd) or real_fsync(fd))
    spec = load_study(DATA / "small-study.toml").replace(hardware=str(DATA / "mini-mesh.toml"), sampler="random",
                                                         trials=12)
    search = open_search(spec, run_dir=tmp_path, jobs=1)
    run_baseline(search, choose_baseline(spec, search.model, search.hardware)[0])
    optimize(search)
    records = sum(1 for _ in (tmp_path / JOURNAL).open())
    assert len(search.study.trials) == 12
    assert len(fsyncs) <= 3 * 12 + 5 < records / 4  # Optuna's backend alone fsyncs every record
    optunas = JournalStorage(JournalFileBackend(str(tmp_path / JOURNAL)))
    reread = optuna.load_study(study_name=spec.name, storage=optunas)
    assert [(t.state, t.params, t.values, t.user_attrs) for t in reread.trials] == \
        [(t.state, t.params, t.values, t.user_attrs) for t in search.study.trials]

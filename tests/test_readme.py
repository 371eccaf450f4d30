"""Every ``palm-search`` command the README shows runs as printed (searches with a small budget).

The commands are read from the README's ``sh`` blocks and run as processes from a scratch
directory that links the repository's ``studies`` and ``.venv``, so their outputs (``runs/``,
``t.json``, ``plots/``) land there. Searches get ``--trials 3 --artifacts-top 1`` appended (the
last value of an option wins). Commands that need what a test machine lacks are listed in
:data:`ELSEWHERE` with the test that covers them.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ELSEWHERE = {
    "$URL": "a PostgreSQL server: tests/palm_search/test_distributed.py starts one",
    "tcp://HEAD": "a Dask scheduler on a named host: tests/palm_search/test_distributed.py runs a local cluster",
    "--executor dask": "tests/palm_search/test_distributed.py",
    "my-model.toml": "a user's own files, named for illustration",
    " dashboard ": "a web server that runs until stopped: tests/palm_search/test_dashboard.py",
    "codesign-wafer-sram-compute": "a study of minutes: the same command runs on codesign-small above and in"
                                   " tests/palm_search/test_codesign.py",
}
"""A marker in a command -> why and where it is tested instead."""


def readme_commands() -> list[str]:
    """The README's ``palm-search`` command lines, continuations joined, comments dropped."""
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    lines = [line.strip() for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    commands = [line.split(" # ")[0].strip() for line in lines if line.startswith(".venv/bin/palm-search")]
    return [" ".join(c.split()) for c in commands]


def test_the_readme_shows_commands_of_every_kind():
    kinds = {shlex.split(c)[1] for c in readme_commands()}
    assert {"optimize", "simulate", "report", "validate", "dashboard", "worker", "codesign"} <= kinds


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("readme")
    for name in ("studies", ".venv"):
        (directory / name).symlink_to(ROOT / name)
    return directory


@pytest.mark.parametrize("command", [c for c in readme_commands() if not any(m in f" {c} " for m in ELSEWHERE)])
def test_every_readme_command_runs_as_printed(command, scratch):
    args, into = shlex.split(command), None
    if ">" in args:  # a redirection: stdout into the file, as the shell would
        args, into = args[:args.index(">")], args[args.index(">") + 1]
    if args[1] == "optimize":
        args += ["--trials", "3", "--artifacts-top", "1"]
    done = subprocess.run(args, cwd=scratch, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    if into:
        (scratch / into).write_text(done.stdout)
    assert "Traceback" not in done.stderr and "infeasible" not in done.stdout

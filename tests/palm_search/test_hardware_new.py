"""`palm-search hardware new`: a valid file to edit, from a preset."""

from __future__ import annotations

from typer.testing import CliRunner

from palm_search.commands.cli import app
from simulator import load_hardware

runner = CliRunner()


def test_a_new_file_from_a_preset_loads_with_the_changes_and_says_which_sources_to_replace(tmp_path):
    result = runner.invoke(app, ["hardware", "new", "--from", "wafer", "--dies", "2x2", "--cores", "2x4"])
    assert result.exit_code == 0, result.output
    path = tmp_path / "chip.toml"
    path.write_text(result.stdout)
    chip, wafer = load_hardware(path), load_hardware("wafer")
    assert (chip.network.dies_x, chip.network.dies_y, chip.network.cores_x, chip.network.cores_y) == (2, 2, 2, 4)
    assert chip.network.num_devices == 2 * 2 * 2 * 4 and chip.calibration == wafer.calibration
    assert result.stdout.count("replace with your chip's source") == 4


def test_a_change_that_does_not_apply_or_breaks_a_bound_is_one_line():
    for args, fragment in ((["--from", "h100-cluster", "--dies", "2x2"], "applies to a mesh"),
                           (["--from", "tpu-v4-cube", "--cores", "2x2"], "a mesh, and this machine is a torus"),
                           (["--from", "wafer", "--nodes", "2"], "applies to a cluster, and this machine is a mesh"),
                           (["--from", "wafer", "--dies", "2000x2000"], "more than the 262,144"),
                           (["--from", "wafer", "--dies", "2by2"], "AxB")):
        result = runner.invoke(app, ["hardware", "new", *args])
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1 and fragment in lines[0], result.output


def test_dies_added_to_a_one_die_chip_flag_the_die_to_die_link_it_never_used(tmp_path):
    # wormhole-n150 is one chip: its inter-die link bandwidth is the on-chip link's, "(unused)";
    # four chips joined need a chip-to-chip figure, so the new file says to replace it
    result = runner.invoke(app, ["hardware", "new", "--from", "wormhole-n150", "--dies", "2x4"])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if x.startswith("inter_die_link_bandwidth_bytes_per_s_source"))
    assert "never used" in line and "replace with your die-to-die" in line
    wafer = runner.invoke(app, ["hardware", "new", "--from", "wafer", "--dies", "2x2"]).stdout  # already has dies
    assert "never used" not in wafer

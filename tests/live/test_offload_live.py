"""tests/programs/offload.c on libomptarget's host plugin (clang-19, two devices)
under ``ompt-py run``: the offload tables' counts and bytes against what its map
clauses move (the program's header comment)."""

from __future__ import annotations

import pytest
from conftest import PROGRAMS, build_offload, cli, ok

import ompt_py

pytestmark = [pytest.mark.needs_clang, pytest.mark.any_libomp]


@pytest.fixture(scope="module")
def offload_program(tmp_path_factory):
    return build_offload(tmp_path_factory, PROGRAMS / "offload.c")


def test_offload_tables_of_a_run(offload_program, tmp_path):
    out = tmp_path / "t.parquet"
    r = ok(cli("run", "-q", "-o", out, "--", offload_program, timeout=180))
    assert r.stdout.count("sum=1000000 x=11 y=22") == 2, r.stdout
    t = ompt_py.load(out)
    regions = t.target_regions()
    assert regions.attrs["unmatched_begins"] == regions.attrs["unmatched_ends"] == 0
    for device in (0, 1):
        mine = regions[regions["device"] == device]
        assert mine["kind"].astype(str).value_counts().to_dict() == {
            "target": 4, "target_enter_data": 2, "target_exit_data": 2, "target_update": 1}
        assert mine["nowait"].sum() == 2
    d = t.data_ops()
    kind = d["kind"].astype(str)
    for device in (0, 1):
        to = d[(kind == "transfer_to_device") & (d["dest_device"] == device)]
        back = d[(kind == "transfer_from_device") & (d["src_device"] == device)]
        assert sorted(to["bytes"]) == [4, 4, 8000, 8000]
        assert sorted(back["bytes"]) == [4, 4, 8000, 8000, 8000]
    assert d["target_region"].notna().all()
    assert (d["duration_ns"] >= 0).all()
    k = t.kernels()
    assert len(k) == 8 and sorted(k["device"].tolist()) == [0] * 4 + [1] * 4
    assert sorted(k["requested_teams"].tolist()) == [1] * 6 + [2] * 2
    assert "Offload per device" in str(t.summary())

"""RAPL counters through a fake powercap sysfs tree."""

from trainpace.measure.energy import RAPL, energy_between
from trainpace.sampling.rapl import RaplReader, find_zones


def _zone(root, name, label, energy_uj, max_uj=262_143_328_850):
    path = root / name
    path.mkdir(parents=True)
    (path / "name").write_text(label + "\n")
    (path / "energy_uj").write_text(f"{energy_uj}\n")
    (path / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return path


def test_packages_and_dram_are_found_and_core_is_skipped(tmp_path):
    _zone(tmp_path, "intel-rapl:0", "package-0", 10)
    _zone(tmp_path, "intel-rapl:0/intel-rapl:0:0", "core", 5)
    _zone(tmp_path, "intel-rapl:0/intel-rapl:0:1", "dram", 7)
    _zone(tmp_path, "intel-rapl:1", "package-1", 20)
    zones = find_zones(tmp_path)
    assert [z.name for z in zones] == ["package-0", "package-0/dram", "package-1"]
    assert RaplReader(tmp_path).read() == {"package-0": [10, 262_143_328_850],
                                           "package-0/dram": [7, 262_143_328_850],
                                           "package-1": [20, 262_143_328_850]}


def test_no_powercap_tree_is_unavailable_not_an_error(tmp_path):
    reader = RaplReader(tmp_path / "absent")
    assert not reader.available
    assert reader.read() == {}


def test_the_wrap_around_is_added_back(tmp_path):
    package = _zone(tmp_path, "intel-rapl:0", "package-0", 0, max_uj=1_000_000_000)
    reader = RaplReader(tmp_path)
    rows = []
    for t_s, uj in ((0.0, 900_000_000), (1.0, 950_000_000), (2.0, 50_000_000)):
        (package / "energy_uj").write_text(f"{uj}\n")
        rows.append({"t_s": t_s, "rapl": reader.read()})
    reading = energy_between(rows, 0.0, 2.0)
    assert reading.source == RAPL
    # 50 J, then 950 -> wrap at 1000 -> 50: another 100 J; 150 J over 2 s
    assert reading.power_w_mean == 75.0


def test_an_unreadable_zone_is_left_out_and_said_once(tmp_path, caplog):
    package = _zone(tmp_path, "intel-rapl:0", "package-0", 1)
    reader = RaplReader(tmp_path)
    (package / "energy_uj").unlink()
    with caplog.at_level("INFO", logger="trainpace"):
        assert reader.read() == {}
        assert reader.read() == {}
    assert sum("RAPL package-0" in r.message for r in caplog.records) == 1

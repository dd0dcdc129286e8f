from trainpace.sampling.descendants import DescendantsCpu, reaped_cpu_s


def test_a_reaped_descendant_adds_what_its_readings_did_not_count_once():
    cpu = DescendantsCpu(None)
    assert cpu.cpu_s({7: 1.0}, 0.0, None, None) == 0.0  # the first reading: a baseline
    assert cpu.cpu_s({7: 1.5}, 0.0, {7: 1.0}, 0.0) == 0.5
    assert cpu.cpu_s({}, 0.0, {7: 1.5}, 0.0) == 0.0  # gone, not reaped yet: 0.5 counted
    # reaped with 2.25 s in all, together with another of 0.25 s never followed
    assert cpu.cpu_s({}, 2.5, {}, 0.0) == 2.0
    assert cpu.cpu_s({}, 2.75, {}, 2.5) == 0.25  # nothing left to take out


def test_without_the_reaped_time_only_the_followed_descendants_count():
    cpu = DescendantsCpu(None)
    assert cpu.reaped() is None
    cpu.cpu_s({7: 1.0, 8: 2.0}, None, None, None)
    assert cpu.cpu_s({7: 1.25}, None, {7: 1.0, 8: 2.0}, None) == 0.25


def test_the_reaped_time_is_this_processes_children_cpu():
    assert reaped_cpu_s() >= 0.0
    assert DescendantsCpu(lambda: 1.5).reaped() == 1.5

"""Rank, local rank, world size and node from torchrun's variables; rank folders."""

from trainpace.dist.ranks import RankInfo, folder_rank, rank_folder, rank_folders, rank_info

TORCHRUN = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4",
            "GROUP_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
            "TORCHELASTIC_RESTART_COUNT": "2"}


def test_rank_info_from_torchrun_variables():
    assert rank_info(TORCHRUN, host="n1") == RankInfo(
        rank=5, local_rank=1, world_size=8, local_world_size=4, node=1, host="n1",
        master_addr="10.0.0.1", master_port=29500, restart=2)
    assert rank_info(TORCHRUN, host="n1").distributed


def test_no_or_bad_variables_is_one_process():
    assert rank_info({}, host="h") == RankInfo(host="h")
    assert not rank_info({"RANK": "3", "WORLD_SIZE": "2"}, host="h").distributed  # rank out of range
    assert not rank_info({"RANK": "x", "WORLD_SIZE": "2"}, host="h").distributed


def test_rank_folders(tmp_path):
    assert rank_folder(tmp_path, 3) == tmp_path / "rank3"
    for name in ("rank10", "rank2", "ranks", "rank-1"):
        (tmp_path / name).mkdir()
    (tmp_path / "rank4").write_text("a file, not a folder")
    assert rank_folders(tmp_path) == {2: tmp_path / "rank2", 10: tmp_path / "rank10"}
    assert folder_rank(tmp_path / "rank07") == 7
    assert rank_folders(tmp_path / "none") == {}

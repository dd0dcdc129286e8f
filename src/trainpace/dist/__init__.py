"""Distributed runs: each rank's place and folder, the window exchange, the merge of ranks.

The Meter makes a :class:`~trainpace.dist.monitor.RankMonitor` when the launch environment
says the process is one rank of several (``rank_info().distributed``); see the README's
"Distributed runs" section.
"""

from trainpace.dist.comm import watch_ddp
from trainpace.dist.ranks import RankInfo, rank_folder, rank_info

__all__ = ["RankInfo", "rank_folder", "rank_info", "watch_ddp"]

"""Two ranks on this host (gloo, CPU), each writing what its host sampler's job column counts.

Under torchrun (``LOCAL_RANK`` set) this process is one rank; else it starts the two ranks with
``torch.multiprocessing.spawn``. argv: the output folder, and (spawn) a free port.
"""

import json
import os
import sys
import time
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp

from trainpace.sampling.host import JOB_KEY, HostSource


def rank(index, out, port):
    if port is None:
        dist.init_process_group("gloo")
    else:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=index,
                                world_size=2)
    host = HostSource(slow_every_s=0.0)  # both ranks are up: the group waited for them
    host.read()
    end = time.monotonic() + 0.3
    while time.monotonic() < end:
        sum(i * i for i in range(1000))
    reading = host.read()
    Path(out, f"rank{index}.json").write_text(json.dumps({
        "pid": os.getpid(), "job_pids": host.job_pids, "job_cpu_pct": reading[JOB_KEY],
        "process_cpu_pct": reading["process_cpu_pct"]}))
    host.close()
    dist.barrier()  # neither ends before the other has read it
    dist.destroy_process_group()


if __name__ == "__main__":
    if "LOCAL_RANK" in os.environ:
        rank(int(os.environ["RANK"]), sys.argv[1], None)
    else:
        mp.spawn(rank, args=(sys.argv[1], int(sys.argv[2])), nprocs=2)

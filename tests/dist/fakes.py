"""An in-memory store (the part of torch.distributed.Store the exchange uses), records, and
rank folders written by hand."""

import json

from trainpace.dist.merge import WindowRecord


class MemoryStore:
    def __init__(self):
        self.data = {}
        self.calls = 0

    def set(self, key, value):
        self.calls += 1
        self.data[key] = value.encode() if isinstance(value, str) else value

    def get(self, key):
        self.calls += 1
        if key not in self.data:
            raise TimeoutError(f"wait timeout, keys: {key}")
        return self.data[key]

    def check(self, keys):
        self.calls += 1
        return all(k in self.data for k in keys)

    def multi_get(self, keys):
        self.calls += 1
        missing = [k for k in keys if k not in self.data]
        if missing:
            raise TimeoutError(f"wait timeout, keys: {missing}")
        return [self.data[k] for k in keys]

    def multi_set(self, keys, values):
        self.calls += 1
        for k, v in zip(keys, values, strict=True):
            self.data[k] = v.encode() if isinstance(v, str) else v


def record(rank, window, *, steps=10, measured_s=1.0, wait_s=0.0, samples=160, tokens=None,
           pre_s=None, comm_s=None, final=False, host="h0", t_unix=100.0, **signs) -> WindowRecord:
    base = {"rank": rank, "local_rank": rank, "node": 0, "host": host, "window": window,
            "first_step": (window - 1) * steps + 1, "last_step": window * steps, "steps": steps,
            "samples": samples, "tokens": tokens, "measured_s": measured_s,
            "step_s_median": measured_s / steps if steps else None, "wait_s": wait_s,
            "pre_s": pre_s, "comm_s": comm_s, "t_unix": t_unix, "util_pct": None,
            "temperature_c": None, "throttle_pct": None, "process_cpu_pct": None,
            "system_cpu_pct": None, "cpu_count": None, "final": final}
    base.update(signs)
    return base


def write_rank(run, rank, step_s, wait_s, *, world=2, finished=True, window=2, host="h",
               **meta_keys):
    """A rank's folder by hand: its meta.json and one step record per step time."""
    folder = run / f"rank{rank}"
    folder.mkdir(parents=True)
    meta = {"schema": "trainpace.meta/1", "run_id": "run", "world_size": world, "rank": rank,
            "local_rank": rank, "node": 0, "host": host, "started_at": "2026-01-01T00:00:00+00:00",
            "finished_at": "2026-01-01T00:01:00+00:00" if finished else None,
            "config": {"window": window, "warmup": 0}, **meta_keys}
    (folder / "meta.json").write_text(json.dumps(meta))
    t, lines = 0.0, []
    for i, (s, w) in enumerate(zip(step_s, wait_s, strict=True), start=1):
        t += s
        lines.append(json.dumps({"step": i, "t_s": t, "step_s": s, "wait_s": w, "samples": 4,
                                 "tokens": None}))
    (folder / "steps.jsonl").write_text("\n".join(lines) + "\n")

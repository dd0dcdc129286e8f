"""What ``trainpace run`` could not see in a script, and why: findings for its report.

The patches count what they saw (optimizer steps, DataLoaders, threads, optimizers); a script
that trains without one of them gets a finding that says which figures are unknown and how to
give them, never a zero shown as a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainpace.summary import Finding


@dataclass
class Seen:
    """What the patches of :class:`~trainpace.integrations.autopatch.AutoPatch` counted while
    installed, each patch its own fields."""

    optimizer_steps: int = 0  # the pacer's steps
    optimizers_made: int = 0  # torch.optim optimizers constructed while installed
    backward_calls: int = 0
    loaders_metered: int = 0
    loaders_skipped: int = 0  # iterated under no_grad: taken for evaluation
    optimizers: dict[int, str] = field(default_factory=dict)  # id -> class name, as they stepped
    pacers: list[str] = field(default_factory=list)  # the optimizers that paced, in turn
    trained: bool = False  # a step was opened (the script got as far as training)
    step_thread_name: str | None = None  # the thread whose steps are measured
    other_threads: dict[int, str] = field(default_factory=dict)  # ident -> name, left alone
    samples_given: bool = False  # --samples-per-step
    tokens_given: bool = False  # --tokens-per-step


def blind_spots(seen: Seen) -> list[Finding]:
    """What the patches could not see, and why (empty: all seen)."""
    out: list[Finding] = []
    if seen.optimizer_steps == 0 and seen.backward_calls and not seen.optimizers_made:
        out.append(Finding(
            id="run_paced_by_backward", severity="info",
            title="No torch.optim optimizer was made (the weights are updated another "
                  "way): each backward() marks the end of a step",
            evidence={"optimizers_made": 0, "backward_calls": seen.backward_calls,
                      "dataloaders_iterated": seen.loaders_metered},
            advice=["with a DataLoader, the backward() calls on one batch are one step; "
                    "without one, a step that calls backward() several times is counted "
                    "as several: trainpace.Meter in the loop (with meter.step(): ...) "
                    "marks the steps where they are"],
        ))
    elif seen.optimizer_steps == 0:
        out.append(Finding(
            id="run_no_optimizer_step", severity="warning",
            title="No optimizer step was seen: there are no step boundaries, so no step "
                  "times, throughput or data wait",
            evidence={"optimizer_steps": 0, "backward_calls": seen.backward_calls,
                      "dataloaders_iterated": seen.loaders_metered},
            advice=["trainpace run marks a step at each torch.optim optimizer's step() "
                    "(at each backward() when the script makes no optimizer); a script "
                    "that trains another way can use trainpace.Meter in its loop (with "
                    "meter.step(): ...)"],
        ))
    if seen.loaders_metered == 0:
        # the counts may be given (--samples-per-step); the data wait never is: with no
        # DataLoader metered it stays unknown, not 0% (the report must not say "✓")
        if not seen.samples_given:
            advice = ["pass --samples-per-step N (and --tokens-per-step N) to give the "
                      "counts of one optimizer step"]
            unknown = "samples, tokens and data wait are unknown"
        else:
            advice = ["the counts come from --samples-per-step; the time spent getting "
                      "each batch is measured only from a torch DataLoader's iteration"]
            unknown = "the data wait is unknown"
        if seen.loaders_skipped:
            advice.insert(0, "only DataLoaders iterated under torch.no_grad() were seen; "
                          "they are taken for evaluation and not metered")
        out.append(Finding(
            id="run_no_dataloader", severity="info",
            title="No torch.utils.data.DataLoader was iterated for training: " + unknown,
            evidence={"dataloaders_iterated": 0,
                      "dataloaders_under_no_grad": seen.loaders_skipped},
            advice=advice,
        ))
    if seen.other_threads:
        others = sorted(seen.other_threads.values())
        out.append(Finding(
            id="run_other_threads", severity="warning",
            title=f"Training in {len(others) + 1} threads: only thread "
                  f"{seen.step_thread_name!r}, the first to train, is measured; the steps "
                  f"of {', '.join(map(repr, others))} are not",
            evidence={"measured_thread": seen.step_thread_name, "other_threads": others},
            advice=["the figures are one thread's steps, with the other threads' work "
                    "competing for the same cores and device; a trainpace.Meter per "
                    "thread (with meter.step(): ...) measures each"],
        ))
    if len(seen.optimizers) > 1:
        names = list(seen.optimizers.values())
        pacers = seen.pacers
        if len(pacers) == 1:
            title = (f"{len(names)} optimizers stepped; the first one, {names[0]}, marks "
                     "the steps")
            advice = ["the other optimizers' steps are inside each step: the step time "
                      "is one full iteration of all of them"]
        else:
            title = (f"{len(names)} optimizers stepped; the steps are marked by "
                     f"{' then '.join(pacers)} (a new one takes over when it steps twice "
                     "without the one before)")
            advice = ["each training loop's steps are its own optimizer's; the figures "
                      "are over all of them"]
        out.append(Finding(
            id="run_several_optimizers", severity="info", title=title,
            evidence={"optimizers": names,
                      "steps_marked_by": pacers[0] if len(pacers) == 1 else pacers},
            advice=advice,
        ))
    return out

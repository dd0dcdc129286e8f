"""Counts the first step of a word-LM-style loop in a fresh process; prints one JSON object.

The weights are updated by hand (no torch.optim, which would load ``torch._dynamo``).
``by-hand``: nothing compiled; the count is then checked against FlopCounterMode's. ``compile-module`` / ``compile-function``: ``torch.compile``
is first called inside the counted step (dynamo is loaded while the counting mode is on), on
the output layer, called on the embedding's output, or on a function whose first ops come
before its first module call. The compiled step is checked against the
same step from the same weights, uncounted and not compiled.
"""

import json
import sys

import torch

from trainpace.measure.flops import StepCounter

case = sys.argv[1]
torch.manual_seed(0)
embed, rnn, head = torch.nn.Embedding(30, 16), torch.nn.GRU(16, 16), torch.nn.Linear(16, 30)
weights = torch.nn.ModuleList([embed, rnn, head])  # all that a step updates
tokens = torch.randint(0, 30, (6, 4))


def step(forward):
    logits = forward(tokens)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 30), tokens.reshape(-1))
    loss.backward()
    with torch.no_grad():
        for p in weights.parameters():
            if p.grad is not None:  # the compiled cases leave the GRU out
                p.add_(p.grad, alpha=-0.1)
                p.grad = None
    return logits.detach()


def embedded_head(t):
    return head(torch.nn.functional.embedding(t, embed.weight) * 2.0)  # ops, then a module


def compiled_head_on(embedded):
    # no op between dynamo's loading and the compiled module's first op, on a non-leaf
    return torch.compile(head, backend="aot_eager")(embedded)


# per case: the step's forward, eager; the same, compiled inside the counted step
EAGER = {"compile-module": lambda t: head(embed(t)), "compile-function": embedded_head}
COMPILED = {
    "compile-module": lambda t: compiled_head_on(embed(t)),
    "compile-function": lambda t: torch.compile(embedded_head, backend="aot_eager")(t),
}


def count(forward):
    out.setdefault("dynamo_loaded_before", "torch._dynamo" in sys.modules)
    with StepCounter() as counter:
        logits = step(forward)
    return logits, counter


out = {}
if case == "by-hand":
    start = {k: v.clone() for k, v in weights.state_dict().items()}
    _, counter = count(lambda t: head(rnn(embed(t))[0]))
    out["dynamo_loaded_after"] = "torch._dynamo" in sys.modules
    from measure.flop_reference import reference_count  # FlopCounterMode: loads dynamo

    weights.load_state_dict(start)
    out["same_as_flop_counter_mode"] = counter.result == reference_count(
        lambda: step(lambda t: head(rnn(embed(t))[0])))
else:
    eager_forward = EAGER[case]
    start = {k: v.clone() for k, v in weights.state_dict().items()}
    expected_logits = step(eager_forward)
    expected_weights = {k: v.clone() for k, v in weights.state_dict().items()}
    weights.load_state_dict(start)
    logits, counter = count(COMPILED[case])
    out["same_logits"] = torch.equal(logits, expected_logits)
    out["same_weights"] = all(torch.equal(expected_weights[k], v)
                              for k, v in weights.state_dict().items())
    weights.load_state_dict(start)
    out["eager_flops"] = count(eager_forward)[1].result.flops
out |= {"flops": counter.result.flops if counter.result else None, "error": counter.error}
print(json.dumps(out))

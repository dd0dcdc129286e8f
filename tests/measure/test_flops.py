import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from measure.counting import count_step
from trainpace.measure import flops as flops_module
from trainpace.measure import op_costs
from trainpace.measure.flops import StepCounter
from trainpace.measure.op_costs import OpTally, tensor_bytes

B, IN, OUT = 8, 32, 16
F32 = 4


def test_linear_forward_is_2_b_in_out_and_moves_its_operands():
    torch.manual_seed(0)
    layer = torch.nn.Linear(IN, OUT)
    x = torch.randn(B, IN)
    count = count_step(lambda: layer(x))
    assert count.flops == 2 * B * IN * OUT
    matmul = count.family("matmul")
    assert matmul.flops == 2 * B * IN * OUT
    # addmm reads the input, the (transposed view of the) weight and the bias; writes the output
    assert matmul.bytes == (B * IN + IN * OUT + OUT + B * OUT) * F32
    assert count.flops_by_dtype == {"float32": 2 * B * IN * OUT}
    assert count.dtype == "float32"


def test_linear_backward_is_twice_the_forward():
    layer = torch.nn.Linear(IN, OUT)
    x = torch.randn(B, IN, requires_grad=True)

    def step():
        layer(x).sum().backward()

    count = count_step(step)
    forward = 2 * B * IN * OUT
    assert count.flops == forward + 2 * forward
    assert count.family("matmul").ops == 3  # addmm, then mm for grad input and grad weight


def test_elementwise_add_reads_two_and_writes_one():
    n = 1000
    a, b = torch.randn(n), torch.randn(n)
    count = count_step(lambda: a + b)
    assert count.flops == 0
    assert count.bytes == 3 * n * F32
    assert [f.family for f in count.families] == ["elementwise"]
    assert count.dtype is None


def test_in_place_and_write_only_ops():
    n = 256
    a, b = torch.randn(n), torch.randn(n)
    assert count_step(lambda: a.add_(b)).bytes == 3 * n * F32  # reads a and b, writes a
    assert count_step(lambda: a.copy_(b)).bytes == 2 * n * F32  # reads b, writes a
    assert count_step(lambda: a.fill_(1.0)).bytes == n * F32  # writes a only


def test_views_move_nothing_and_broadcasts_count_distinct_elements():
    n = 64
    a, s = torch.randn(n), torch.randn(1)
    assert count_step(lambda: a.view(8, 8).t()).ops == 0
    count = count_step(lambda: a + s.expand(n))
    assert count.bytes == (n + 1 + n) * F32
    assert tensor_bytes(s.expand(n, n)) == F32
    assert tensor_bytes(torch.empty(0, 3)) == 0
    assert tensor_bytes(torch.randn(4, 6)[:, :2]) == 8 * F32


def test_bfloat16_matmul_counts_under_its_dtype():
    a = torch.randn(16, 32, dtype=torch.bfloat16)
    b = torch.randn(32, 8, dtype=torch.bfloat16)
    count = count_step(lambda: a @ b)
    assert count.flops_by_dtype == {"bfloat16": 2 * 16 * 32 * 8}
    assert count.family("matmul").bytes == (16 * 32 + 32 * 8 + 16 * 8) * 2


def test_cpu_attention_uses_torch_sdpa_formula():
    batch, heads, length, dim = 2, 4, 8, 16
    q = torch.randn(batch, heads, length, dim)
    count = count_step(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q))
    # two batched matmuls (QK^T and PV), 2 FLOPs per multiply-add
    assert count.family("attention").flops == 2 * 2 * batch * heads * length * length * dim


def test_convolution_is_its_own_family():
    conv = torch.nn.Conv2d(3, 4, kernel_size=3, bias=False)
    x = torch.randn(2, 3, 8, 8)
    count = count_step(lambda: conv(x))
    # output 2x4x6x6, each element 3*3*3 multiply-adds
    assert count.family("conv").flops == 2 * (2 * 4 * 6 * 6) * (3 * 3 * 3)


def test_a_training_step_with_optimizer_is_counted_once():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(IN, OUT), torch.nn.ReLU(), torch.nn.Linear(OUT, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(B, IN), torch.randint(0, 4, (B,))

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    with StepCounter(samples=B) as counter:
        step()
    count = counter.result
    fwd = 2 * B * (IN * OUT + OUT * 4)
    # backward: grad weight for both layers, grad input only for the second (x needs no grad)
    bwd = 2 * B * (IN * OUT + OUT * 4) + 2 * B * OUT * 4
    assert count.flops == fwd + bwd
    assert count.samples == B
    assert {f.family for f in count.families} >= {"matmul", "elementwise", "reduction"}
    assert count.bytes == sum(f.bytes for f in count.families)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_compiled_module_is_counted_without_a_warning_of_ours(backend):
    # compiled before the counted step (dynamo loaded): dynamo runs the first step eagerly
    # under the counting mode, as it did under FlopCounterMode
    torch.manual_seed(0)
    layer = torch.nn.Linear(IN, OUT)
    model = torch.compile(layer, backend=backend)
    x = torch.randn(B, IN, requires_grad=True)
    expected = layer(x)
    with StepCounter() as counter:  # pytest turns warnings into errors
        out = model(x)
        out.sum().backward()
    assert torch.equal(out, expected)
    assert counter.error is None
    assert counter.result.flops == 3 * 2 * B * IN * OUT  # forward, grad input, grad weight


def _first_count(case, *python_options):
    script = Path(__file__).parent / "scripts" / "first_count.py"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, *python_options, str(script), case], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_counting_a_step_without_an_optimizer_does_not_import_torch_dynamo():
    out = _first_count("by-hand", "-W", "error")
    assert out["dynamo_loaded_before"] is False
    assert out["dynamo_loaded_after"] is False
    assert out["error"] is None and out["flops"] > 0
    assert out["same_as_flop_counter_mode"] is True


@pytest.mark.parametrize("case", ["compile-module", "compile-function"])
def test_torch_compile_first_called_inside_the_counted_step(case):
    # dynamo is loaded under the unwrapped mode: at the compiled module's call (no op in
    # between), or at the op after it, the mode goes through PyTorch's wrapper; without
    # that, -W error turns a warning of dynamo's, tracing the mode, into an error in the step
    out = _first_count(case, "-W", "error")
    assert out["dynamo_loaded_before"] is False
    assert out["same_logits"] and out["same_weights"]
    assert out["error"] is None
    assert out["flops"] == out["eager_flops"] > 0


def test_a_failure_of_the_counter_does_not_break_the_step(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(OpTally, "record", broken)
    a = torch.ones(4)
    with StepCounter() as counter:
        out = a * 3
    assert torch.equal(out, torch.full((4,), 3.0))
    assert counter.result is None
    assert "RuntimeError: boom" in counter.error


def test_a_flop_formula_that_fails_leaves_the_flops_unknown_and_the_step_whole(monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("no such shape")

    formulas = {**op_costs.flop_formulas(), torch.ops.aten.mm: broken}
    monkeypatch.setattr(flops_module, "flop_formulas", lambda: formulas)
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    with StepCounter() as counter:
        out = a @ b
    assert torch.equal(out, torch.mm(a, b))
    assert counter.result is None
    assert counter.error == "aten.mm.default: ValueError: no such shape"


def test_an_exception_of_the_step_propagates_and_leaves_no_count():
    with pytest.raises(ValueError, match="user error"), StepCounter() as counter:
        torch.ones(2) + 1
        raise ValueError("user error")
    assert counter.result is None
    # the modes were left: ops after the block are not counted or intercepted
    assert torch.ones(2).sum().item() == 2.0


def test_a_counter_that_cannot_start_counts_nothing(monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("no modes here")

    monkeypatch.setattr(flops_module, "flop_formulas", refuse)
    with StepCounter() as counter:
        value = (torch.ones(3) * 2).sum().item()
    assert value == 6.0
    assert counter.result is None
    assert counter.error.startswith("cannot start counting (RuntimeError: no modes here)")


def _modes():
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    return _get_current_dispatch_mode_stack()


class Ticking:
    """A CPU clock that advances ``tick`` seconds each time it is read: an op, read before
    and after, takes one tick."""

    def __init__(self, tick):
        self.now, self.tick = 0.0, tick

    def __call__(self):
        self.now += self.tick
        return self.now


def test_a_step_that_never_ends_stops_counting_after_its_budget_at_a_module_call():
    model = torch.nn.Linear(4, 4)
    counter = StepCounter(budget_s=2.0, cpu_clock=Ticking(0.05))  # 0.05 s per op
    counter.__enter__()
    calls = 0
    while counter.counting and calls < 1000:
        calls += 1
        model(torch.randn(2, 4)).sum().backward()
        if calls == 1:
            assert len(_modes()) == 1  # within the budget
    assert not counter.counting
    assert _modes() == []  # ended at a module call, no step boundary needed
    assert 2.0 < counter.ops_cpu_s < 2.0 + 0.05 * 20  # just past the budget
    assert "did not end within 2 s of its ops' CPU time" in counter.error
    counter.__exit__(None, None, None)  # the step's end, much later: nothing left to do
    assert counter.result is None and _modes() == []


def test_without_module_calls_counting_stops_at_the_next_op_and_ops_pass_through():
    x = torch.randn(8, 8)
    counter = StepCounter(budget_s=1.0, cpu_clock=Ticking(0.4))  # 0.4 s per op
    with counter:
        x @ x
        x @ x
        assert not _modes()[-1].spent
        x @ x  # 1.2 s: over budget, noticed inside the dispatch, where no mode can leave
        (mode,) = _modes()
        assert mode.spent
        assert counter._tally.ops["matmul"] == 3
        assert counter._tally.flops["matmul"] == 3 * 2 * 8**3
        x @ x
        assert counter._tally.ops["matmul"] == 3  # no longer counted
        assert counter._tally.flops["matmul"] == 3 * 2 * 8**3
    assert _modes() == []
    assert counter.result is None and "counting stopped" in counter.error


def test_counting_that_runs_out_inside_backward_leaves_every_mode_at_the_next_module_call():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x = torch.randn(16, 8)
    for ops in range(1, 30):  # the budget runs out at each op in turn, backward's included
        counter = StepCounter(budget_s=ops - 0.5, cpu_clock=Ticking(1.0))  # 1 s per op
        counter.__enter__()
        for _ in range(3):
            model(x).sum().backward()
        assert _modes() == [], ops
        counter.__exit__(None, None, None)
        assert _modes() == [], ops


def test_a_step_within_the_budget_is_counted_as_before():
    counter = StepCounter(budget_s=1.0, cpu_clock=Ticking(0.01))
    with counter:
        torch.nn.Linear(4, 3)(torch.randn(2, 4))
    assert counter.error is None
    assert counter.result.flops == 2 * 2 * 4 * 3


class _Attention(torch.nn.Module):
    """Embedding, one self-attention block through scaled_dot_product_attention, a head."""

    def __init__(self, vocab=50, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.embed = torch.nn.Embedding(vocab, dim)
        self.norm = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.norm(self.embed(tokens))
        batch, length, dim = x.shape
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, dim=-1))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(x + y.transpose(1, 2).reshape(batch, length, dim))


class _Recurrent(torch.nn.Module):
    def __init__(self, cell, vocab=40, dim=24):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.rnn = cell(dim, dim, num_layers=2, batch_first=True)
        self.out = torch.nn.Linear(dim, vocab)

    def forward(self, tokens):
        return self.out(self.rnn(self.embed(tokens))[0])


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(IN, 64), torch.nn.GELU(), torch.nn.Dropout(0.1),
                               torch.nn.Linear(64, 10))


def _cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 8, 3, stride=2), torch.nn.Flatten(),
        torch.nn.Linear(8 * 3 * 3, 10))


# name -> (model factory, input factory, class count of the target)
MODELS = {
    "mlp": (_mlp, lambda: torch.randn(B, IN), 10),
    "cnn": (_cnn, lambda: torch.randn(4, 3, 16, 16), 10),
    "lstm": (lambda: _Recurrent(torch.nn.LSTM), lambda: torch.randint(0, 40, (3, 7)), 40),
    "gru": (lambda: _Recurrent(torch.nn.GRU), lambda: torch.randint(0, 40, (3, 7)), 40),
    "attention": (_Attention, lambda: torch.randint(0, 50, (2, 12)), 50),
}


def _training_step(name, dtype, optimizer):
    """A fresh model's step: forward, loss, backward, then an optimizer step or a hand-made
    update (word_lm's way, no torch.optim)."""
    make_model, make_input, classes = MODELS[name]
    torch.manual_seed(0)
    model = make_model().to(dtype)
    inputs = make_input()
    if inputs.is_floating_point():
        inputs = inputs.to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.1) if optimizer else None

    def step():
        logits = model(inputs)
        target = torch.zeros(logits.shape[:-1], dtype=torch.long)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, classes), target.reshape(-1))
        loss.backward()
        if opt is not None:
            opt.step()
            opt.zero_grad()
        else:
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-0.1)
                    p.grad = None

    return step


@pytest.mark.parametrize("optimizer", [False, True], ids=["by-hand", "sgd"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_flops_and_bytes_per_family_are_flop_counter_modes(name, dtype, optimizer):
    from measure.flop_reference import reference_count

    expected = reference_count(_training_step(name, dtype, optimizer))
    counted = count_step(_training_step(name, dtype, optimizer))
    assert counted == expected  # every family's FLOPs, bytes and ops; FLOPs by dtype
    assert counted.flops > 0
    assert counted.dtype == str(dtype).removeprefix("torch.")


@pytest.mark.parametrize("name", ["attention", "cnn"])
def test_composite_ops_under_inference_mode_count_their_parts_as_flop_counter_mode(name):
    # under inference_mode scaled_dot_product_attention and linear reach the counter whole;
    # their FLOPs are those of the ops they decompose into, under their own family
    from measure.flop_reference import reference_count

    make_model, make_input, _ = MODELS[name]
    torch.manual_seed(0)
    model, inputs = make_model().eval(), make_input()

    def forward():
        with torch.inference_mode():
            model(inputs)

    counted = count_step(forward)
    assert counted == reference_count(forward)
    assert counted.flops > 0


def test_an_lstm_layer_on_the_cpu_counts_its_gate_matmuls():
    # oneDNN's recurrent layer has no formula in PyTorch's table; ours is the 2·M·N·K of its
    # gate matmuls: 21 positions (7 steps × batch 3), 4·24 gates, 24 inputs + 24 hidden
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(24, 24, batch_first=True)
    inputs = torch.randn(3, 7, 24)

    def step():
        lstm(inputs)[0].sum().backward()

    counted = count_step(step)
    forward = 2 * 21 * 96 * (24 + 24)
    assert counted.family("matmul").flops == forward + 2 * forward  # backward: twice forward
    assert counted.flops == 3 * forward

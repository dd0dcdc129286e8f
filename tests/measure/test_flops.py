import pytest
import torch

from measure.counting import count_step
from trainpace.measure import flops as flops_module
from trainpace.measure.flops import FAMILIES, StepCounter, op_family, tensor_bytes

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


def test_families_of_common_ops():
    aten = torch.ops.aten
    assert op_family(aten.mm.default) == "matmul"
    assert op_family(aten.convolution_backward.default) == "conv"
    assert op_family(aten._scaled_dot_product_flash_attention_for_cpu.default) == "attention"
    assert op_family(aten.mul.Tensor) == "elementwise"
    assert op_family(aten._foreach_add.List) == "elementwise"
    assert op_family(aten.sum.dim_IntList) == "reduction"
    assert op_family(aten._softmax.default) == "reduction"
    assert op_family(aten.embedding.default) == "other"
    assert set(FAMILIES) == {"matmul", "conv", "attention", "elementwise", "reduction", "other"}


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


def test_a_compiled_module_is_counted_without_a_warning_of_ours():
    torch.manual_seed(0)
    model = torch.compile(torch.nn.Linear(IN, OUT), backend="eager")
    x = torch.randn(B, IN)
    count = count_step(lambda: model(x))  # pytest turns warnings into errors
    assert count.flops == 2 * B * IN * OUT


def test_a_failure_of_the_counter_does_not_break_the_step(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(flops_module._Tally, "record", broken)
    a = torch.ones(4)
    with StepCounter() as counter:
        out = a * 3
    assert torch.equal(out, torch.full((4,), 3.0))
    assert counter.result is None
    assert "RuntimeError: boom" in counter.error


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

    monkeypatch.setattr(flops_module, "_flop_formulas", refuse)
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

import torch

from trainpace.measure.op_costs import FAMILIES, flop_formulas, op_family


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


def test_formulas_are_pytorchs_by_packet_with_cpu_attention_added():
    from torch.utils.flop_counter import flop_registry

    formulas = flop_formulas()
    aten = torch.ops.aten
    assert all(formulas[packet] is formula for packet, formula in flop_registry.items())
    attention = formulas[aten._scaled_dot_product_flash_attention_for_cpu]
    q = torch.empty(2, 4, 8, 16)
    assert attention(q, q, q, 0.0, False, out_val=None) == 2 * 2 * 2 * 4 * 8 * 8 * 16

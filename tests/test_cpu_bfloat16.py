"""The CPU bfloat16 path (``models/cpu_bfloat16.py``): what ``load_model(dtype="bfloat16", backend="torch")`` runs on a
CPU (without a backend named, OpenVINO runs where it has bf16 kernels: ``test_openvino.py``), its products in oneDNN's
bf16 kernels where the CPU has bf16 instructions and in the fp32 kernels elsewhere. Both must agree with
sentence-transformers under the same autocast, leave training and saving untouched, and fall back where they do not
apply; the oneDNN cases run only on a CPU with bf16 instructions."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sentence_transformers import SentenceTransformer
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from embedkit import load_model
from embedkit.data import doc_text
from embedkit.models import cpu_bfloat16
from embedkit.models.cpu_bfloat16 import FP32, ONEDNN, PackedLinear
from embedkit.models.reference import default_model_path

PRODUCTS = [
    pytest.param(ONEDNN, marks=pytest.mark.skipif(not cpu_bfloat16.bf16_instructions(), reason="no bf16 instructions")),
    FP32,
]


@pytest.fixture(scope="module")
def bf16_model():
    return load_model(dtype="bfloat16", device="cpu", backend="torch")


def test_the_default_model_runs_packed_and_agrees_with_sentence_transformers_autocast(bf16_model, scifact):
    """Issue 16's bar: cosine >= 0.9999 to sentence-transformers' own encode under the same bf16 autocast."""
    products = ONEDNN if cpu_bfloat16.bf16_instructions() else FP32
    config = bf16_model.settings["backend_config"]["cpu_bfloat16"]
    attention = cpu_bfloat16.ATTENTION[products]
    assert config == {"products": products, "linears": 37, "fused_gelu": 6, "fused_qkv": 6, "attention": attention}
    # 30 documents spread over the corpus (the peer's autocast is slow on a CPU without bf16 instructions)
    docs = [doc_text(scifact.corpus[i]) for i in range(0, 5183, 173)]
    queries = list(scifact.split_queries("test").values())[:40]
    peer = SentenceTransformer(str(default_model_path()), device="cpu")
    for texts in (docs, queries):
        ours = bf16_model.encode(texts)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            theirs = peer.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=False)
        theirs = torch.stack(theirs).float().numpy()
        cosines = (ours * theirs).sum(axis=1)
        print(f"min cosine to sentence-transformers bf16: {cosines.min():.6f} over {len(texts)} texts")
        assert cosines.min() >= 0.9999
    packed = [m for m in bf16_model.st.modules() if isinstance(m, PackedLinear)]
    packs = [(m.group or m).pack for m in packed]
    assert len(packed) == 37 and all(pack.weight is not None for pack in packs)  # the encode really took the path


def test_float32_and_other_devices_keep_the_plain_network():
    model = load_model(dtype="float32", device="cpu")
    assert "backend_config" not in model.settings
    assert not any(isinstance(m, PackedLinear) for m in model.st.modules())
    assert not cpu_bfloat16.supported("cuda", "bfloat16") and not cpu_bfloat16.supported("cpu", "float16")


def _nearly_equal(ours: torch.Tensor, reference: torch.Tensor, share: float) -> bool:
    """At most ``share`` of the bf16 values differ, each by about one rounding step: the fp32 kernels sum in their
    own order, which moves a value that lies near a rounding boundary (or near zero, after cancellation)."""
    differ = float((ours != reference).float().mean())
    return differ <= share and torch.allclose(ours.float(), reference.float(), rtol=1 / 128, atol=1e-4)


@pytest.mark.parametrize("products", PRODUCTS)
@pytest.mark.parametrize("gelu", [False, True])
def test_packed_linear_is_autocast_linear_in_inference_and_nn_linear_in_training(gelu, products):
    torch.manual_seed(0)
    linear = torch.nn.Linear(96, 160)
    packed = PackedLinear(copy.deepcopy(linear), gelu, products).eval()
    act = F.gelu if gelu else (lambda y: y)
    for rows in (1, 37, 512):
        x = torch.randn(2, rows, 96)
        with torch.inference_mode():
            ours = packed(x)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                reference = act(linear(x))
        assert ours.dtype == torch.bfloat16 and ours.shape == (2, rows, 160)
        if gelu:  # the fused GELU skips autocast's rounding of the product: one bf16 step at most
            assert torch.allclose(ours.float(), reference.float(), rtol=1 / 128, atol=1 / 128)
        elif products == ONEDNN:
            assert torch.equal(ours, reference)
        else:
            assert _nearly_equal(ours, reference, share=0.001)
    x = torch.randn(5, 96, requires_grad=True)
    trained = packed.train()(x)  # training sees nn.Linear's own float32 arithmetic and gradients
    assert trained.dtype == torch.float32 and torch.equal(trained, act(linear(x)))
    trained.sum().backward()
    assert packed.weight.grad is not None
    with torch.no_grad():
        packed.weight.mul_(2)  # an optimizer step changes the weight in place: the packed copy follows
    packed.eval()
    with torch.inference_mode():
        doubled = packed(x.detach())
        with torch.autocast("cpu", dtype=torch.bfloat16):
            expected = act(F.linear(x.detach(), linear.weight * 2, linear.bias))
    assert torch.allclose(doubled.float(), expected.float(), rtol=1 / 64, atol=1 / 64)


@pytest.mark.parametrize("products", PRODUCTS)
def test_query_key_value_run_as_one_product_in_any_order_and_recompute_for_a_new_input(products):
    torch.manual_seed(0)
    linears = [torch.nn.Linear(64, 48) for _ in range(3)]
    names = ("query", "key", "value")
    block = torch.nn.Module()
    for name, linear in zip(names, linears):
        setattr(block, name, copy.deepcopy(linear))
    assert cpu_bfloat16._swap_linears(block.eval(), products) == (3, 0, 1)
    assert all(getattr(block, name).group is block.query.group for name in names)
    x, other = torch.randn(2, 9, 64), torch.randn(2, 9, 64)

    def expected(index: int, inputs: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return linears[index](inputs).float()

    with torch.inference_mode():
        for order in ((0, 1, 2), (2, 0, 1)):
            for index in order:
                ours = getattr(block, names[index])(x)
                assert ours.shape == (2, 9, 48)
                assert torch.allclose(ours.float(), expected(index, x), rtol=1 / 128, atol=1 / 128)
        block.query(x)  # leaves the key's slice of x pending; a key of another input must not get it
        assert torch.allclose(block.key(other).float(), expected(1, other), rtol=1 / 128, atol=1 / 128)
        assert not torch.allclose(expected(1, other), expected(1, x), atol=0.1)


@pytest.mark.parametrize("products", PRODUCTS)
def test_blocked_attention_matches_sdpa_across_blocks_and_padding(products):
    """Blocks of one sequence at 256 tokens; padded keys get no weight; the error stays that of bf16 SDPA."""
    torch.manual_seed(0)
    batch, heads, length, width = 5, 12, 256, 32
    q, k, v = (torch.randn(batch, length, heads, width).bfloat16().transpose(1, 2) for _ in range(3))
    keep = torch.ones(batch, 1, length, length, dtype=torch.bool)
    keep[1, ..., 100:] = False
    keep[3, ..., 7:] = False
    module = torch.nn.Module().eval()
    module.is_causal = False
    assert cpu_bfloat16.SCORES_PER_BLOCK // (heads * length * length) < batch  # more than one block
    inputs = [t.clone() for t in (q, k, v)]
    with torch.inference_mode():
        ours, _ = cpu_bfloat16._blocked_attention(module, q, k, v, keep, scaling=width**-0.5, products=products)
        exact, _ = sdpa_attention_forward(module, q.float(), k.float(), v.float(), keep, scaling=width**-0.5)
        bf16, _ = sdpa_attention_forward(module, q, k, v, keep, scaling=width**-0.5)
    assert all(torch.equal(t, before) for t, before in zip((q, k, v), inputs))  # the caller's tensors untouched
    assert ours.dtype == torch.bfloat16
    error = (ours.float() - exact).norm() / exact.norm()
    bf16_error = (bf16.float() - exact).norm() / exact.norm()
    print(f"relative error: blocked {error:.2e}, bf16 SDPA {bf16_error:.2e}")
    assert error < 3 * bf16_error
    v_padded = v.clone()
    v_padded[3, :, 7:] = 1e4  # values behind the mask must not leak into sequence 3
    with torch.inference_mode():
        leaked, _ = cpu_bfloat16._blocked_attention(
            module, q, k, v_padded, keep, scaling=width**-0.5, products=products
        )
    assert torch.equal(leaked[3], ours[3])


@pytest.mark.parametrize("products", PRODUCTS)
def test_short_blocks_left_padding_and_ragged_masks_match_sdpa(products):
    """Many 40-token sequences share a block: keys stop at the block's longest sequence and the shorter ones are still
    masked. A mask that is not right padding (left padding) keeps every key and the full mask."""
    torch.manual_seed(1)
    batch, heads, length, width = 6, 12, 40, 32
    q, k, v = (torch.randn(batch, length, heads, width).bfloat16().transpose(1, 2) for _ in range(3))
    right = torch.ones(batch, 1, length, length, dtype=torch.bool)
    for row, visible in enumerate((40, 33, 21, 40, 9, 30)):
        right[row, ..., visible:] = False
    right_short = right.clone()
    right_short[:, ..., 35:] = False  # no sequence reaches the last 5 keys: the block's keys stop at 35
    left = right.flip(-1)
    module = torch.nn.Module().eval()
    module.is_causal = False
    assert cpu_bfloat16._key_lengths(right_short, batch) == [35, 33, 21, 35, 9, 30]
    assert cpu_bfloat16._key_lengths(left, batch) is None
    for keep in (right, right_short, left):
        with torch.inference_mode():
            ours, _ = cpu_bfloat16._blocked_attention(module, q, k, v, keep, scaling=width**-0.5, products=products)
            exact, _ = sdpa_attention_forward(module, q.float(), k.float(), v.float(), keep, scaling=width**-0.5)
            bf16, _ = sdpa_attention_forward(module, q, k, v, keep, scaling=width**-0.5)
        error = (ours.float() - exact).norm() / exact.norm()
        assert error < 3 * (bf16.float() - exact).norm() / exact.norm()


@pytest.mark.parametrize("length", [20, 24, 40, 62, 150])
def test_softmax_of_ragged_rows_is_the_fp32_softmax_rounded_once(length):
    """torch's bf16 softmax takes a scalar path for a row's last ``length % 32`` scores and rounds them differently;
    rows whose tail is large go through fp32, so each probability is the exact one rounded once."""
    scores = (torch.randn(64, 12, length, length) * 4).bfloat16()
    rounded_once = torch.softmax(scores.float(), dim=-1).bfloat16()
    assert torch.equal(cpu_bfloat16._softmax(scores), rounded_once)


def test_saving_training_and_copies_see_the_ordinary_model(bf16_model, tmp_path):
    plain = SentenceTransformer(str(default_model_path()), device="cpu")
    ours, theirs = bf16_model.st.state_dict(), plain.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[key], theirs[key]) for key in ours)
    bf16_model.st.save(str(tmp_path / "saved"))
    reloaded = SentenceTransformer(str(tmp_path / "saved"), device="cpu")
    texts = ["bf16 on the CPU", "a second, longer text about protein folding and its kinetics"]
    assert np.allclose(reloaded.encode(texts), plain.encode(texts), atol=1e-6)
    assert reloaded[0].auto_model.config._attn_implementation not in cpu_bfloat16.ATTENTION.values()
    for copied in (copy.deepcopy(bf16_model.st), pickle.loads(pickle.dumps(bf16_model.st))):
        assert np.allclose(copied.encode(texts), bf16_model.st.encode(texts), atol=1e-6)
    with torch.enable_grad():  # a training step on the loaded model: transformers' own modules and gradients
        bf16_model.st.train()
        features = bf16_model.st.preprocess(texts)
        bf16_model.st(features)["sentence_embedding"].sum().backward()
        bf16_model.st.eval()
    packed = [m for name, m in bf16_model.st.named_modules() if isinstance(m, PackedLinear) and ".encoder." in name]
    assert len(packed) == 36 and all(m.weight.grad is not None and m.weight.grad.abs().sum() > 0 for m in packed)
    bf16_model.st.zero_grad(set_to_none=True)

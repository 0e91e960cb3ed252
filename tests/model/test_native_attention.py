"""The compiled causal attention (``kronos_core/model/native_attention.py``): the attention's
numbers but for rounding, where it runs, the layouts the model hands it, and torch's kernel where
it does not run (switched off, inputs it does not take, a machine without it, a failed build)."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

from kronos_core.model import native_attention
from kronos_core.model.layers import causal_attention

needs_kernel = pytest.mark.skipif(
    not native_attention.available(),
    reason=f"the compiled kernel does not run here: {native_attention.why_not()}",
)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The kernel runs with one torch thread (a CPU replica's step loop); restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _qkv(length: int, head_dim: int, seed: int, scale: float = 1.0, b: int = 3, heads: int = 4):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, heads, length, head_dim, generator=g) * scale for _ in range(3)]


def _error(got: torch.Tensor, q, k, v) -> float:
    """Largest absolute difference from the attention computed in float64."""
    truth = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    return float((got.double() - truth).abs().max())


@needs_kernel
@pytest.mark.parametrize("head_dim", [16, 32, 64])
@pytest.mark.parametrize("length", [1, 2, 3, 5, 8, 9, 16, 17, 83, 159, 251, 256, 300, 513])
def test_it_is_the_attention_as_closely_as_torchs_own_kernel(length, head_dim):
    """Against float64: within twice torch's float32 kernel's own error (and 1e-6), at lengths
    around the kernel's 4-row blocks and 8- and 16-key vectors, with scores up to about 10."""
    q, k, v = _qkv(length, head_dim, seed=length, scale=2.0)
    with torch.no_grad():
        got = native_attention.causal_attention(q, k, v)
    assert got is not None and got.shape == q.shape
    torchs = _error(F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v)
    assert _error(got, q, k, v) <= 2 * torchs + 1e-6
    # the first query sees only the first key
    torch.testing.assert_close(got[:, :, 0], v[:, :, 0], rtol=0, atol=1e-6)


@needs_kernel
def test_it_reads_the_models_strided_views_and_writes_the_rows_layout():
    """v as the fused product's view (B, L, 3, H, D) -> (B, H, L, D), q and k contiguous, as
    ``SelfAttention.project`` hands them; the result a (B, H, L, D) view of (B, L, H, D) rows."""
    b, length, heads, d = 2, 37, 4, 32
    qkv = torch.randn(b, length, 3, heads, d)
    q, k = (qkv[:, :, i].transpose(1, 2).contiguous() for i in range(2))
    v = qkv[:, :, 2].transpose(1, 2)
    assert not v.is_contiguous()
    with torch.no_grad():
        got = native_attention.causal_attention(q, k, v)
    assert got is not None and got.transpose(1, 2).is_contiguous()
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(got, expected, rtol=0, atol=2e-6)


@needs_kernel
def test_the_models_causal_attention_runs_it_on_a_cpu_without_gradients(monkeypatch):
    q, k, v = _qkv(64, 16, seed=1)
    calls = []
    real = native_attention.causal_attention

    def counted(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(native_attention, "causal_attention", counted)
    with torch.no_grad():
        got = causal_attention(q, k, v)
    assert calls == [1]
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, is_causal=True),
                               rtol=0, atol=2e-6)
    causal_attention(q.requires_grad_(), k, v)  # training: torch's kernel, not this one
    assert calls == [1]


def test_inputs_it_does_not_take_are_left_to_torch():
    q, k, v = _qkv(10, 32, seed=2)
    with torch.no_grad():
        assert native_attention.causal_attention(q.double(), k.double(), v.double()) is None
        odd = _qkv(10, 48, seed=3)
        assert native_attention.causal_attention(*odd) is None  # head size 48
        assert native_attention.causal_attention(q, k[:, :, :9], v[:, :, :9]) is None
        assert native_attention.causal_attention(q.transpose(-1, -2), k, v) is None
    grad = q.clone().requires_grad_()
    assert native_attention.causal_attention(grad, k, v) is None


def test_with_more_torch_threads_torchs_kernel_spreads_over_them():
    q, k, v = _qkv(30, 32, seed=6)
    torch.set_num_threads(2)
    with torch.no_grad():
        assert native_attention.causal_attention(q, k, v) is None
        got = causal_attention(q, k, v)
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_switched_off_it_does_not_run_and_the_model_still_attends(monkeypatch):
    monkeypatch.setenv(native_attention.ENV, "0")
    q, k, v = _qkv(40, 32, seed=4)
    with torch.no_grad():
        assert native_attention.causal_attention(q, k, v) is None
        got = causal_attention(q, k, v)
    assert native_attention.why_not() == f"{native_attention.ENV}=0"
    assert not native_attention.available()
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, is_causal=True))


@pytest.fixture
def fresh_state(monkeypatch, tmp_path):
    """A process that has not built or loaded the kernel yet, with its cache in ``tmp_path``."""
    monkeypatch.setattr(native_attention, "_state", native_attention._State())
    monkeypatch.setenv(native_attention.CACHE_ENV, str(tmp_path))
    return tmp_path


def test_a_failed_build_is_said_once_and_torch_attends(fresh_state, monkeypatch, caplog):
    monkeypatch.setenv("CXX", "false")  # a compiler that always fails
    monkeypatch.setattr(native_attention, "_cpu_flags", lambda: {"avx2", "fma"})
    monkeypatch.setattr(native_attention.platform, "machine", lambda: "x86_64")
    q, k, v = _qkv(20, 16, seed=5)
    with caplog.at_level(logging.WARNING, logger=native_attention.__name__):
        with torch.no_grad():
            assert native_attention.causal_attention(q, k, v) is None
            assert native_attention.causal_attention(q, k, v) is None
            got = causal_attention(q, k, v)
    warnings = [r for r in caplog.records if "off in this process" in r.getMessage()]
    assert len(warnings) == 1 and "false failed" in warnings[0].getMessage()
    assert "false failed" in native_attention.why_not()
    assert list(fresh_state.iterdir()) == []  # no partial file left behind
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, is_causal=True))


@pytest.mark.parametrize("machine, flags, reason", [
    ("aarch64", {"avx2", "fma"}, "not an x86-64 CPU"),
    ("x86_64", {"sse4_2"}, "the CPU lacks avx2, fma"),
])
def test_a_machine_without_it_is_told_why(fresh_state, monkeypatch, machine, flags, reason):
    monkeypatch.setattr(native_attention.platform, "machine", lambda: machine)
    monkeypatch.setattr(native_attention, "_cpu_flags", lambda: flags)
    assert not native_attention.available()
    assert reason in native_attention.why_not()


@needs_kernel
def test_a_built_kernel_is_kept_and_loaded_again(fresh_state, monkeypatch):
    assert native_attention.available()
    built = list(fresh_state.glob("native_attention-*.so"))
    assert len(built) == 1
    stamp = built[0].stat().st_mtime_ns
    monkeypatch.setattr(native_attention, "_state", native_attention._State())  # a new process

    def no_build(*args, **kwargs):
        raise AssertionError("built again")

    monkeypatch.setattr(native_attention.subprocess, "run", no_build)
    assert native_attention.available(), native_attention.why_not()
    assert built[0].stat().st_mtime_ns == stamp

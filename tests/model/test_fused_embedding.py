"""``Kronos.embed`` on a CPU at inference: one summed table look-up (``FusedInputEmbedding``)
gives the module path's numbers but for rounding, follows weight updates, and stays out of
training."""

from __future__ import annotations

import torch

from kronos_core.model.kronos import TIME_TABLE_SIZES, FusedInputEmbedding


def _inputs(shape: tuple[int, int], seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    s1 = torch.randint(0, 1024, shape, generator=g)
    s2 = torch.randint(0, 1024, shape, generator=g)
    # the columns' order: minute, hour, weekday, day, month
    sizes = TIME_TABLE_SIZES.values()
    stamp = torch.stack([torch.randint(0, n, shape, generator=g) for n in sizes], dim=-1).float()
    return s1, s2, stamp


def _module_path(model, s1, s2, stamp):
    return model.token_drop(model.embedding(s1, s2) + model.time_emb(stamp))


def test_the_fused_look_up_is_the_module_path_but_for_rounding(tiny):
    model = tiny[0].eval()
    for shape in ((3, 40), (17, 1)):
        s1, s2, stamp = _inputs(shape)
        with torch.no_grad():
            got = model.embed(s1, s2, stamp)
            want = _module_path(model, s1, s2, stamp)
        assert got.shape == want.shape == (*shape, model.config.d_model)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_weight_update_remakes_the_table(tiny):
    model = tiny[0].eval()
    s1, s2, stamp = _inputs((2, 9), seed=1)
    with torch.no_grad():
        before = model.embed(s1, s2, stamp)
        model.embedding.fusion_proj.bias.add_(1.0)  # in place: the version counter moves
        hour = model.time_emb.hour_embed
        getattr(hour, "emb", hour).weight.mul_(2.0)  # a learned or a fixed time table
        after = model.embed(s1, s2, stamp)
        want = _module_path(model, s1, s2, stamp)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, want, rtol=1e-5, atol=1e-5)


def test_training_and_gradients_take_the_module_path(tiny, monkeypatch):
    model = tiny[0]
    calls = []
    original = FusedInputEmbedding.__call__
    monkeypatch.setattr(FusedInputEmbedding, "__call__",
                        lambda self, *a: calls.append(1) or original(self, *a))
    s1, s2, stamp = _inputs((2, 5), seed=2)
    model.train()
    with torch.no_grad():
        model.embed(s1, s2, stamp)
    model.eval()
    out = model.embed(s1, s2, stamp)  # gradients on
    assert out.requires_grad and not calls
    with torch.no_grad():
        model.embed(s1, s2, stamp)
    assert calls == [1]


def test_the_table_is_made_without_host_data(tiny):
    """Made on first use, inside a decode step: device ops only (no ``lift_fresh``), its time
    columns ``TIME_COLUMNS``, each part's first row where ``rows`` counts it."""
    from kronos_core.engine.syncs import HostSyncCounter

    model = tiny[0].eval()
    with HostSyncCounter() as counter:
        table, starts, columns = model._fused_embed._make()
    assert counter.total == 0, counter.ops
    assert tuple(columns.tolist()) == FusedInputEmbedding.TIME_COLUMNS
    assert starts.tolist()[:3] == [0, 2**model.config.s1_bits,
                                   2**model.config.s1_bits + 2**model.config.s2_bits]
    assert table.shape[0] == FusedInputEmbedding.rows(model.config) == starts.tolist()[-1] + 1

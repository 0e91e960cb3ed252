"""``kronos train default`` end to end on a tiny synthetic corpus: the built tokenizer, the
predictor, the bundle it writes, the wall time kept across sittings, and --resume."""

from __future__ import annotations

import argparse
import json

import pytest

from kronos_core.loading import PredictorConfig, load_predictor
from kronos_core.train.default import CorpusNotFound, find_corpus, train_default
from tests.train.corpus_helpers import write_synthetic_corpus


def _args(tmp_path, corpus, **more) -> argparse.Namespace:
    return argparse.Namespace(out=str(tmp_path / "out"), work=str(tmp_path / "work"),
                              corpus=str(corpus), lookback=32, horizon=8, max_steps=2, threads=1,
                              seed=None, device="cpu", resume=False, data=None, **more)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("default")
    corpus = write_synthetic_corpus(tmp_path / "corpus")
    info = train_default(_args(tmp_path, corpus))
    return tmp_path, corpus, info


def test_it_writes_a_bundle_the_loader_reads(trained):
    tmp_path, _, info = trained
    out = tmp_path / "out"
    meta = json.loads((out / "kronos.json").read_text())
    assert meta["tokenizer"]["kind"] == "thermometer"
    assert (
        meta["predictor_steps"]["schedule"] == 2 and meta["predictor_steps"]["anneal"] is not None
    )
    assert meta["data"]["corpus"] == "corpus"
    # the command as run, with the folders given (the package names no corpus location of its own)
    assert meta["command"] == (
        f"kronos train default --corpus {tmp_path / 'corpus'} --out {tmp_path / 'out'}"
    )
    assert set(meta["wall_time_s"]) == {"tokenizer", "predictor", "anneal"}
    predictor = load_predictor(PredictorConfig(model=str(out), device="cpu"))
    assert predictor.tokenizer.config.s1_bits + predictor.tokenizer.config.s2_bits == 20


def test_resume_skips_the_finished_phases_and_keeps_adding_wall_time(trained):
    tmp_path, corpus, _ = trained
    before = json.loads((tmp_path / "work" / "wall_time.json").read_text())
    train_default(_resume(tmp_path, corpus))
    after = json.loads((tmp_path / "work" / "wall_time.json").read_text())
    assert after == before  # both phases were finished: nothing ran, nothing was added


def _resume(tmp_path, corpus) -> argparse.Namespace:
    args = _args(tmp_path, corpus)
    args.resume = True
    return args


def test_no_corpus_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("KRONOS_CORPUS", raising=False)
    with pytest.raises(CorpusNotFound, match="--corpus DIR"):
        find_corpus(str(tmp_path / "nowhere"))
    with pytest.raises(CorpusNotFound, match="nothing given"):  # never a folder beside the package
        find_corpus(None)

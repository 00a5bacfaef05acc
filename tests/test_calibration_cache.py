"""Calibration once per embedder: shipped for the default model, kept on disk for any other,
measured again when the model's vectors change or the kept file is damaged."""

from __future__ import annotations

import json
import logging
import stat
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from dhrag_core import HashingEmbedder, HistoryDatabase
from dhrag_core.algorithm import calibration as cal_mod
from dhrag_core.algorithm.calibration import (
    CACHE_ENV,
    calibrate,
    calibration_cache_dir,
    embedder_identity,
    fingerprint_texts,
    measure,
    probe_texts,
)
from dhrag_core.embedding import default_embedder
from dhrag_core.records import Vector

N_PROBES = sum(map(len, probe_texts()))


class Named(HashingEmbedder):
    """A hashing embedder that names a model (so its calibration is kept on disk), counting
    the texts it encodes; ``salt`` changes its vectors, as a retrained model would."""

    def __init__(self, model_name: str = "acme/embed-v1", salt: str = "") -> None:
        super().__init__(64)
        self.model_name = model_name
        self.salt = salt
        self.encoded = 0

    def encode(self, texts: Sequence[str]) -> Vector:
        self.encoded += len(texts)
        return super().encode([self.salt + t for t in texts])


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "calib"
    monkeypatch.setenv(CACHE_ENV, str(folder))
    monkeypatch.setattr(cal_mod, "_MEMO", {})  # a fresh process
    monkeypatch.setattr(cal_mod, "_KEEP_AFTER_S", 0.0)  # keep even a quick one
    return folder


def test_a_named_embedder_is_measured_once_then_read_from_disk(cache: Path) -> None:
    first = Named()
    measured = calibrate(first)
    assert first.encoded == N_PROBES + len(fingerprint_texts())
    files = list(cache.glob("*.json"))
    assert len(files) == 1
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
    again = Named()  # another process, the same model
    kept = calibrate(again)
    assert again.encoded == len(fingerprint_texts()), "the probes are not encoded again"
    np.testing.assert_array_equal(kept.mean, measured.mean)
    np.testing.assert_allclose(measured.mean, measure(Named()).mean, atol=1e-7)


def test_a_changed_model_is_measured_again(cache: Path) -> None:
    calibrate(Named())
    retrained = Named(salt="v2 ")
    cal = calibrate(retrained)
    assert retrained.encoded == N_PROBES + len(fingerprint_texts())
    np.testing.assert_allclose(cal.mean, measure(Named(salt="v2 ")).mean, atol=1e-7)
    assert len(list(cache.glob("*.json"))) == 1  # same identity: the file is replaced
    back = Named(salt="v2 ")
    calibrate(back)
    assert back.encoded == len(fingerprint_texts())


def test_other_probe_texts_are_measured_again(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calibrate(Named())
    monkeypatch.setattr(cal_mod, "_probes_digest", lambda: "other probes")
    emb = Named()
    calibrate(emb)
    assert emb.encoded == N_PROBES + len(fingerprint_texts())


@pytest.mark.parametrize("damage", [
    "", "{not json", "[]", '{"format": 1}', "null",
    "fingerprint-shape", "mean-shape", "mean-norm", "nan",
])
def test_a_damaged_cache_file_is_measured_again_with_a_warning(
    cache: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    good = calibrate(Named())
    path = next(cache.glob("*.json"))
    record = json.loads(path.read_text())
    if damage == "fingerprint-shape":
        record["fingerprint"] = record["fingerprint"][:2]
    elif damage == "mean-shape":
        record["mean"] = record["mean"][:5]
    elif damage == "mean-norm":
        record["mean"] = [1.0] * len(record["mean"])
    elif damage == "nan":
        record["fingerprint"][0][0] = float("nan")
    text = json.dumps(record) if damage in (
        "fingerprint-shape", "mean-shape", "mean-norm", "nan") else damage
    path.write_text(text)
    emb = Named()
    with caplog.at_level(logging.WARNING):
        cal = calibrate(emb)
    assert emb.encoded == N_PROBES + len(fingerprint_texts())
    np.testing.assert_array_equal(cal.mean, good.mean)
    assert "damaged" in caplog.text and str(path) in caplog.text
    assert json.loads(path.read_text())["mean"] == [float(x) for x in good.mean]  # rewritten


def test_an_unwritable_cache_warns_and_measures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(CACHE_ENV, str(blocker / "calib"))
    monkeypatch.setattr(cal_mod, "_KEEP_AFTER_S", 0.0)
    with caplog.at_level(logging.WARNING):
        cal = calibrate(Named())
    np.testing.assert_allclose(cal.mean, measure(Named()).mean, atol=1e-7)
    assert "cannot keep the calibration" in caplog.text


def test_off_keeps_nothing_and_no_name_keeps_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, "off")
    assert calibration_cache_dir() is None
    calibrate(Named())
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "calib"))
    calibrate(HashingEmbedder())  # names no model: cheap to measure, nothing kept
    assert embedder_identity(HashingEmbedder()) is None
    assert not (tmp_path / "calib").exists()


def test_a_quickly_measured_calibration_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "calib"))
    monkeypatch.setattr(cal_mod, "_KEEP_AFTER_S", 3600.0)
    emb = Named()
    calibrate(emb)
    assert emb.encoded == N_PROBES + len(fingerprint_texts())
    assert not (tmp_path / "calib").exists()


def test_the_cache_folder_follows_dhrag_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("DHRAG_CACHE", str(tmp_path))
    assert calibration_cache_dir() == tmp_path / "calibration"
    monkeypatch.delenv("DHRAG_CACHE")
    assert calibration_cache_dir() == Path.home() / ".cache" / "dhrag" / "calibration"


class Wrapper:
    """A framework's model around a dhrag embedder (as DHRAGEmbedding is), and a dhrag
    embedder around that (as LlamaIndexEmbedder is)."""

    def __init__(self, inner: HashingEmbedder, model_name: str = "unknown") -> None:
        self.embed_model = type("Model", (), {"embedder": inner, "model_name": model_name})()
        self.dimension = inner.dimension

    def encode(self, texts: Sequence[str]) -> Vector:
        out: Vector = self.embed_model.embedder.encode(texts)
        return out


def test_identity_names_the_model_and_what_wraps_it() -> None:
    assert embedder_identity(Named("a")) != embedder_identity(Named("b"))
    assert "model_name=a" in str(embedder_identity(Named("a")))
    assert embedder_identity(Named("unknown")) is None  # llama-index's default name
    assert embedder_identity(Wrapper(HashingEmbedder())) is None
    wrapped = embedder_identity(Wrapper(Named("acme/x")))
    assert wrapped is not None and wrapped.endswith("model_name=acme/x")
    local = embedder_identity(default_embedder())
    assert local is not None and "NumpyMiniLMEmbedder:384:" in local


def test_nothing_is_measured_when_a_history_is_built(cache: Path) -> None:
    emb = Named()
    HistoryDatabase(embedder=emb)
    assert emb.encoded == 0 and not cache.exists()


def _shipped() -> dict[str, object]:
    data: dict[str, object] = json.loads(
        (Path(cal_mod.__file__).parents[1] / "data" / cal_mod.SHIPPED).read_text("utf-8"))
    return data


def test_the_shipped_file_is_for_todays_probe_texts() -> None:
    shipped = _shipped()
    assert shipped["probes_sha256"] == cal_mod._probes_digest(), (
        "the probe texts changed: run python scripts/build_calibration.py")
    assert shipped["fingerprint_texts"] == list(fingerprint_texts())


class Counting:
    """Wraps an embedder, counting the texts encoded."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.encoded = 0

    @property
    def dimension(self) -> int:
        return int(self.inner.dimension)  # type: ignore[attr-defined]

    def encode(self, texts: Sequence[str]) -> Vector:
        self.encoded += len(texts)
        out: Vector = self.inner.encode(texts)  # type: ignore[attr-defined]
        return out


@pytest.mark.model
def test_the_default_model_reads_the_shipped_calibration(cache: Path) -> None:
    emb = Counting(default_embedder())
    cal = calibrate(emb)
    assert emb.encoded == len(fingerprint_texts()), "the shipped mean, not 551 probe texts"
    np.testing.assert_array_equal(cal.mean, np.asarray(_shipped()["mean"], dtype=np.float32))
    assert not cache.exists()  # nothing to keep


@pytest.mark.model
def test_the_shipped_mean_is_the_measured_one() -> None:
    measured = measure(default_embedder())
    shipped = np.asarray(_shipped()["mean"])
    np.testing.assert_allclose(measured.mean, shipped, atol=1e-6)


@pytest.mark.model
def test_sentence_transformers_minilm_also_reads_the_shipped_calibration(cache: Path) -> None:
    pytest.importorskip("sentence_transformers",
                        reason="needs the dhrag[sentence-transformers] extra (torch)")
    from dhrag_core import MiniLMEmbedder

    emb = Counting(MiniLMEmbedder())
    calibrate(emb)
    assert emb.encoded == len(fingerprint_texts())

"""Model files: identical scores after reload; clear errors for other versions and corruption."""

from __future__ import annotations

import re

import numpy as np
import orjson
import pytest

from trajforge.errors import UserError
from trajforge.monitor import LearnedConfig, LearnedDetector, load_detector, save_detector
from trajforge.monitor.modelfile import MAGIC, read_header


@pytest.fixture(scope="module")
def trained(tau_runs) -> LearnedDetector:
    detector = LearnedDetector(LearnedConfig(inner_folds=3))
    detector.fit(tau_runs)
    return detector


def test_saved_model_scores_identically_after_reload(trained, tau_runs, tmp_path):
    path = tmp_path / "tau.model"
    save_detector(trained, path, {"runs": len(tau_runs)})
    loaded = load_detector(path)
    for run in tau_runs[:25]:
        np.testing.assert_array_equal(loaded.risk(run.features), trained.risk(run.features))
    assert loaded.thresholds == trained.thresholds
    assert read_header(path)["runs"] == len(tau_runs)
    assert trained.kind in ("gbm", "logistic")


def test_model_from_another_feature_version_is_refused(trained, tmp_path):
    path = tmp_path / "old.model"
    save_detector(trained, path)
    data = path.read_bytes()
    line, _, payload = data[len(MAGIC) :].partition(b"\n")
    header = orjson.loads(line) | {"feature_version": "prefix-v0"}
    path.write_bytes(MAGIC + orjson.dumps(header) + b"\n" + payload)
    with pytest.raises(UserError, match=r"feature set 'prefix-v0'.*retrain"):
        load_detector(path)


@pytest.mark.parametrize(
    "content",
    [b"", b"not a model", MAGIC + b"{broken\n", MAGIC + b'{"feature_version": 1}'],
)
def test_corrupt_or_foreign_files_are_clear_errors(tmp_path, content):
    path = tmp_path / "bad.model"
    path.write_bytes(content)
    with pytest.raises(UserError, match=re.escape(str(path))):
        load_detector(path)


def test_truncated_pickle_is_a_clear_error(trained, tmp_path):
    path = tmp_path / "cut.model"
    save_detector(trained, path)
    path.write_bytes(path.read_bytes()[:-200])
    with pytest.raises(UserError, match="corrupt"):
        load_detector(path)


def test_missing_model_file_names_the_fix(tmp_path):
    with pytest.raises(UserError, match="monitor train"):
        load_detector(tmp_path / "none.model")

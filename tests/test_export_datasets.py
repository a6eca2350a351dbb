"""The native JSONL export loads with Hugging Face `datasets` and imports back exactly.

Runs of different formats disagree on the shape of their free-form fields (`task.gold` is
an object of actions for tau, text for Who&When) and on which typed fields are null; an
export line carries every field but `id` and `format_version` as JSON text, so `datasets`
infers one schema for the whole file. A small `chunksize` makes `datasets` read the file in
many blocks, each inferred on its own, as it does for big files.
"""

from __future__ import annotations

from pathlib import Path

import datasets
import orjson
import pytest

from trajforge.demo import sample_dir
from trajforge.export.registry import export
from trajforge.importers.pipeline import import_paths
from trajforge.store import Store

REAL = (
    "who-and-when",
    "agentrx/tau-retail/tau_dataset_full.json",
    "tau2-bench/toolorchestra_gpt-5/toolorchestra_retail_gpt-5_1trial.json",
)


@pytest.fixture(scope="module")
def mixed_export(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    folder = tmp_path_factory.mktemp("hf")
    store = Store(folder / "mixed.db")
    paths = [str(shared_data / p) for p in REAL]
    paths.append(str(sample_dir() / "swe-bench-verified"))
    report = import_paths(store, paths)
    assert report.added > 300 and not report.failed
    out = folder / "mixed.jsonl"
    assert export("jsonl", store, out) == report.added
    return store, out


@pytest.mark.parametrize("chunksize", [None, 64 << 10])
def test_a_mixed_real_export_loads_with_datasets(mixed_export: tuple, chunksize, tmp_path) -> None:
    store, out = mixed_export
    options = {} if chunksize is None else {"chunksize": chunksize}
    loaded = datasets.load_dataset(
        "json", data_files=str(out), split="train", cache_dir=str(tmp_path), **options
    )
    assert len(loaded) == store.count()
    formats = {orjson.loads(source)["format"] for source in loaded["source"]}
    assert {"who-and-when", "tau2-bench", "mini-swe-agent"} <= formats, formats
    stored = {orjson.loads(doc)["id"]: orjson.loads(doc) for doc in store.documents()}
    for row in loaded.select(range(0, len(loaded), 50)):
        document = stored[row["id"]]
        assert orjson.loads(row["messages"]) == document["messages"]
        assert orjson.loads(row["metadata"]) == document["metadata"]


def test_the_export_imports_back_byte_for_byte(mixed_export: tuple, tmp_path: Path) -> None:
    store, out = mixed_export
    with Store(tmp_path / "again.db") as again:
        report = import_paths(again, [str(out)])
        assert report.files[0].format == "trajforge" and report.added == store.count()
        assert sorted(again.documents()) == sorted(store.documents())

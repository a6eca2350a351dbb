"""Arrow columns built over their buffers: the same arrays `pyarrow.array` makes, without
the pandas import it brings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from trajforge.export.arrow_columns import column_array

COLUMNS = [
    (pa.int64(), [3, None, -7, 0, 2**40, None, 1, 5, 9]),
    (pa.float64(), [0.5, None, -1.25, 3, 1e300]),
    (pa.bool_(), [1, 0, None, 1, 1, 0, 0, 1, 1, None, 0]),
    (pa.string(), ["run", None, "", "Ünïcode ✓", "x" * 1000]),
    (pa.large_string(), ["a\nb", None, "tool call"]),
]


@pytest.mark.parametrize(("kind", "values"), COLUMNS, ids=str)
def test_a_column_is_the_array_pyarrow_makes(kind: pa.DataType, values: list) -> None:
    as_python = [bool(v) if kind == pa.bool_() and v is not None else v for v in values]
    expected = pa.array(as_python, type=kind)
    built = column_array(values, kind)
    built.validate(full=True)
    assert built.equals(expected) and built.null_count == values.count(None)


@pytest.mark.parametrize(("kind", "values"), COLUMNS, ids=str)
def test_columns_with_nothing_missing_or_nothing_at_all(kind: pa.DataType, values: list) -> None:
    present = [v for v in values if v is not None]
    assert column_array(present, kind).null_count == 0
    assert len(column_array([], kind)) == 0


def test_documents_as_utf8_bytes_are_text() -> None:
    documents = [b'{"id": "a"}', '{"id": "\u00e9"}'.encode()]
    assert column_array(documents, pa.string()).to_pylist() == ['{"id": "a"}', '{"id": "é"}']


def test_a_parquet_export_does_not_load_pandas(tmp_path: Path, shared_data: Path) -> None:
    source = shared_data / "who-and-when" / "Hand-Crafted-sample"
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from trajforge.importers import import_paths\n"
        "from trajforge.export.tables import write_parquet\n"
        "from trajforge.store import Store, TrajectoryFilter\n"
        "with Store(':memory:') as store:\n"
        f"    import_paths(store, [{str(source)!r}])\n"
        f"    out = Path({str(tmp_path / 'o.parquet')!r})\n"
        "    print(write_parquet(store, TrajectoryFilter(), out))\n"
        "print('pandas' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["3", "False"]

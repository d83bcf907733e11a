"""The 277 ngraph matrices (HB and LPnetlib, shared/matrices/ngraph) read as INDEX.csv says."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from click.testing import CliRunner

from cognate.cli import main


def test_data_info_matches_the_index_on_every_ngraph_matrix(shared: Path):
    folder = shared / "matrices" / "ngraph"
    with open(folder / "INDEX.csv", newline="") as stream:
        index = {row["name"]: row for row in csv.DictReader(stream)}
    assert len(index) == 277
    result = CliRunner().invoke(main, ["data", "info", "--json", str(folder)])
    assert result.exit_code == 0, result.output
    records = {record["name"]: record for record in json.loads(result.output)}
    assert set(records) == set(index)
    for name, row in index.items():
        got = records[name]
        expected = (int(row["rows"]), int(row["cols"]), int(row["nnz_expanded"]))
        assert (got["rows"], got["cols"], got["nnz"]) == expected, name
        assert got["symmetry"] == row["symmetric"], name
        field = "real" if row["field"] == "real" else "pattern"
        assert got["field"] == field, name

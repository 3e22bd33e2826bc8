"""Tabular columns as samples hold them (reader/plan/_rows.py): what ``torch.tensor`` makes of the Python value of
each row, LeRobot's ``hf_transform_to_torch``, for every numeric type and shape LeRobot's writer stores.

The expected values here are that rule itself (``torch.tensor(column.to_pylist()[row])``), row by row; the same
columns written by the real LeRobot and read back against ``LeRobotDataset``:
tests/integration/test_lerobot_dtypes.py.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from roboreel.reader.plan._rows import column_array

ROWS = 7


def _fixed(values: np.ndarray, typ: pa.DataType) -> pa.Array:
    """A fixed-size list column ([n] features: HF ``Sequence(length=n)``)."""
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1), type=typ), values.shape[1])


def _nested(values: np.ndarray, typ: pa.DataType) -> pa.Array:
    """A list-of-lists column of fixed shape (2-D to 5-D features: HF ``Array2D`` ... ``Array5D`` storage)."""
    arr = pa.array(values.reshape(-1), type=typ)
    for size in reversed(values.shape[1:]):
        arr = pa.ListArray.from_arrays(pa.array(np.arange(0, len(arr) + 1, size, dtype=np.int32)), arr)
    return arr


def _columns() -> dict[str, pa.Array]:
    rng = np.random.default_rng(0)
    f64 = rng.normal(size=(ROWS, 3)) * 10.0 ** rng.integers(-300, 300, size=(ROWS, 3))  # float32's range and past it
    f64[0] = [1 + 2**-40, 1e-300, -0.0]  # rounds to 1, underflows to 0, keeps its sign
    return {
        "float64[3]": _fixed(f64, pa.float64()),
        "float64 scalar": pa.array(f64[:, 0]),
        "float32 scalar": pa.array(np.float32(np.arange(ROWS) / 3)),
        "float16[2]": _fixed(rng.normal(size=(ROWS, 2)).astype(np.float16), pa.float16()),
        "int32[4]": _fixed(np.array([[k, -k, 2**31 - 1, -(2**31)] for k in range(ROWS)], np.int32), pa.int32()),
        "int16[2]": _fixed(rng.integers(-(2**15), 2**15, size=(ROWS, 2), dtype=np.int16), pa.int16()),
        "uint8[3]": _fixed(rng.integers(0, 256, size=(ROWS, 3), dtype=np.uint8), pa.uint8()),
        "int64[2]": _fixed(np.array([[2**53 + k, -(2**62) + k] for k in range(ROWS)], np.int64), pa.int64()),
        "int64 scalar": pa.array(np.arange(ROWS, dtype=np.int64) + 2**40),
        "bool[2]": _fixed(rng.integers(0, 2, size=(ROWS, 2)).astype(bool), pa.bool_()),
        "bool scalar": pa.array(rng.integers(0, 2, size=ROWS).astype(bool)),
        "float32[2,3]": _nested(rng.normal(size=(ROWS, 2, 3)).astype(np.float32), pa.float32()),
        "float64[2,2,2]": _nested(rng.normal(size=(ROWS, 2, 2, 2)), pa.float64()),
        "int32[3,2]": _nested(rng.integers(-9, 9, size=(ROWS, 3, 2), dtype=np.int32), pa.int32()),
    }


@pytest.mark.parametrize("chunked", [False, True])
def test_every_row_is_torch_tensor_of_its_python_value(chunked):
    for name, arr in _columns().items():
        col = pa.chunked_array([arr.slice(0, 3), arr.slice(3)]) if chunked else arr
        got = column_array(col, ROWS, name)
        assert isinstance(got, np.ndarray), name
        for row, value in enumerate(arr.to_pylist()):
            want = torch.tensor(value)  # LeRobot's hf_transform_to_torch
            mine = torch.from_numpy(got[row:row + 1].reshape(got.shape[1:]))  # a sample's value (0-dim: a scalar)
            assert mine.dtype == want.dtype and mine.shape == want.shape, (name, row, mine, want)
            assert torch.equal(mine, want), (name, row, mine, want)
            # exact to the bit, signed zeros included (torch.equal calls -0.0 equal to 0.0)
            assert mine.numpy().tobytes() == want.numpy().tobytes(), (name, row)


def test_a_window_stacks_the_rows_as_lerobot_does():
    arr = _columns()["float32[2,3]"]
    got = torch.from_numpy(column_array(arr, ROWS)[[0, 0, 1, 2]])  # a clamped window of 4 rows
    want = torch.stack([torch.tensor(arr.to_pylist()[i]) for i in (0, 0, 1, 2)])
    assert got.shape == (4, 2, 3) and torch.equal(got, want)


def test_ragged_or_null_lists_stay_python_values():
    """No tensor holds lists of different lengths: those rows stay the Python values HF datasets gives."""
    ragged = pa.array([[1.0, 2.0], [3.0], [4.0, 5.0]], type=pa.list_(pa.float64()))
    assert column_array(ragged, 3) == [[1.0, 2.0], [3.0], [4.0, 5.0]]
    holed = pa.array([[1, 2], None, [3, 4]], type=pa.list_(pa.int32(), 2))
    assert column_array(holed, 3) == [[1, 2], None, [3, 4]]


def test_writable_and_not_arrow_memory():
    """torch refuses read-only memory: an Arrow buffer seen zero-copy is copied."""
    for name, arr in _columns().items():
        got = column_array(arr, ROWS, name)
        assert got.flags.writeable, name
        torch.from_numpy(got)  # no warning, no error

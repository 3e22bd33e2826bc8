"""Image features (``dtype: "image"``) in a data file: every row holds its embedded image, and the images are the
shape info.json declares. Checked per row group, so a source (or a compiled data/) with images in parquet
validates clean when it is sound and names the row group and episodes when it is not.

Only the first image of each row group is decoded (its header would do; Pillow reads the size without the
pixels): the null check covers every row, the shape check catches a feature whose images are not what
info.json says, without decoding a whole dataset.
"""

from __future__ import annotations

import io

import pyarrow.parquet as pq
from PIL import Image, UnidentifiedImageError

from roboreel.formats import lerobot_v3 as v3
from roboreel.formats.table_features import image_bytes, image_keys, image_problem
from roboreel.validate.report import Report


def _declared(shape: list[int]) -> set[tuple[int, int, int]]:
    """(H, W, C) readings of a feature's shape: LeRobot writes [H, W, C]; [C, H, W] is accepted too."""
    if len(shape) != 3:
        return set()
    h, w, c = shape
    return {(h, w, c), (shape[1], shape[2], shape[0])}


def check_image_rowgroup(pf: pq.ParquetFile, rg: int, info: v3.SourceInfo, report: Report, *, file: str,
                         episodes: list[int]) -> None:
    """Report ``image-feature-invalid`` for image columns of row group ``rg`` that cannot be read exactly."""
    keys = [k for k in image_keys(info.features) if k in pf.schema_arrow.names]
    if not keys:
        return
    table = pf.read_row_group(rg, columns=keys, use_threads=False)
    for key in keys:
        where = {"file": file, "row_group": rg, "episodes": episodes or None}
        problem = image_problem(table.column(key))
        if problem:
            report.error("image-feature-invalid", f"{key}: {problem}", **where)
            continue
        if table.num_rows == 0:
            continue
        data = image_bytes(table.column(key).slice(0, 1))[0]
        try:
            with Image.open(io.BytesIO(data)) as img:
                w, h = img.size
                c = len(img.getbands())
        except (UnidentifiedImageError, OSError, ValueError) as e:
            report.error("image-feature-invalid", f"{key}: the first image cannot be decoded: {e}", **where)
            continue
        want = _declared(list(info.features[key].get("shape") or []))
        if want and (h, w, c) not in want:
            report.error("image-feature-invalid", f"{key}: images are {h}x{w} with {c} channels, info.json "
                         f"declares shape {info.features[key].get('shape')}", **where)

"""Which of a dataset's clips decode where: one real clip per camera, on the CPU and on the GPU.

PATH is a compiled roboreel dataset (``roboreel.json``: clips inside tar shards) or a LeRobot v3 source
(``meta/info.json``: shared mp4s). Metadata says what the clips should be; decoding one per camera says what
this machine does with them, which is what a training job will meet.
"""

from __future__ import annotations

import logging
import posixpath
import tarfile
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import fsspec

from roboreel.doctor.codecs import DecodeOutcome, try_decode
from roboreel.doctor.env import CudaInfo
from roboreel.doctor.nvdec import nvdec_support
from roboreel.formats import lerobot_v3 as v3
from roboreel.formats.errors import CompiledFormatError, SourceError
from roboreel.formats.manifest import MANIFEST_NAME, load_manifest, transform_summary, unfinished_compile
from roboreel.formats.shard import clip_member

logger = logging.getLogger(__name__)

GpuStatus = Literal["nvdec", "cpu-fallback", "cuda", "failed", "no-cuda"]


class ClipToCheck(NamedTuple):
    """One camera's clip to decode, with what the dataset's metadata says of it (None: not said), so the doctor
    can name where the two disagree."""

    key: str
    codec: str | None
    width: int | None
    height: int | None
    where: str  # the clip's place in the dataset, for the report
    source: Any  # what the decoder opens: a path, bytes or an fsspec file object


@dataclass
class CameraCheck:
    """One camera: what metadata says, and what decoding one of its clips did on each device."""

    key: str
    codec: str | None
    width: int | None
    height: int | None
    clip: str  # where the decoded clip came from
    cpu: DecodeOutcome
    gpu: DecodeOutcome | None
    gpu_status: GpuStatus
    gpu_reason: str
    nvdec_ok: bool  # the static table's prediction (roboreel.doctor.nvdec)
    nvdec_reason: str
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key, "codec": self.codec, "width": self.width, "height": self.height, "clip": self.clip,
            "cpu": self.cpu.to_dict(), "gpu": self.gpu.to_dict() if self.gpu else None,
            "gpu_status": self.gpu_status, "gpu_reason": self.gpu_reason,
            "nvdec": {"ok": self.nvdec_ok, "reason": self.nvdec_reason}, "notes": self.notes,
        }


@dataclass
class DatasetCheck:
    path: str
    kind: Literal["compiled", "source"]
    cameras: list[CameraCheck]
    transform: str | None = None  # a compile's resize / frame-rate change (formats.manifest.transform_summary)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "cameras": [c.to_dict() for c in self.cameras],
                "transform": self.transform}


def _compiled_clips(path: str) -> list[ClipToCheck]:
    """(camera, codec, width, height, where, clip bytes) from the first record of the first shard."""
    manifest = load_manifest(path)
    if not manifest.cameras:
        return []
    ix = manifest.index
    if not ix.num_shards or not ix.shards["episodes"][0]:
        raise CompiledFormatError("manifest lists no shard with episodes", file=MANIFEST_NAME)
    shard_path, episode = ix.shards["path"][0], int(ix.shard_episodes(0)[0])  # the first record of shard 0
    wanted = {clip_member(episode, c.key): c for c in manifest.cameras}
    found: dict[str, bytes] = {}
    fs, root = fsspec.core.url_to_fs(path)
    shard_file = posixpath.join(root.rstrip("/"), shard_path)
    try:
        with fs.open(shard_file, "rb") as f, tarfile.open(fileobj=f, mode="r|") as tar:
            for member in tar:  # streaming: the first record sits at the start of the shard
                name = member.name.rsplit("/", 1)[-1]
                if name in wanted:
                    found[name] = tar.extractfile(member).read()
                    if len(found) == len(wanted):
                        break
    except (OSError, tarfile.TarError) as e:
        raise CompiledFormatError(f"unreadable shard: {e}", file=shard_path, episode=episode) from e
    missing = sorted(set(wanted) - set(found))
    if missing:
        raise CompiledFormatError(f"shard lacks clip members {missing}", file=shard_path, episode=episode)
    return [ClipToCheck(c.key, c.codec, c.width, c.height, f"{shard_path}:{name}", found[name])
            for name, c in wanted.items()]


def _source_clips(path: str) -> list[ClipToCheck]:
    """(camera, codec, width, height, where, decoder source) for the first episode's mp4 of each camera."""
    src = v3.LeRobotSource(path)
    cams = src.camera_keys
    if not cams:
        return []
    first = src.episodes[0]
    local = "file" in (src.fs.protocol if isinstance(src.fs.protocol, tuple) else (src.fs.protocol,))
    out = []
    for cam in cams:
        feat = src.info.features[cam]
        info = feat.get("info") or {}
        shape = feat.get("shape") or []
        names = feat.get("names") or []
        h, w = info.get("video.height"), info.get("video.width")
        if (h is None or w is None) and len(shape) == 3 and "height" in names and "width" in names:
            h, w = shape[names.index("height")], shape[names.index("width")]
        rel = first.videos[cam].path
        if not src.exists(rel):
            raise SourceError("missing video file", file=rel, episode=first.index)
        # Local files go to torchcodec as paths; remote ones as fsspec file objects (read on demand).
        out.append(ClipToCheck(cam, info.get("video.codec"), w, h, rel, src.path(rel) if local else src.open(rel)))
    return out


def check_dataset(path: str, *, cuda: CudaInfo, gpu_device: str | None, gpu_requested: bool) -> DatasetCheck:
    """Decode one clip per camera of ``path`` on the CPU and, when ``gpu_device`` is set, on that GPU.

    ``gpu_requested``: the user asked about a CUDA device, so advice on GPU decoding is relevant.

    Raises SourceError / CompiledFormatError (roboreel.formats) when PATH is not a readable dataset.
    """
    fs, root = fsspec.core.url_to_fs(path)
    root = root.rstrip("/")
    unfinished_compile(lambda rel: fs.exists(posixpath.join(root, rel)),
                       lambda rel: fs.isdir(posixpath.join(root, rel)), path)
    if fs.exists(posixpath.join(root, MANIFEST_NAME)):
        kind: Literal["compiled", "source"] = "compiled"
        clips = _compiled_clips(path)
        seek_mode: Literal["exact", "approximate"] = "exact"  # a clip is one episode: small
    elif fs.exists(posixpath.join(root, v3.INFO_PATH)):
        kind, clips, seek_mode = "source", _source_clips(path), "approximate"  # shared mp4s can be large
    elif not fs.exists(root):  # asked last: a server without directory listings has no root to ask about
        raise SourceError("no such dataset directory", file=path)
    else:
        raise SourceError(f"not a compiled roboreel dataset (no {MANIFEST_NAME}) nor a LeRobot v3 source "
                          f"(no {v3.INFO_PATH})", file=path)
    cameras = []
    for clip in clips:
        cpu = try_decode(_reopen(clip.source), device="cpu", seek_mode=seek_mode)
        gpu = try_decode(_reopen(clip.source), device=gpu_device, seek_mode=seek_mode) if gpu_device else None
        cameras.append(_judge(clip, cpu, gpu, cuda, advise=gpu_requested))
    transform = transform_summary(load_manifest(path).settings) if kind == "compiled" else None
    return DatasetCheck(path=path, kind=kind, cameras=cameras, transform=transform)


def _reopen(source: Any) -> Any:
    """Paths and bytes can be read twice; a file object is rewound first."""
    if hasattr(source, "seek"):
        source.seek(0)
    return source


def _judge(clip: ClipToCheck, cpu: DecodeOutcome, gpu: DecodeOutcome | None, cuda: CudaInfo, *,
           advise: bool) -> CameraCheck:
    """Name the GPU outcome and explain it with the NVDEC table; note metadata that the clip contradicts."""
    key, codec, w, h, where = clip.key, clip.codec, clip.width, clip.height, clip.where
    notes = []
    real_codec = cpu.codec or (gpu.codec if gpu else None) or codec
    real_w = cpu.width or (gpu.width if gpu else None) or w
    real_h = cpu.height or (gpu.height if gpu else None) or h
    if cpu.ok and codec and cpu.codec and codec != cpu.codec:
        notes.append(f"metadata says codec {codec!r}, the clip is {cpu.codec!r}")
    if cpu.ok and w and h and (cpu.width, cpu.height) != (w, h):
        notes.append(f"metadata says {w}x{h}, the clip is {cpu.width}x{cpu.height}")
    if real_codec and real_w and real_h:
        nv_ok, nv_reason = nvdec_support(real_codec, real_h, real_w, capability=cuda.capability)
    else:
        nv_ok, nv_reason = False, "codec or size unknown"
    if gpu is None:
        status: GpuStatus = "no-cuda"
        reason = f"no CUDA: {cuda.reason}" if not cuda.available else "not tried"
    elif not gpu.ok:
        status, reason = "failed", gpu.error or "failed"
    elif gpu.engine == "cpu-fallback":
        status = "cpu-fallback"
        reason = (nv_reason if not nv_ok else gpu.fallback or "torchcodec fell back to CPU decode")
    elif gpu.engine == "nvdec":
        status, reason = "nvdec", "decoded by NVDEC"
        if not nv_ok:
            notes.append(f"roboreel's NVDEC table predicted CPU fallback ({nv_reason}) but NVDEC decoded it: "
                         "please report so the table can be corrected")
    else:
        status, reason = "cuda", "decoded with device=cuda (this torchcodec does not say whether NVDEC was used)"
    if advise and real_codec != "hevc" and not nv_ok and status in ("cpu-fallback", "no-cuda") and real_w and real_h:
        hevc_ok, hevc_reason = nvdec_support("hevc", real_h, real_w, capability=cuda.capability)
        notes.append("compiled to HEVC (`roboreel compile`) it would decode on NVDEC" if hevc_ok else
                     f"compiling to HEVC would not move it to NVDEC either: {hevc_reason}")
    return CameraCheck(key=key, codec=real_codec, width=real_w, height=real_h, clip=where, cpu=cpu, gpu=gpu,
                       gpu_status=status, gpu_reason=reason, nvdec_ok=nv_ok, nvdec_reason=nv_reason, notes=notes)

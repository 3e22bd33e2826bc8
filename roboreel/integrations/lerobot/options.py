"""roboreel's own ``roboreel lerobot-train`` options (``--roboreel.NAME=VALUE``): taken out of argv before LeRobot
parses it, since LeRobot refuses options it does not know. Kept free of torch so the CLI stays light."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

LOADERS = ("stage", "dataloader")
PREFIX = "--roboreel."


@dataclass(frozen=True)
class LoaderOptions:
    """roboreel's own ``lerobot-train`` flags (``--roboreel.NAME=VALUE``), taken out of argv before LeRobot
    parses it (LeRobot refuses options it does not know).

    Args:
        loader: ``stage`` (``roboreel.loader``: decode threads in the training process) or ``dataloader``
            (the DataLoader lerobot-train builds; its workers decode).
        decode_threads: the stage's decode threads (default: the cores this process may use).
        weights: a mixture's draw probabilities, one per compiled root of ``--dataset.root=a,b``
            (``--roboreel.weights=0.7,0.3``), or "frames" (in proportion to each root's frames); None: every frame
            of every root once per epoch (reader/mixture/_dataset.py).
        mixture: a JSON or YAML file (``--roboreel.remap=FILE``) saying how roots with other keys mix
            (docs/mixtures.md): a list with one ``{old key: new key or null}`` per root, or a mapping with
            ``remap`` (that list), ``pad`` ("max"), ``normalize`` (``{key: mean_std | min_max}``), ``weights``.
        pad: "max" (``--roboreel.pad=max``): 1-D features whose sizes differ between roots are zero-padded.
        mix_workers: ``--roboreel.mix_workers=true``: the stage takes ``batch_size / num_workers`` samples of each
            worker into every batch (``roboreel.loader``'s ``mix_workers``; about uniform sampling's episodes per
            batch instead of one worker's). false: the batches of the DataLoader lerobot-train made, which
            ``--roboreel.loader=dataloader`` gives too, so a checkpoint of either resumes the other.
    """

    loader: Literal["stage", "dataloader"] = "stage"
    decode_threads: int | None = None
    weights: tuple[float, ...] | str | None = None
    mixture: str | None = None
    pad: str | None = None
    mix_workers: bool = False

    def __post_init__(self) -> None:
        if self.loader not in LOADERS:
            raise ValueError(f"--roboreel.loader={self.loader!r}: expected one of {list(LOADERS)}")
        if self.decode_threads is not None and (isinstance(self.decode_threads, bool)
                                                or not isinstance(self.decode_threads, int)
                                                or self.decode_threads < 1):
            raise ValueError(f"--roboreel.decode_threads must be an integer >= 1, got {self.decode_threads!r}")
        if self.pad not in (None, "max"):
            raise ValueError(f"--roboreel.pad={self.pad!r}: expected max")

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> tuple[LoaderOptions, list[str]]:
        """(the options, argv without them). Accepts ``--roboreel.NAME=VALUE`` and ``--roboreel.NAME VALUE``."""
        values: dict[str, str] = {}
        rest: list[str] = []
        args = list(argv)
        i = 0
        while i < len(args):
            token = args[i]
            i += 1
            if not token.startswith(PREFIX):
                rest.append(token)
                continue
            name, eq, value = token[len(PREFIX):].partition("=")
            if not eq:
                if i >= len(args):
                    raise ValueError(f"{token} needs a value ({token}=VALUE)")
                value, i = args[i], i + 1
            if name not in ("loader", "decode_threads", "weights", "remap", "pad", "mix_workers"):
                raise ValueError(f"unknown option {PREFIX}{name}: roboreel's lerobot-train options are "
                                 f"{PREFIX}loader={'|'.join(LOADERS)}, {PREFIX}decode_threads=N, "
                                 f"{PREFIX}weights=W1,W2,...|frames, {PREFIX}remap=FILE.json|yaml, "
                                 f"{PREFIX}pad=max and {PREFIX}mix_workers=true|false")
            values[name] = value
        threads = values.get("decode_threads")
        if threads is not None:
            try:
                threads_value: int | None = int(threads)
            except ValueError:
                raise ValueError(f"--roboreel.decode_threads must be an integer >= 1, got {threads!r}") from None
        else:
            threads_value = None
        weights: tuple[float, ...] | str | None = None
        if values.get("weights") == "frames":
            weights = "frames"
        elif "weights" in values:
            try:
                weights = tuple(float(w) for w in values["weights"].strip("[]").split(","))
            except ValueError:
                raise ValueError(f"--roboreel.weights must be numbers separated by commas (one per root of "
                                 f"--dataset.root=a,b), got {values['weights']!r}") from None
        mix = values.get("mix_workers", "false").lower()
        if mix not in ("true", "false"):
            raise ValueError(f"--roboreel.mix_workers must be true or false, got {values['mix_workers']!r}")
        return cls(loader=values.get("loader", "stage"), decode_threads=threads_value,  # type: ignore[arg-type]
                   weights=weights, mixture=values.get("remap"), pad=values.get("pad"),
                   mix_workers=mix == "true"), rest


def read_mixture_file(path: str) -> dict[str, Any]:
    """``--roboreel.remap=FILE``: ``{"remap": [...], "pad": ..., "normalize": ..., "weights": ...}`` (the keys
    given), from JSON, or YAML (``.yaml`` / ``.yml``, PyYAML: LeRobot's own dependency). A bare list is the remap."""
    import json
    from pathlib import Path

    text = Path(path).read_text()
    if path.endswith((".yaml", ".yml")):
        import yaml

        data = yaml.safe_load(text)
    else:
        data = json.loads(text)
    if isinstance(data, list):
        data = {"remap": data}
    allowed = ("remap", "pad", "normalize", "weights")
    if not isinstance(data, dict) or any(k not in allowed for k in data):
        raise ValueError(f"--roboreel.remap={path}: expected a list (one {{old key: new key or null}} per "
                         f"--dataset.root) or a mapping with keys {list(allowed)}, got {str(data)[:200]}")
    return data

"""roboreel's own ``roboreel lerobot-train`` options (``--roboreel.NAME=VALUE``): taken out of argv before LeRobot
parses it, since LeRobot refuses options it does not know. Kept free of torch so the CLI stays light."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

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
    """

    loader: Literal["stage", "dataloader"] = "stage"
    decode_threads: int | None = None

    def __post_init__(self) -> None:
        if self.loader not in LOADERS:
            raise ValueError(f"--roboreel.loader={self.loader!r}: expected one of {list(LOADERS)}")
        if self.decode_threads is not None and (isinstance(self.decode_threads, bool)
                                                or not isinstance(self.decode_threads, int)
                                                or self.decode_threads < 1):
            raise ValueError(f"--roboreel.decode_threads must be an integer >= 1, got {self.decode_threads!r}")

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
            if name not in ("loader", "decode_threads"):
                raise ValueError(f"unknown option {PREFIX}{name}: roboreel's lerobot-train options are "
                                 f"{PREFIX}loader={'|'.join(LOADERS)} and {PREFIX}decode_threads=N")
            values[name] = value
        threads = values.get("decode_threads")
        if threads is not None:
            try:
                threads_value: int | None = int(threads)
            except ValueError:
                raise ValueError(f"--roboreel.decode_threads must be an integer >= 1, got {threads!r}") from None
        else:
            threads_value = None
        return cls(loader=values.get("loader", "stage"), decode_threads=threads_value), rest  # type: ignore[arg-type]

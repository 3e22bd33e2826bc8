"""LeRobot's ``lerobot-train`` on a compiled roboreel dataset (``roboreel lerobot-train``, docs/lerobot.md).

LeRobot has no dataset plugin hook, so two names are swapped while its own ``train`` runs (launch.py): the
dataset factory ``lerobot_train`` imported (datasets.py builds a ``CompiledDataset``), and accelerate's
``prepare_data_loader`` for that dataset only (each rank reads its own split instead of rank 0 reading all; the
loader is ``roboreel.loader``'s decode stage unless ``--roboreel.loader=dataloader``, loading.py).
Everything else, the policy, processors, optimizer, loop, checkpoints and logs, is LeRobot's code.
"""

from roboreel.integrations.lerobot.launch import LEROBOT_MISSING, lerobot_available, main

__all__ = ["LEROBOT_MISSING", "lerobot_available", "main"]

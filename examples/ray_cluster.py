"""A Ray cluster tuning one workload into one study kept in a database.

The search runs here (the driver); its trials run on the cluster's nodes, two at once,
and it writes every trial into the study at AUTOTUNE_STUDY_URL, which any machine can
then read (docs/storage.md). Without RAY_ADDRESS it starts a local Ray on this machine,
for this search only. Replace ``dataset()`` and ``model()`` with yours (or search your
own config file instead of this one); every node must be able to import what they use.

    pip install -e '.[ray,postgres]'
    export AUTOTUNE_STUDY_URL=postgresql://USER:PASSWORD@HOST/DATABASE
    python examples/ray_cluster.py                             # a local Ray
    RAY_ADDRESS=HEAD_IP:6379 python examples/ray_cluster.py    # a running cluster
    python examples/ray_cluster.py trials=24 seed=1            # any search option
    autotune show "$AUTOTUNE_STUDY_URL" --study-name ray_cluster

It is a config file too: ``autotune search examples/ray_cluster.py`` tunes the same
workload on this machine alone, into studies/ray_cluster.db.
"""

import ast
import os
import sys

import torch
from torch import nn
from torch.utils.data import Dataset

import autotune

FEATURES = 64
ITEMS = 2048
batch_size = 32


class Augmented(Dataset):
    """Feature vectors that cost some CPU work per item, as decoding and augmentation
    would: the work a loader's workers can take off the training loop."""

    def __init__(self, items: int = ITEMS, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.inputs = torch.randn(items, FEATURES, generator=generator)
        self.labels = (self.inputs.sum(dim=1) > 0).long()

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        item = self.inputs[index]
        for _ in range(15):  # a stand-in for the per-item work of a real pipeline
            item = item + 0.01 * torch.tanh(item)
        return item, self.labels[index]


def dataset() -> Dataset:
    return Augmented()


def model() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, 128), nn.ReLU(), nn.Linear(128, 2))


def options_from(arguments: list[str]) -> dict[str, object]:
    """Search options given as NAME=VALUE (``trials=24``, ``window_seconds=1.0``)."""
    options: dict[str, object] = {}
    for argument in arguments:
        name, equals, text = argument.partition("=")
        if not equals:
            raise SystemExit(f"expected search options as NAME=VALUE, got {argument!r}")
        try:
            options[name] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            options[name] = text  # a plain word: "2m", "auto"
    return options


def main(arguments: list[str]) -> None:
    study = os.environ.get("AUTOTUNE_STUDY_URL")
    if not study:
        raise SystemExit(
            "set AUTOTUNE_STUDY_URL to the study's database, as "
            "postgresql://USER:PASSWORD@HOST/DATABASE"
        )
    options = {"trials": 12, "seed": 0, **options_from(arguments)}
    result = autotune.search(
        __file__,
        backend="ray",
        address=os.environ.get("RAY_ADDRESS") or None,  # None: a local Ray, for this search only
        concurrent=2,
        study=study,
        progress=autotune.LineProgress(sys.stderr),
        **options,
    )
    print(f"best: {result.settings.describe()}")
    print(result.to_code())


if __name__ == "__main__":
    main(sys.argv[1:])

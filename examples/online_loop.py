"""Online: a plain training loop whose DataLoader tunes itself while it trains.

No search first: ``autotune.online`` iterates like a DataLoader, measures the loop's
own steps for the first part of training, tries more workers and deeper prefetch
one move at a time, keeps a move only when the steps get faster beyond the noise,
and settles on the best for the rest. Each switch and the choice are logged.

    python examples/online_loop.py                     # trains, logs its choice
    python examples/online_loop.py --record studies/online_loop.db
    autotune show studies/online_loop.db               # the choice, as a search's
    autotune search examples/online_loop.py            # the same workload, tuned offline
"""

import argparse
import logging

import torch
from torch import nn
from torch.utils.data import Dataset

import autotune

FEATURES = 64
ITEMS = 2048
batch_size = 32


class Augmented(Dataset):
    """Synthetic feature vectors that cost some CPU work per item, as decoding and
    augmentation would: the work a loader's workers can take off the loop."""

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


def train(steps: int, record: str | None = None) -> autotune.OnlineLoader:
    """Train for ``steps`` steps, as anyone's loop would; the loader is the only change."""
    torch.manual_seed(0)
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    # Half the first epoch's batches (or 60 s) to tune in; short windows, for a short run.
    loader = autotune.online(
        dataset(), batch_size=batch_size, budget_fraction=0.5, window_seconds=0.05, record=record
    )
    step, epoch = 0, 0
    with loader:  # stops the workers at the end
        while step < steps:
            loader.set_epoch(epoch)
            for inputs, labels in loader:
                loss = loss_fn(net(inputs), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step += 1
                if step == steps:
                    break
            epoch += 1
    print(f"trained {step} steps over {epoch} epoch(s), last loss {loss.item():.3f}")
    print(f"loader settled on: {loader.settings.describe()}")
    return loader


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--record", help="a study file to write the choice into")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    train(args.steps, args.record)


if __name__ == "__main__":
    main()

"""large-model: a transformer that is large for a 2-core CPU, on cheap in-memory data.

Items are rows of an image tensor made once in memory (indexing costs
microseconds). The model is a small vision transformer: 4 x 4 patches of a
32 x 32 image embedded into ``DIM`` dimensions, ``LAYERS`` encoder layers
(``HEADS`` heads, an MLP of ``4 * DIM``), a mean over the tokens and a linear
head: about 0.6 M parameters and some 250 MFLOPs per sample for the forward
and backward passes, most of it in matrix multiplies (a step of 32 samples
takes a few hundred ms on one core).

What should matter: the model, not the loader. The batch size (fewer, larger
matrix multiplies and optimizer steps per sample) and AMP are the knobs that
move the figure. bf16 is offered where the CPU runs it natively: faster matrix
multiplies, but casts around every layer, which on matrices this small can
cost more than they save, so it may win or lose by a wide margin and has to be
measured. The training threads should have every core; workers only take CPU
from the model. The config lets the batch size vary from 16 to 64; AMP is
left to the default space.

    autotune search benchmarks/workloads/large_model.py
"""

import torch
from torch import nn
from torch.utils.data import Dataset

ITEMS = 2048
SIZE = 32
PATCH = 4
DIM = 128
LAYERS = 3
HEADS = 4
CLASSES = 10
batch_size = 32
space = {"batch_size": [16, 32, 64]}


class InMemoryImages(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Images held in memory: loading is nearly free."""

    def __init__(self, items: int = ITEMS) -> None:
        generator = torch.Generator().manual_seed(0)
        self.images = torch.randn(items, 3, SIZE, SIZE, generator=generator)
        self.labels = torch.randint(0, CLASSES, (items,), generator=generator)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[index], self.labels[index]


class VisionTransformer(nn.Module):
    """Patch embedding, a transformer encoder, mean pooling and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        tokens = (SIZE // PATCH) ** 2
        self.patches = nn.Conv2d(3, DIM, PATCH, stride=PATCH)
        self.position = nn.Parameter(torch.zeros(1, tokens, DIM))
        layer = nn.TransformerEncoderLayer(
            DIM, HEADS, dim_feedforward=4 * DIM, dropout=0.0, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        tokens = self.patches(images).flatten(2).transpose(1, 2) + self.position
        logits: torch.Tensor = self.head(self.norm(self.encoder(tokens)).mean(dim=1))
        return logits


def dataset() -> Dataset[tuple[torch.Tensor, torch.Tensor]]:
    return InMemoryImages()


def model() -> nn.Module:
    return VisionTransformer()

"""padded-text: sentences of varying length, tokenised per item and padded per batch.

``ITEMS`` sentences of 8 to ``MAX_WORDS`` words (drawn from a made-up vocabulary
of ``VOCAB`` words, with a skewed, Zipf-like frequency) are made in memory when
the dataset is built. Each access tokenises one sentence in Python (lower-case,
split, a dictionary look-up per word, unknown words to 1): pure-Python work
that holds the GIL. ``collate_fn`` pads the token lists of a batch to the
longest one (id 0), so a batch's shape changes from step to step. The model
embeds the tokens, runs a one-layer GRU over them and classifies the masked
mean of its outputs.

What should matter: the GRU steps through the padded length one token at a
time, so the model dominates (tokenising a sentence costs tens of
microseconds, training on it about a millisecond on one core). The batch size
is its main lever (more rows per time step, but also more padding: the longest
of more sentences), then the training threads and AMP. Workers can only take
the little Python work off the training process, and take CPU from the GRU
if there are many.

    autotune search benchmarks/workloads/padded_text.py
"""

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

ITEMS = 4096
VOCAB = 5000
MAX_WORDS = 96
EMBED = 64
HIDDEN = 64
CLASSES = 4
batch_size = 32


def _words() -> list[str]:
    """A made-up vocabulary: ``VOCAB`` distinct pronounceable words of 1 to 4 syllables."""
    rng = np.random.default_rng(0)
    syllables = [c + v for c in "bcdfghklmnprstvz" for v in "aeiou"]
    words: dict[str, None] = {}
    while len(words) < VOCAB:
        picks = rng.integers(0, len(syllables), size=(VOCAB, 4))
        counts = rng.integers(1, 5, size=VOCAB)
        for row, count in zip(picks, counts, strict=True):
            words.setdefault("".join(syllables[s] for s in row[:count]))
    return list(words)[:VOCAB]


class Sentences(Dataset[tuple[list[int], int]]):
    """Sentences tokenised on every access: a list of token ids and a class."""

    def __init__(self, items: int = ITEMS) -> None:
        words = _words()
        self.vocab = {word: index + 2 for index, word in enumerate(words)}  # 0 pad, 1 unknown
        rng = np.random.default_rng(1)
        lengths = rng.integers(8, MAX_WORDS + 1, size=items)
        # Word frequencies fall off like 1 / rank, as in real text.
        weights = 1.0 / np.arange(1, VOCAB + 1)
        draws = rng.choice(VOCAB, size=int(lengths.sum()), p=weights / weights.sum())
        cuts = np.cumsum(lengths)[:-1]
        self.texts = [
            " ".join(words[w].capitalize() if i == 0 else words[w] for i, w in enumerate(chunk))
            + "."
            for chunk in np.split(draws, cuts)
        ]
        self.labels = [index % CLASSES for index in range(items)]

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, index: int) -> tuple[list[int], int]:
        tokens = [self.vocab.get(word, 1) for word in self.texts[index].lower().rstrip(".").split()]
        return tokens[:MAX_WORDS], self.labels[index]


def collate_fn(items: list[tuple[list[int], int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad the batch's token lists to the longest of them (id 0)."""
    longest = max(len(tokens) for tokens, _ in items)
    padded = torch.zeros(len(items), longest, dtype=torch.long)
    for row, (tokens, _) in enumerate(items):
        padded[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
    labels = torch.tensor([label for _, label in items], dtype=torch.long)
    return padded, labels


class GruClassifier(nn.Module):
    """Embedding, a one-layer GRU, the mean of its outputs over the real tokens, a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB + 2, EMBED, padding_idx=0)
        self.gru = nn.GRU(EMBED, HIDDEN, batch_first=True)
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        mask = (tokens != 0).unsqueeze(-1).to(torch.float32)
        outputs, _ = self.gru(self.embed(tokens))
        pooled = (outputs * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        logits: torch.Tensor = self.head(pooled)
        return logits


def dataset() -> Dataset[tuple[list[int], int]]:
    return Sentences()


def model() -> nn.Module:
    return GruClassifier()

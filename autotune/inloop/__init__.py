"""Online: a loader that tunes its own knobs inside the user's training loop, from
windows of the user's own steps, switching DataLoaders without losing or repeating a
sample, and recording its choice in a study."""

from autotune.inloop._loader import OnlineLoader
from autotune.inloop._online import online

__all__ = ["OnlineLoader", "online"]

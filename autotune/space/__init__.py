"""The space: which knobs a search samples, over which values, on this machine."""

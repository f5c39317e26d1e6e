"""The user's side: a config file or Python callables turned into a :class:`Workload`
(what to train), and the :class:`SearchOptions` (how to search)."""

"""The result: the chosen settings with the measurements that chose them, as data and
as code (the DDP launch line included)."""

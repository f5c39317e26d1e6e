"""Deciding: the finalists confirmed, the cheapest within the tolerance chosen, the DDP stage,
the ceilings measured, and the diagnosis of where the time goes."""

"""The search: the stages in order, preflight to saved result (the entry point of the
library's search)."""

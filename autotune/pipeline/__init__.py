"""The pipeline of a search: its stages in order, preflight to saved result (behind
``autotune.search``)."""

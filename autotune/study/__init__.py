"""The study: every trial and its figures in an Optuna SQLite storage, the one record a
trial is read back as, and which study a search may add to (the fingerprint)."""

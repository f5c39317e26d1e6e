"""Progress: the events a search emits while it runs, and the displays that show them."""

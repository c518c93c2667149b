"""What a run is named, logs and shows: metric keys, run names, Markdown tables, W&B and its server.
May import: no wing."""

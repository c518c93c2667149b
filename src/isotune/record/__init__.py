"""A run's record: results.json and its provenance, checkpoints and resume, metrics.csv, stops, its
folder's lock.
May import: no wing."""

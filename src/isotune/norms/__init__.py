"""Library (no Lightning, no Hydra): the sentence vector's norms, whitening, valid option values.
May import: no wing."""

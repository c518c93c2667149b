"""Lightning callbacks of a training run that measure it: the isotropy of the embedding space per
epoch (:mod:`.isotropy`). The measures themselves are the library's (:mod:`isotune.isotropy`).
May import: norms, isotropy, tracking, data, model."""

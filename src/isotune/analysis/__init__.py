"""The geometry-analysis family: one fine-tuned checkpoint against its pre-trained encoder
(Rajaee & Pilehvar, Findings of EMNLP 2021), run by ``analyze.py``; see ``docs/analysis.md``.
May import: norms, isotropy, tracking, record, data, model, training."""

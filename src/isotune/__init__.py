"""isotune: fine-tune BERT-family encoders on GLUE and study the isotropy of their embeddings."""

__version__ = "0.1.0"

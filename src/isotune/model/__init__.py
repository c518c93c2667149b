"""The model: the LightningModule, its encoder and family, sentence views, reg and adaptation.
May import: norms, isotropy, tracking, data."""

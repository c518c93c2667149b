"""Settings that make an analysis of a tiny model take seconds: few tokens, points and clusters."""

SMALL = [
    "tokens.max_tokens=300",
    "local.max_points=200",
    "local.n_clusters=4",
    "enhance.n_clusters=3",
    "enhance.abtt_components=2",
    "enhance.cluster_components=1",
]

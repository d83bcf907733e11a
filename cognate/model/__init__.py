"""The learned cost model (docs/architecture.md, Cost model).

- ``sparseconv``: 2-D sparse convolution, pure PyTorch or MinkowskiEngine, one weight layout.
- ``featurizer``: matrix -> embedding (``Featurizer.embed``).
- ``encoding``: config -> features (``make_encoder(space).encode(configs, shape, width)``).
- ``predictor``: ``RankingNetwork`` (score: lower = faster) and the pairwise ranking loss.
- ``train``: training, validation metrics, safetensors checkpoints.
- ``preset``: the presets of configs/model.yaml.
"""

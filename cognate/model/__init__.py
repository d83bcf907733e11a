"""The learned cost model (docs/architecture.md, Cost model).

- ``sparseconv``: 2-D sparse convolution, pure PyTorch or MinkowskiEngine, one weight layout.
- ``featurizer``: matrix -> embedding (``Featurizer.embed``).
- ``encoding``: config -> features (``make_encoder(space).encode(configs, shape, width)``).
- ``predictor``: ``RankingNetwork`` (score: lower = faster) and the pairwise ranking loss.
- ``train``: training, validation metrics, safetensors checkpoints.
- ``preset``: the presets of configs/model.yaml.
- ``cost_model``: the role every model plays (``CostModel``); ``learned`` and
  ``random_model`` the two kinds of model, ``shipped`` where the shipped ones live.
"""

# The kinds of model CostModel.load reads register themselves when imported: importing them
# here registers both before any model file is loaded.
from cognate.model import learned, random_model  # noqa: F401

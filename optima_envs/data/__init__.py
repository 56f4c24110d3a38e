"""Dataset loaders: one module per dataset, each a `DatasetSource` that reads the original
release files and the Hugging Face hub's format, from a local path or from the hub.

    from optima_envs.data.hotpotqa import HotpotQASource

Shared machinery (readers with file-and-line errors, subset selection, hub loading, caching)
is in `optima_envs.data.common`.
"""

from optima_envs.data.common import DataConfig, DatasetSource, DataWarning, Row, clear_cache

__all__ = ["DataConfig", "DataWarning", "DatasetSource", "Row", "clear_cache"]

"""`optima envs`: list the registered environments."""

from rich.console import Console
from rich.table import Table


def envs() -> None:
    """List every registered env id with its version, family and description."""
    import optima_envs

    table = Table("id", "version", "family", "description")
    for name in optima_envs.list_envs():
        spec = optima_envs.spec(name)
        table.add_row(name, str(spec.version), spec.family, spec.description)
    Console().print(table)

"""What every ``coshare`` subcommand shares: the configuration named on the command line,
loaded once, and the decorator that passes it (the root group, the simulator's, the nodes' and
both schedulers' commands all take it from here)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import click

from coshare.config import Config, ConfigWarning, load_config


@dataclass
class AppContext:
    """What subcommands share: the config file named on the command line, loaded on demand."""

    config_path: Path | None = None
    _config: Config | None = field(default=None, repr=False)

    @property
    def config(self) -> Config:
        """The configuration (defaults < file < environment), loaded once; deprecated keys
        are said on standard error (``coshare: warning: ...``)."""
        if self._config is None:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", FutureWarning)
                warnings.simplefilter("always", ConfigWarning)
                self._config = load_config(self.config_path)
            for warning in caught:
                click.echo(f"coshare: warning: {warning.message}", err=True)
        return self._config


pass_app = click.make_pass_decorator(AppContext, ensure=True)

"""Where the SDK finds its coordinator and credentials, as the ``stoke`` CLI does: the
arguments given, then the environment (``STOKE_ADDRESS``, ``STOKE_TOKEN``,
``STOKE_TLS_CA``), then ``$XDG_CONFIG_HOME/stoke/config.yaml`` (else
``~/.config/stoke/config.yaml``), e.g.::

    address: stoke.example.org:50051
    token: stk_...
    tls_ca: /etc/stoke/ca.pem     # relative paths are the file's folder's

A key the file does not know, or a value that is not a string, is an error naming the
file and the line, as in the CLI.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml

DEFAULT_ADDRESS = "127.0.0.1:50051"
_KEYS = ("address", "token", "tls_ca")


class ConfigFileError(ValueError):
    """The config file cannot be used; the message names it and the line."""


@dataclass
class Settings:
    address: str = ""
    token: str = ""
    tls_ca: str = ""


def default_config_path() -> Optional[Path]:
    """``$XDG_CONFIG_HOME/stoke/config.yaml``, else ``~/.config/stoke/config.yaml``."""
    xdg = os.environ.get("XDG_CONFIG_HOME")
    if xdg:
        return Path(xdg) / "stoke" / "config.yaml"
    home = os.environ.get("HOME")
    return Path(home) / ".config" / "stoke" / "config.yaml" if home else None


def read_config_file(path: Optional[Path]) -> Settings:
    """The file's values; empty ones where it has none, or when there is no file."""
    settings = Settings()
    if path is None or not path.exists():
        return settings
    try:
        root = yaml.compose(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigFileError(f"{path}{line}: {getattr(e, 'problem', e)}") from None
    if root is None:
        return settings
    if not isinstance(root, yaml.MappingNode):
        raise ConfigFileError(f"{path}: expected a mapping of keys")
    for key_node, value_node in root.value:
        key, line = key_node.value, key_node.start_mark.line + 1
        if key not in _KEYS:
            raise ConfigFileError(
                f"{path}:{line}: {key}: unknown key; expected address, token or tls_ca")
        if not isinstance(value_node, yaml.ScalarNode):
            raise ConfigFileError(f"{path}:{line}: {key}: expected a string")
        setattr(settings, key, value_node.value)
    if settings.tls_ca and not Path(settings.tls_ca).is_absolute():
        settings.tls_ca = str(path.parent / settings.tls_ca)
    return settings


def resolve(address: Optional[str], token: Optional[str], tls_ca: Optional[str]) -> Settings:
    """Each value from the first place that has it: the argument, the environment, the
    config file; the address defaults to ``127.0.0.1:50051``."""
    file = read_config_file(default_config_path())

    def pick(given: Optional[str], variable: str, from_file: str) -> str:
        return given or os.environ.get(variable) or from_file

    return Settings(
        address=pick(address, "STOKE_ADDRESS", file.address) or DEFAULT_ADDRESS,
        token=pick(token, "STOKE_TOKEN", file.token),
        tls_ca=pick(tls_ca, "STOKE_TLS_CA", file.tls_ca),
    )

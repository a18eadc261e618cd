"""Reading a TOML or JSON file as a table (dict): every failure is a Seq2DError naming the
file (and the line and column of a syntax error). Specs and training configs both use it."""

from __future__ import annotations

import json
from pathlib import Path

from .errors import InvalidType, InvalidValue, MissingFile

__all__ = ["read_table"]


def read_table(path: str | Path, what: str, fmt: str | None = None) -> dict:
    """The dict in ``path`` (``fmt`` "TOML" or "JSON"; default: by suffix, TOML unless .json);
    ``what`` names the file in messages (e.g. "spec file")."""
    import tomllib

    path = Path(path)
    where = f"{what} {str(path)!r}"
    fmt = fmt or ("JSON" if path.suffix.lower() == ".json" else "TOML")
    try:
        if fmt == "JSON":
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        else:
            with open(path, "rb") as f:
                data = tomllib.load(f)
    except FileNotFoundError:
        raise MissingFile(f"{where} does not exist") from None
    except IsADirectoryError:
        raise InvalidValue(f"{where} is a folder, not a file") from None
    except OSError as e:
        raise InvalidValue(f"cannot read {where}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise InvalidValue(f"{where} is not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start})") from None
    except json.JSONDecodeError as e:
        raise InvalidValue(f"{where} is not valid JSON: {e.msg} (at line {e.lineno}, column {e.colno})") from None
    except tomllib.TOMLDecodeError as e:  # its message ends "(at line L, column C)"
        raise InvalidValue(f"{where} is not valid TOML: {e}") from None
    if not isinstance(data, dict):
        raise InvalidType(f"{where}: expected a table (dict) at the top level, got {type(data).__name__}")
    return data

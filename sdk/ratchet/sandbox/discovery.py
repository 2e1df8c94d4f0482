"""Load an app folder and find its handlers (used by `describe` and `run`)."""

from __future__ import annotations

import importlib
import os
import pathlib
import sys
import tomllib
import traceback
from types import ModuleType

from ratchet.errors import DiscoveryError
from ratchet.task import TaskSpec, find_tasks

DEFAULT_MODULE = "app"
MANIFEST = "ratchet.toml"


def module_name(app_dir: pathlib.Path, explicit: str | None = None) -> str:
    """The module to import: explicit, else [app] module from ratchet.toml, else "app"."""
    if explicit:
        return explicit
    manifest = app_dir / MANIFEST
    if not manifest.is_file():
        return DEFAULT_MODULE
    try:
        data = tomllib.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise DiscoveryError(f"{manifest} is not valid TOML: {e}") from None
    module = data.get("app", {}).get("module", DEFAULT_MODULE)
    if not isinstance(module, str) or not module.strip():
        raise DiscoveryError(f"{manifest}: [app] module must be a non-empty string, got {module!r}")
    return module.strip()


def load_app(app_dir: str | os.PathLike, module: str | None = None) -> tuple[str, ModuleType, list[TaskSpec]]:
    """Import the app module from app_dir (made the first import path and the
    working directory) and return (module name, module, handlers).

    Raises DiscoveryError naming the cause: missing folder, import failure
    (with its traceback), no handlers, or a duplicate task name.
    """
    root = pathlib.Path(app_dir).resolve()
    if not root.is_dir():
        raise DiscoveryError(f"app folder {app_dir} does not exist or is not a directory")
    name = module_name(root, module)
    os.chdir(root)
    sys.path.insert(0, str(root))
    try:
        mod = importlib.import_module(name)
    except (Exception, SystemExit) as e:  # noqa: BLE001 -- any import-time failure of customer code is reported
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        raise DiscoveryError(f"importing module {name!r} from {root} failed: {type(e).__name__}: {e}\n{tb}") from None
    specs = find_tasks(mod)
    if not specs:
        raise DiscoveryError(
            f"module {name!r} in {root} declares no handlers; decorate functions with @ratchet.task or "
            f"@ratchet.workflow")
    return name, mod, specs

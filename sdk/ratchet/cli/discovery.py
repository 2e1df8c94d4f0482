"""Where the platform is: which endpoint and keys a command uses.

Precedence, first match wins:
1. `--state-dir DIR` given on the command line: DIR/endpoints.json.
2. RATCHET_ENDPOINT in the environment, with RATCHET_API_KEY (and
   RATCHET_ADMIN_KEY for admin commands).
3. ./.ratchet/endpoints.json, the default `ratchet dev up` writes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Mapping

from ratchet.cli.errors import CLIError

DEFAULT_STATE_DIR = ".ratchet"


@dataclasses.dataclass(frozen=True)
class Target:
    """A platform to talk to; `source` says where it was found, for error messages."""

    grpc: str
    api_key: str | None
    admin_key: str | None
    rest: str | None
    source: str

    def need_api_key(self) -> str:
        if not self.api_key:
            raise CLIError(f"no API key for {self.grpc} ({self.source}): set RATCHET_API_KEY")
        return self.api_key

    def need_admin_key(self) -> str:
        if not self.admin_key:
            raise CLIError(f"no admin key for {self.grpc} ({self.source}): set RATCHET_ADMIN_KEY")
        return self.admin_key


def _from_state_dir(state_dir: pathlib.Path) -> Target:
    path = state_dir / "endpoints.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CLIError(f"no platform in {state_dir} ({path} not found): start one with "
                       f"`ratchet dev up --state-dir {state_dir}`") from None
    except json.JSONDecodeError as e:
        raise CLIError(f"{path} is not valid JSON ({e}); restart with `ratchet dev up`") from None
    if not data.get("grpc"):
        raise CLIError(f"{path} has no gRPC endpoint; restart with `ratchet dev up`")
    return Target(data["grpc"], data.get("api_key"), data.get("admin_key"), data.get("rest"),
                  f"from {path}")


def discover(state_dir: str | os.PathLike | None, environ: Mapping[str, str] | None = None,
             cwd: str | os.PathLike | None = None) -> Target:
    """The platform a command should use (see the module docstring for the order)."""
    env = os.environ if environ is None else environ
    if state_dir is not None:
        return _from_state_dir(pathlib.Path(state_dir))
    endpoint = env.get("RATCHET_ENDPOINT")
    if endpoint:
        return Target(endpoint, env.get("RATCHET_API_KEY") or None, env.get("RATCHET_ADMIN_KEY") or None,
                      env.get("RATCHET_REST") or None, "from RATCHET_ENDPOINT")
    default = pathlib.Path(cwd or ".") / DEFAULT_STATE_DIR
    if (default / "endpoints.json").exists():
        return _from_state_dir(default)
    raise CLIError("no platform found: pass --state-dir DIR, set RATCHET_ENDPOINT and RATCHET_API_KEY, "
                   "or start one here with `ratchet dev up`")

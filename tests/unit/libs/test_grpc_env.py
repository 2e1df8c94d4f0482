"""ratchet.libs.rpc.grpc_env: the services' grpc core settings, set before grpc loads."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = "import ratchet.libs.rpc.grpc_env, os; print(os.environ.get('GRPC_EXPERIMENTS'))"


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}
    return subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True,
                          timeout=60)


def test_the_legacy_io_experiments_are_the_default():
    # (not imported here: this test process has loaded grpc already, which the module refuses)
    out = _run(PROBE)
    assert out.returncode == 0
    assert out.stdout.strip() == "-event_engine_client,-event_engine_listener,-event_engine_for_all_other_endpoints"


def test_a_value_in_the_environment_wins_even_empty():
    assert _run(PROBE, GRPC_EXPERIMENTS="").stdout.strip() == ""
    assert _run(PROBE, GRPC_EXPERIMENTS="-event_engine_client").stdout.strip() == "-event_engine_client"


def test_importing_it_after_grpc_is_an_error_not_a_silent_no_op():
    out = _run("import grpc; import ratchet.libs.rpc.grpc_env")
    assert out.returncode != 0 and "must be imported before grpc" in out.stderr


def test_every_service_entry_point_imports_it_before_anything_else():
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[3] / "services"
    for main in sorted(root.glob("*/__main__.py")):
        code = [line for line in main.read_text().splitlines()
                if line.startswith(("import ", "from ")) and "__future__" not in line]
        assert code and code[0].startswith("import ratchet.libs.rpc.grpc_env"), main


def test_grpc_runs_with_the_setting():
    # The experiments exist in this grpcio (an unknown one is logged as such and ignored).
    out = _run("import ratchet.libs.rpc.grpc_env, grpc; grpc.insecure_channel('127.0.0.1:1').close(); print('ok')")
    assert out.returncode == 0 and "ok" in out.stdout
    assert "Unknown experiment" not in out.stderr

"""Regenerate the Python contracts under gen/ from protos/.

Run with `make protos`. The output is committed; tests/unit/test_codegen.py
regenerates into a temporary folder and fails if anything differs.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROTOS = ROOT / "protos"


def generate(out: pathlib.Path) -> None:
    """Write *_pb2.py, *_pb2.pyi and *_pb2_grpc.py for every ratchet proto."""
    import grpc_tools
    from grpc_tools import protoc

    sources = sorted(str(p.relative_to(PROTOS)) for p in (PROTOS / "ratchet").rglob("*.proto"))
    well_known = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    out.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{PROTOS}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *sources,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    # Every folder is a regular package so the generated imports resolve the
    # same way in every environment.
    for folder in (out / "ratchet").rglob("*"):
        if folder.is_dir():
            (folder / "__init__.py").touch()
    init = out / "ratchet" / "__init__.py"
    if init.exists():
        init.unlink()  # `ratchet` itself is the SDK package (sdk/ratchet)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "gen")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        generate(pathlib.Path(tmp))
        target = args.out / "ratchet"
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(pathlib.Path(tmp) / "ratchet", target)
    print(f"generated contracts into {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

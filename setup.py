"""Package discovery for the `ratchet` namespace assembled from several
top-level folders (metadata lives in pyproject.toml). Editable and regular
installs both get every subpackage."""

import pathlib

from setuptools import Extension, setup

ROOT = pathlib.Path(__file__).parent
PACKAGE_DIR = {
    "ratchet": "sdk/ratchet",
    "ratchet.api": "gen/ratchet/api",
    "ratchet.internal": "gen/ratchet/internal",
    "ratchet.libs": "libs",
    "ratchet.services": "services",
}


def discover() -> list[str]:
    found = []
    for name, folder in PACKAGE_DIR.items():
        base = ROOT / folder
        for init in sorted(base.rglob("__init__.py")):
            rel = init.parent.relative_to(base)
            if "__pycache__" in rel.parts:
                continue
            found.append(".".join([name, *rel.parts]) if rel.parts else name)
    return sorted(set(found))


setup(
    package_dir=PACKAGE_DIR,
    packages=discover(),
    # SQL, migrations, the OpenAPI copy and sample apps ship with the code.
    package_data={"": ["*.sql", "*.json", "*.toml", "migrations/*.sql", "store/*.sql"]},
    # The batch checks in C (libs/fastcheck): optional, so an install without a compiler
    # still works on the Python twin (tests/unit/libs/test_fastcheck.py then fails).
    ext_modules=[Extension("ratchet.libs.fastcheck._fastcheck", ["libs/fastcheck/_fastcheck.c"],
                           extra_compile_args=["-O2"], optional=True)],
)

"""`python -m ratchet.sandbox describe`: the exact output deploy relies on."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest


def describe(app_dir, *extra):
    return subprocess.run([sys.executable, "-m", "ratchet.sandbox", "describe", "--app-dir", str(app_dir), *extra],
                          capture_output=True, text=True, timeout=60)


def write(folder, files):
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(textwrap.dedent(text))
    return folder


def test_describe_prints_handlers_and_policies(tmp_path):
    app = write(tmp_path / "app", {"app.py": """
        from ratchet import task, RetryPolicy, FatalError
        print("imported")  # must not pollute the JSON

        class BadInput(Exception):
            pass

        @task(retries=RetryPolicy(max_attempts=3, base="500ms", non_retryable=[BadInput],
                                  rules={TimeoutError: RetryPolicy(max_attempts=10, base="5s"),
                                         "ValueError": "fatal"}), timeout="30s")
        def send_email(ctx, payload):
            return {"sent": True}

        @task(name="reports.build", schedule_to_close="1h")
        def build(ctx, payload):
            return None
    """})
    out = describe(app)
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.strip().splitlines()) == 1 and "imported" in out.stderr
    assert json.loads(out.stdout) == {"module": "app", "handlers": [
        {"name": "reports.build", "kind": "task",
         "retry": {"max_attempts": 5, "base_s": 1.0, "factor": 2.0, "cap_s": 3600.0, "jitter": True,
                   "non_retryable": [], "rules": {}},
         "timeouts": {"start_to_close_s": 600.0, "schedule_to_start_s": None, "schedule_to_close_s": 3600.0},
         "non_retryable": []},
        {"name": "send_email", "kind": "task",
         "retry": {"max_attempts": 3, "base_s": 0.5, "factor": 2.0, "cap_s": 3600.0, "jitter": True,
                   "non_retryable": ["BadInput"],
                   "rules": {"TimeoutError": {"non_retryable": False, "max_attempts": 10, "base_s": 5.0,
                                              "factor": None, "cap_s": None, "jitter": None},
                             "ValueError": {"non_retryable": True, "max_attempts": None, "base_s": None,
                                            "factor": None, "cap_s": None, "jitter": None}}},
         "timeouts": {"start_to_close_s": 30.0, "schedule_to_start_s": None, "schedule_to_close_s": None},
         "non_retryable": ["BadInput"]},
    ]}
    assert not (app / "__pycache__").exists()


def test_module_comes_from_ratchet_toml_or_the_flag(tmp_path):
    app = write(tmp_path / "app", {
        "ratchet.toml": '[app]\nmodule = "jobs.main"\n',
        "jobs/__init__.py": "",
        "jobs/main.py": "from ratchet import task\n@task\ndef a(ctx, p):\n    return 1\n",
        "other.py": "from ratchet import task\n@task\ndef b(ctx, p):\n    return 2\n",
    })
    out = json.loads(describe(app).stdout)
    assert out["module"] == "jobs.main" and [h["name"] for h in out["handlers"]] == ["a"]
    out = json.loads(describe(app, "--module", "other").stdout)
    assert out["module"] == "other" and [h["name"] for h in out["handlers"]] == ["b"]


@pytest.mark.parametrize("source, fragment", [
    ("import no_such_module_xyz\n", "ModuleNotFoundError"),
    ("x = 1\n", "declares no handlers"),
    ("from ratchet import task\n@task(name='a')\ndef a(ctx, p): pass\n@task(name='a')\ndef b(ctx, p): pass\n",
     "declared twice"),
    ("from ratchet import task, RetryPolicy\n@task(retries=RetryPolicy(max_attempts=0))\ndef a(ctx, p): pass\n",
     "max_attempts"),
])
def test_describe_exits_2_with_a_clear_message(tmp_path, source, fragment):
    app = write(tmp_path / "app", {"app.py": source})
    out = describe(app)
    assert out.returncode == 2 and out.stdout == ""
    assert "cannot load the app" in out.stderr and fragment in out.stderr


def test_missing_folder_exits_2(tmp_path):
    out = describe(tmp_path / "nope")
    assert out.returncode == 2 and "does not exist" in out.stderr

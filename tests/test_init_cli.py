"""``toolloop init``: a small working App, registry and plans that pass ``validate`` and run; existing
files are never overwritten."""

from __future__ import annotations

from conftest import jsonl

FILES = ["registry.yml", "app/__init__.py", "app/tools.py", "plans/sequential.yml", "plans/parallel.yml"]


def test_init_writes_an_app_that_validates_and_runs(cli, tmp_path):
    r = cli("init", "starter")
    assert r.returncode == 0, r.stderr
    assert all((tmp_path / "starter" / name).is_file() for name in FILES)
    assert r.stderr.decode().splitlines()[:3] == [
        "wrote " + ", ".join(f"starter/{name}" for name in FILES),
        "next:",
        "  toolloop validate starter",
    ]
    r = cli("validate", "starter", "--strict")
    assert r.returncode == 0, r.stdout
    assert r.stderr.decode() == "checked 1 registry and 2 plans: no problems\n"
    r = cli("run", "starter/plans/sequential.yml", "--format", "jsonl")
    assert r.returncode == 0, r.stderr
    records = jsonl(r.stdout)
    assert [(rec["call_key"], rec["result"]) for rec in records[:-1]] == [
        ("loud", {"text": "HELLO"}), ("count", {"words": 3}), ("wait", {"text": "done"})]
    r = cli("run", "starter/plans/parallel.yml", "--format", "jsonl")
    assert r.returncode == 0, r.stderr
    assert jsonl(r.stdout)[-1]["counts"]["ok"] == 5
    # from inside the folder, too (the default folder is the current one)
    inside = tmp_path / "here"
    inside.mkdir()
    assert cli("init", cwd=inside).returncode == 0
    assert cli("run", "plans/parallel.yml", "--format", "jsonl", cwd=inside).returncode == 0


def test_init_never_overwrites(cli, tmp_path):
    (tmp_path / "plans").mkdir()
    (tmp_path / "plans" / "parallel.yml").write_text("mine\n")
    r = cli("init")
    assert r.returncode == 1
    assert r.stderr.decode() == ("toolloop: error: 1 file would be overwritten: plans/parallel.yml; nothing was written\n"
                                 "  hint: run toolloop init in a new or empty folder\n")
    assert (tmp_path / "plans" / "parallel.yml").read_text() == "mine\n"
    assert not (tmp_path / "registry.yml").exists() and not (tmp_path / "app").exists()
    (tmp_path / "file").write_text("")
    r = cli("init", "file")
    assert r.returncode == 2 and r.stderr.decode() == "toolloop: error: file is not a folder\n"

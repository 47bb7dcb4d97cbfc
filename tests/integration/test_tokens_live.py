"""The real-server half of tests/unit/test_tokens.py: the token file as the server sees it:
hashes only, reloads, and no races."""



from plant_store.tokens import TokenFile


def test_changes_from_many_processes_at_once_lose_none(tmp_path):
    """Each change reads the entries and writes them back: two at once lost one."""
    import subprocess
    import sys

    path = str(tmp_path / "tokens.json")
    script = ("import sys; from plant_store.tokens import TokenFile; "
              "f = TokenFile(sys.argv[1]); print(f.add_first('initial') or '-'); "
              "f.add(sys.argv[2])")
    procs = [subprocess.Popen([sys.executable, "-c", script, path, f"p{n}"],
                              stdout=subprocess.PIPE, text=True) for n in range(8)]
    firsts = [p.communicate(timeout=30)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    labels = sorted(e.label for e in TokenFile(path).entries())
    assert labels == sorted(["initial", *(f"p{n}" for n in range(8))])
    made = [token for token in firsts if token != "-"]
    assert len(made) == 1 and TokenFile(path).verify(made[0]) == "initial"

"""`rl-swarm-node hf login|whoami|logout` and `rl-swarm-node upload` against the loopback Hub."""

from __future__ import annotations

import io

from node.cli.main import main
from node.hub import auth as hub_auth
from tests.test_hub_upload import READ, WRITE, hub, make_run, online, peer  # noqa: F401 - fixtures


def cli(monkeypatch, capsys, *argv: str, stdin: str = "") -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_login_upload_whoami_logout(hub, tmp_path, tiny_model_dir, monkeypatch, capsys):
    monkeypatch.setenv(hub_auth.PASSPHRASE_ENV, "cli passphrase")
    config = make_run(tmp_path, tiny_model_dir, rounds=3)
    data = str(config.run.data_dir)
    hub_args = ("--data-dir", data, "--endpoint", hub.url)

    code, out, err = cli(monkeypatch, capsys, "hf", "login", "--token-stdin", *hub_args, stdin=READ + "\n")
    assert code == 2 and "read-only" in err and "write access" in err
    assert hub_auth.load_token(config.run.data_dir) is None  # a refused token is not stored

    code, out, _ = cli(monkeypatch, capsys, "hf", "login", "--token-stdin", *hub_args, stdin=WRITE + "\n")
    assert code == 0 and "logged in as alice" in out and WRITE not in out
    assert hub_auth.load_token(config.run.data_dir) == WRITE
    assert not any(WRITE.encode() in p.read_bytes() for p in config.run.data_dir.rglob("*") if p.is_file())

    code, out, _ = cli(monkeypatch, capsys, "hf", "whoami", *hub_args)
    assert code == 0 and "alice" in out and "role write" in out

    code, out, _ = cli(monkeypatch, capsys, "upload", "--run-name", "r1", "--public", *hub_args)
    repo_id = f"alice/SmolLM2-135M-Instruct-swarm-{peer(config)}"
    assert code == 0 and f"{hub.url}/{repo_id}" in out and "created the public repo" in out, out
    assert not hub.repos[repo_id].private
    code, out, _ = cli(monkeypatch, capsys, "upload", "--run-name", "r1", *hub_args)
    assert code == 0 and "nothing to upload" in out

    code, out, _ = cli(monkeypatch, capsys, "hf", "logout", "--data-dir", data)
    assert code == 0 and hub_auth.load_token(config.run.data_dir) is None
    code, _, err = cli(monkeypatch, capsys, "upload", "--run-name", "r1", *hub_args)
    assert code == 2 and "hf login" in err


def test_upload_without_network_is_a_clear_error(tmp_path, tiny_model_dir, monkeypatch, capsys):
    config = make_run(tmp_path, tiny_model_dir, rounds=2)
    code, _, err = cli(monkeypatch, capsys, "upload", "--data-dir", str(config.run.data_dir), "--run-name", "r1",
                       "--token-stdin", "--endpoint", "http://127.0.0.1:9", stdin=WRITE + "\n")
    assert code == 2 and "cannot be reached" in err and "check the internet connection" in err

import json
import subprocess
import sys

import pytest

from node.cli.main import _parser, config_from_args
from node.errors import NodeError
from node.swarm.invite import format_invite, local_addresses, parse_invite

PEER = "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"
ADDR = f"/ip4/192.168.1.7/tcp/31337/p2p/{PEER}"


def test_invite_round_trip_carries_the_swarm_name():
    text = format_invite("my-swarm", [ADDR, f"/ip4/127.0.0.1/tcp/31337/p2p/{PEER}"])
    assert text.startswith("rl-swarm:join?") and "\n" not in text
    invite = parse_invite(f"  {text}\n")
    assert invite.swarm_name == "my-swarm" and invite.peers[0] == ADDR and len(invite.peers) == 2


def test_bare_multiaddrs_are_invites_without_a_swarm_name():
    assert parse_invite(f"{ADDR}\n{ADDR}").peers == (ADDR,)
    assert parse_invite(ADDR).swarm_name is None


@pytest.mark.parametrize("text", ["", "hello", "/ip4/1.2.3.4/tcp/1", f"rl-swarm:join?swarm=x&peer=/ip4/1.2.3.4/p2p/{PEER}",
                                  f"rl-swarm:join?swarm=bad%20name&peer={ADDR}"])
def test_bad_invites_are_refused_with_a_hint(text):
    with pytest.raises(NodeError) as e:
        parse_invite(text)
    assert e.value.code == "bad_invite" and e.value.hint


def test_join_flag_takes_an_invite_and_its_swarm_name(tmp_path):
    args = _parser().parse_args(["run", "--data-dir", str(tmp_path), "--join", format_invite("team", [ADDR])])
    config = config_from_args(args)
    assert config.swarm.initial_peers == [ADDR] and config.swarm.swarm_name == "team"


def test_local_addresses_end_with_loopback():
    addresses = local_addresses(PEER, 4000)
    assert addresses[-1] == f"/ip4/127.0.0.1/tcp/4000/p2p/{PEER}"
    assert all(parse_invite(a) for a in addresses)


def test_identity_command_creates_backs_up_and_restores(tmp_path):
    def identity(*args):
        out = subprocess.run([sys.executable, "-m", "node", "identity", "--data-dir", str(tmp_path), "--json", *args],
                             capture_output=True, text=True, timeout=120, check=True)
        return json.loads(out.stdout)

    first = identity("--backup", str(tmp_path / "backup.key"))
    assert first["name"].count("-") == 2 and (tmp_path / "backup.key").exists()
    (tmp_path / "identity" / "swarm.key").unlink()
    assert identity()["peer_id"] != first["peer_id"]  # a lost key is a new peer ...
    assert identity("--restore", str(tmp_path / "backup.key"))["peer_id"] == first["peer_id"]  # ... unless restored


def test_format_bytes():
    from node.units import format_bytes

    assert [format_bytes(n) for n in (0, 1023, 1536, 5 * 2**20, 3 * 2**40)] == \
        ["0 B", "1023 B", "1.5 KiB", "5.0 MiB", "3072.0 GiB"]

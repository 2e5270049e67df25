"""The secretbox build we pick seals exactly as PyNaCl does, and the choice can be forced."""

import os
import subprocess
import sys

from nacl.secret import SecretBox

from burrow.client import sodium


def test_chosen_build_matches_pynacl_secretbox():
    key, nonce = os.urandom(32), os.urandom(24)
    for size in (0, 1, 1000, 256 * 1024 + 3):
        msg = os.urandom(size)
        out = bytearray(size + 16)
        sodium.secretbox().seal_into(out, msg, nonce, key)
        assert bytes(SecretBox(key).encrypt(msg, nonce).ciphertext) == bytes(out)
        back = bytearray(size)
        assert sodium.secretbox().open_into(back, bytes(out), nonce, key) and back == msg


def test_tampered_ciphertext_is_refused_by_both_builds():
    key, nonce = os.urandom(32), os.urandom(24)
    for build in {sodium.secretbox(), sodium.BUNDLED}:
        sealed = bytearray(116)
        build.seal_into(sealed, b"x" * 100, nonce, key)
        sealed[50] ^= 1
        assert not build.open_into(bytearray(100), bytes(sealed), nonce, key)


def test_system_libsodium_is_used_when_present_and_can_be_forced_off():
    system = sodium._load_system()
    if system is None:  # no shared libsodium on this machine: the bundled build is the only choice
        assert sodium.secretbox() is sodium.BUNDLED
    else:
        assert sodium._agrees(system)
        assert sodium.secretbox().name.startswith("system libsodium")
    code = "from burrow.client import sodium; print(sodium.secretbox().name)"
    env = dict(os.environ, BURROW_SODIUM="bundled")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "PyNaCl bundled libsodium"


def test_the_cli_starts_without_parsing_c_declarations():
    """Start-up cost: neither the CLI nor transit loads pycparser (cffi's C parser), even once a build is chosen."""
    code = ("import sys; import burrow.client.cli, burrow.client.transit.aio; "
            "from burrow.client import sodium; sodium.secretbox(); print('pycparser' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_record_from_one_build_opens_with_the_other_from_a_read_only_view():
    key, nonce, msg = os.urandom(32), os.urandom(24), os.urandom(70_000)
    sealed = bytearray(len(msg) + 16)
    sodium.BUNDLED.seal_into(sealed, msg, nonce, key)
    framed = bytes(8) + bytes(sealed)  # the body sits behind a header in a read-only buffer
    back = bytearray(len(msg))
    assert sodium.secretbox().open_into(back, memoryview(framed)[8:], nonce, key) and back == msg

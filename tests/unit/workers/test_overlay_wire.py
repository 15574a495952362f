"""The overlay's wire framing and its configuration (workers/overlay/wire.py, config.py)."""

from __future__ import annotations

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from workers.overlay import (
    HEADER_LEN,
    MAC_LEN,
    OVERHEAD,
    REPLAY_WINDOW,
    Framer,
    Member,
    OverlayConfig,
)

KEY = bytes(range(32))
# an IPv4 header (10.254.0.1 -> 10.254.0.2) and 8 bytes
PACKET = bytes.fromhex("4500001c00004000401100000afe00010afe0002") + b"x" * 8


def config(**changes: object) -> OverlayConfig:
    data: dict[str, object] = {
        "session_id": "s-1",
        "key": KEY.hex(),
        "listen_host": "10.232.0.1",
        "listen_port": 47001,
        "control": "/run/x.sock",
        "members": [
            {"index": 0, "address": "10.254.0.1", "node_host": "10.232.0.1", "node_port": 47001},
            {"index": 1, "address": "10.254.0.2", "node_host": "10.232.0.2", "node_port": 47002},
        ],
    }
    data.update(changes)
    return OverlayConfig.from_dict(data)


def test_a_sealed_packet_opens_to_itself_encrypted_behind_its_header() -> None:
    sender = Framer(KEY, "s-1", boot=b"BOOT")
    receiver = Framer(KEY, "s-1")
    frame = sender.seal(PACKET, index=0)
    assert len(frame) == len(PACKET) + OVERHEAD == len(PACKET) + HEADER_LEN + MAC_LEN
    assert HEADER_LEN == 13
    # version 2, sender index 0, boot, counter 0: the nonce is what follows the version
    assert frame[:HEADER_LEN] == bytes((2,)) + b"\x00\x00" + b"BOOT" + bytes(6)
    assert PACKET[:8] not in frame  # encrypted
    assert receiver.unseal(frame) == PACKET
    second = sender.seal(PACKET, index=2)  # another local member: the same counter goes on
    assert second[1:3] == b"\x00\x02"
    assert second[7:13] == (1).to_bytes(6, "big")
    assert receiver.unseal(second) == PACKET


def test_any_changed_bit_a_wrong_key_or_session_or_version_is_refused() -> None:
    frame = Framer(KEY, "s-1").seal(PACKET, index=0)
    receiver = Framer(KEY, "s-1")
    for i in range(len(frame)):
        for bit in range(8):
            flipped = bytearray(frame)
            flipped[i] ^= 1 << bit
            assert receiver.unseal(bytes(flipped)) == "bad_tag", (i, bit)
    assert Framer(bytes(32), "s-1").unseal(frame) == "bad_tag"
    assert Framer(KEY, "s-2").unseal(frame) == "bad_tag"  # another session's
    assert receiver.unseal(frame[:OVERHEAD]) == "bad_tag"  # no packet after the header
    assert receiver.unseal(b"") == "bad_tag"
    assert receiver.unseal(frame + b"extra") == "bad_tag"
    assert receiver.unseal(frame[:-1]) == "bad_tag"
    assert receiver.unseal(frame) == PACKET  # none of that spent its counter


def test_the_aead_key_is_derived_not_the_session_key() -> None:
    frame = Framer(KEY, "s-1").seal(PACKET, index=0)
    header, body = frame[:HEADER_LEN], frame[HEADER_LEN:]
    with pytest.raises(InvalidTag):
        ChaCha20Poly1305(KEY).decrypt(header[1:], body, header + b"s-1")


def test_a_replayed_datagram_is_refused() -> None:
    sender, receiver = Framer(KEY, "s-1"), Framer(KEY, "s-1")
    first, second = sender.seal(PACKET, index=0), sender.seal(PACKET, index=0)
    assert receiver.unseal(first) == PACKET
    assert receiver.unseal(first) == "replay"
    assert receiver.unseal(second) == PACKET
    assert receiver.unseal(second) == "replay"
    assert receiver.unseal(first) == "replay"


def test_reordering_within_the_window_is_accepted_older_than_it_refused() -> None:
    sender, receiver = Framer(KEY, "s-1"), Framer(KEY, "s-1")
    frames = [sender.seal(PACKET, index=0) for _ in range(REPLAY_WINDOW + 10)]
    newest = frames[REPLAY_WINDOW + 9]
    assert receiver.unseal(frames[10]) == PACKET
    assert receiver.unseal(frames[12]) == PACKET
    assert receiver.unseal(frames[11]) == PACKET  # late, within the window
    assert receiver.unseal(frames[11]) == "replay"
    assert receiver.unseal(newest) == PACKET  # the window moves up to 73
    assert receiver.unseal(frames[9]) == "replay"  # 64 below: out of the window
    assert receiver.unseal(frames[10]) == "replay"  # the oldest slot, seen
    for frame in reversed(frames[13 : REPLAY_WINDOW + 9]):  # the rest of it, newest first
        assert receiver.unseal(frame) == PACKET
    assert all(receiver.unseal(f) == "replay" for f in frames)


def test_a_far_jump_clears_the_window() -> None:
    sender, receiver = Framer(KEY, "s-1"), Framer(KEY, "s-1")
    frames = [sender.seal(PACKET, index=0) for _ in range(200)]
    assert receiver.unseal(frames[0]) == PACKET
    assert receiver.unseal(frames[199]) == PACKET
    assert receiver.unseal(frames[198]) == PACKET
    assert receiver.unseal(frames[0]) == "replay"
    assert receiver.unseal(frames[199]) == "replay"


def test_a_new_boot_is_accepted_and_the_old_ones_still_refuse_replays() -> None:
    receiver = Framer(KEY, "s-1")
    before = Framer(KEY, "s-1", boot=b"old!")
    old_frames = [before.seal(PACKET, index=0) for _ in range(3)]
    assert receiver.unseal(old_frames[2]) == PACKET
    after = Framer(KEY, "s-1", boot=b"new!")  # the sender restarted: its counter is 0
    new_frames = [after.seal(PACKET, index=0) for _ in range(3)]
    assert receiver.unseal(new_frames[0]) == PACKET
    assert receiver.unseal(old_frames[2]) == "replay"  # that boot's window is kept
    assert receiver.unseal(new_frames[0]) == "replay"
    assert receiver.unseal(old_frames[0]) == PACKET  # never seen, within its window
    assert receiver.unseal(new_frames[1]) == PACKET
    # another sender index has windows of its own
    other = Framer(KEY, "s-1", boot=b"new!")
    assert receiver.unseal(other.seal(PACKET, index=2)) == PACKET


def test_the_last_4_boots_of_a_sender_are_remembered() -> None:
    receiver = Framer(KEY, "s-1")
    boots = [Framer(KEY, "s-1", boot=bytes((i,)) * 4) for i in range(5)]
    frames = [b.seal(PACKET, index=0) for b in boots]
    for frame in frames:
        assert receiver.unseal(frame) == PACKET
    assert [receiver.unseal(f) for f in frames[1:]] == ["replay"] * 4
    # the oldest was forgotten: its datagram gets through once more (the documented gap)
    assert receiver.unseal(frames[0]) == PACKET
    assert receiver.unseal(frames[0]) == "replay"


def test_the_counter_is_never_spent_past_2_48() -> None:
    framer = Framer(KEY, "s-1")
    framer._next = 2**48 - 1
    last = framer.seal(PACKET, index=0)
    assert last[7:13] == b"\xff" * 6
    with pytest.raises(OverflowError):
        framer.seal(PACKET, index=0)
    assert Framer(KEY, "s-1").unseal(last) == PACKET


def test_a_bad_boot_is_refused() -> None:
    with pytest.raises(ValueError, match="boot"):
        Framer(KEY, "s-1", boot=b"abc")


def test_the_config_goes_through_json_and_never_shows_its_key() -> None:
    c = config(idle_exit_s=5)
    assert OverlayConfig.from_json(c.to_json()) == c
    assert c.members[1] == Member(
        index=1, address="10.254.0.2", node_host="10.232.0.2", node_port=47002
    )
    assert c.mtu == 1380
    assert KEY.hex() not in repr(c)


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"key": "ab" * 16}, "32 bytes"),
        ({"key": "zz" * 32}, "32 bytes"),
        ({"mtu": 100}, "mtu"),
        ({"members": []}, "members"),
        ({"extra": 1}, "unknown"),
        ({"control_owner": 1000}, "unknown"),
        (
            {
                "members": [
                    {"index": 65536, "address": "10.254.0.1", "node_host": "h", "node_port": 1}
                ]
            },
            "65535",
        ),
        (
            {
                "members": [
                    {"index": 0, "address": "10.254.0.1", "node_host": "h", "node_port": 1},
                    {"index": 1, "address": "10.254.0.1", "node_host": "h", "node_port": 1},
                ]
            },
            "twice",
        ),
        (
            {"members": [{"index": 0, "address": "fd00::1", "node_host": "h", "node_port": 1}]},
            "IPv4",
        ),
    ],
)
def test_a_bad_config_is_refused_saying_why(changes: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        config(**changes)

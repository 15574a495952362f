"""The overlay's wire framing and its configuration (workers/overlay.py)."""

from __future__ import annotations

import pytest

from workers.overlay import MAC_LEN, OVERHEAD, Framer, Member, OverlayConfig

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


def test_a_sealed_packet_opens_to_itself_with_a_16_byte_mac_in_front() -> None:
    framer = Framer(KEY, "s-1")
    frame = framer.seal(PACKET)
    assert len(frame) == len(PACKET) + OVERHEAD == len(PACKET) + 1 + MAC_LEN
    assert frame[0] == 1
    assert frame[OVERHEAD:] == PACKET
    assert framer.open(frame) == PACKET
    assert framer.header(PACKET) + PACKET == frame


def test_any_changed_bit_a_wrong_key_or_session_or_version_is_refused() -> None:
    framer = Framer(KEY, "s-1")
    frame = framer.seal(PACKET)
    for i in range(len(frame)):
        flipped = bytearray(frame)
        flipped[i] ^= 0x01
        assert framer.open(bytes(flipped)) is None, i
    assert Framer(bytes(32), "s-1").open(frame) is None
    assert Framer(KEY, "s-2").open(frame) is None  # another session's key use
    assert framer.open(frame[:OVERHEAD]) is None  # nothing after the MAC
    assert framer.open(b"") is None
    assert framer.open(frame + b"extra") is None


def test_the_config_goes_through_json_and_never_shows_its_key() -> None:
    c = config(idle_exit_s=5, control_owner=1000)
    assert OverlayConfig.from_json(c.to_json()) == c
    assert c.members[1] == Member(
        index=1, address="10.254.0.2", node_host="10.232.0.2", node_port=47002
    )
    assert c.mtu == 1380
    assert c.control_mode == 0o600
    assert KEY.hex() not in repr(c)


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"key": "ab" * 16}, "32 bytes"),
        ({"key": "zz" * 32}, "32 bytes"),
        ({"mtu": 100}, "mtu"),
        ({"members": []}, "members"),
        ({"extra": 1}, "unknown"),
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

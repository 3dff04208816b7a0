import random

import pytest

from dblog.model.positions import Position, binlog_file_index, int_to_lsn, lsn_to_int, mysql_position


def test_encoded_positions_sort_like_their_tuples():
    rng = random.Random(7)
    ps = [Position(rng.randrange(10**6), rng.randrange(2**64), rng.randrange(10**4)) for _ in range(2000)]
    assert sorted(p.encode() for p in ps) == [p.encode() for p in sorted(ps)]


def test_a_position_survives_encode_and_decode():
    p = Position(12, 2**63, 5)
    assert Position.decode(p.encode()) == p


def test_a_later_binlog_file_orders_after_any_position_of_an_earlier_one():
    assert mysql_position("mysql-bin.000002", 4, 0).encode() > mysql_position("mysql-bin.000001", 2**40, 99).encode()


def test_malformed_positions_and_binlog_names_are_refused():
    with pytest.raises(ValueError):
        Position.decode("1-2-3")
    with pytest.raises(ValueError):
        binlog_file_index("mysql-bin")
    with pytest.raises(ValueError):
        Position(-1, 0, 0)


def test_lsn_text_round_trips():
    assert lsn_to_int("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert int_to_lsn(lsn_to_int("16/B374D848")) == "16/B374D848"


def test_the_fast_encoder_agrees_with_position_encode():
    from dblog.model.positions import encode
    rng = random.Random(3)
    for _ in range(500):
        p = Position(rng.randrange(10**10), rng.randrange(10**20), rng.randrange(10**10))
        assert encode(p.major, p.minor, p.seq) == p.encode()

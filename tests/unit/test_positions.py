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


def test_postgresql_positions_keep_commit_and_change_order_on_both_sides_of_the_first_parts_ceiling():
    from dblog.model.positions import postgres_encode
    ceiling = 10**10 - 1  # LSN 2/540BE3FF: past it the LSN no longer fits a position's first part
    rng = random.Random(11)
    lsns = [ceiling + d for d in range(-3, 4)] + [0, 2**32, 2**63, 2**64 - 1]
    lsns += [rng.randrange(2**64) for _ in range(300)] + [rng.randrange(ceiling) for _ in range(300)]
    changes = [(lsn, index) for lsn in lsns for index in (0, 1, 7, 10**9)]
    assert sorted(changes, key=lambda c: postgres_encode(*c)) == sorted(changes)
    assert all(Position.decode(postgres_encode(*c)) for c in changes)  # every one is a valid position


def test_postgresql_positions_below_the_ceiling_keep_the_layout_deployments_have_staged():
    from dblog.model.positions import postgres_encode, postgres_position
    assert postgres_encode(0x16B3748, 3) == Position(0x16B3748, 3, 0).encode()
    assert postgres_position(lsn_to_int("3/0"), 5) == Position(10**10 - 1, 3 << 32, 5)

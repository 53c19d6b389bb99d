"""The Transfer Engine's lanes as the flow model keeps them (pure)."""

from testbed.flowsim.pair_lanes import Lanes


def test_a_pair_s_shards_wait_first_come_first_served_and_other_pairs_do_not():
    lanes = Lanes(4)
    assert lanes.admit("ab", [1, 2, 3]) == [1, 2, 3]
    assert lanes.admit("ab", [4, 5, 6]) == [4]  # one lane left
    assert lanes.admit("ac", [7]) == [7]  # another pair has its own
    assert lanes.admit("ab", []) == []
    assert lanes.release("ab", 2) == [5, 6]
    assert lanes.admit("ab", [8]) == []  # behind none now, but all four busy
    assert lanes.release("ab", 1, keep=lambda shard: shard != 8) == []  # abandoned
    assert lanes.admit("ab", [9]) == [9]


def test_no_lanes_no_waiting():
    lanes = Lanes(0)
    assert lanes.admit("ab", list(range(9))) == list(range(9))
    assert lanes.release("ab", 9) == []


def test_a_pair_s_first_write_goes_alone_then_its_lanes_fill():
    lanes = Lanes(4, first_alone=True)
    assert lanes.admit("ab", [1, 2, 3, 4]) == [1]
    assert lanes.admit("ac", [5, 6]) == [5]
    assert lanes.release("ab", 1) == [2, 3, 4]
    assert lanes.admit("ab", [7, 8]) == [7]

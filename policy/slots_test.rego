package cellgate.policy_test

import data.cellgate.policy

# shards(slot lists) and cells(slot lists) replace the two maps; the base has
# two shards (no slots) and one cell (no slots).
shards(lists) := [shard(sprintf("shard-%d", [i]), sprintf("CELLGATE_SHARD_%d_DSN", [i]), l) | some i, l in lists]

cells(lists) := [cell(sprintf("cell-%d", [i]), sprintf("http://cell-%d:8080", [i]), l) | some i, l in lists]

with_maps(s, c) := cfg([rep("/database/shards", shards(s)), rep("/cells", cells(c))])

shard_map_only(s) := with_maps(s, [[]])

cell_map_only(c) := with_maps([[]], c)

# coverage: valid maps

test_even_split_default_allowed if {
	count(deny_of(base)) == 0
}

test_explicit_ranges_allowed if {
	count(deny_of(shard_map_only([["0-8191"], ["8192-16383"]]))) == 0
}

test_ranges_out_of_order_and_split_allowed if {
	count(deny_of(shard_map_only([["10000-16383", "0-99"], ["100-9999"]]))) == 0
}

test_single_slots_allowed if {
	count(deny_of(shard_map_only([["0", "2-16383"], ["1"]]))) == 0
}

test_leading_zeros_allowed if {
	count(deny_of(shard_map_only([["00000-08191"], ["8192-16383"]]))) == 0
}

# coverage: gaps

test_gap_at_end_denied if {
	d := deny_of(shard_map_only([["0-4095"], ["4096-8191"]]))
	d == {"database.shards: slot 8192 has no shard (slots 8192-16383 are unowned)"}
}

test_gap_at_start_denied if {
	d := deny_of(cell_map_only([["1-16383"]]))
	d == {"cells: slot 0 has no cell"}
}

test_gap_in_middle_named_first if {
	d := deny_of(shard_map_only([["0-99", "200-16383"], ["101-150"]]))
	d == {"database.shards: slot 100 has no shard"}
}

test_gap_in_single_slot_form_denied if {
	d := deny_of(shard_map_only([["0-41", "43-16383"]]))
	d == {"database.shards: slot 42 has no shard"}
}

# coverage: overlaps

test_overlap_denied if {
	d := deny_of(shard_map_only([["0-200"], ["100-16383"]]))
	d == {"database.shards[1] (shard-1): slots 100-200 overlap shard-0 (database.shards[1].slots[0] \"100-16383\" vs database.shards[0].slots[0] \"0-200\")"}
}

test_overlap_one_slot_denied if {
	d := deny_of(cell_map_only([["0-8192"], ["8192-16383"]]))
	d == {"cells[1] (cell-1): slots 8192 overlap cell-0 (cells[1].slots[0] \"8192-16383\" vs cells[0].slots[0] \"0-8192\")"}
}

test_duplicate_range_denied if {
	d := deny_of(shard_map_only([["0-16383"], ["0-16383"]]))
	has(d, "database.shards[1] (shard-1): slots 0-16383 overlap shard-0")
}

# A gap and an overlap of the same size cancel out in any slot count; the
# fast path must still see them.
test_gap_and_overlap_that_cancel_denied if {
	d := deny_of(shard_map_only([["0-10", "10-20"], ["22-16383"]]))
	d == {"database.shards[0] (shard-0): slots 10 overlap shard-0 (database.shards[0].slots[1] \"10-20\" vs database.shards[0].slots[0] \"0-10\")"}
}

# An inverted range could cancel a duplicate one in the multiset test.
test_inverted_range_that_cancels_denied if {
	d := deny_of(shard_map_only([["0-16383", "100-50"], ["51-99"]]))
	d == {"database.shards[0].slots[1]: \"100-50\" starts after it ends (100 > 50)"}
}

# The general path (here forced by a leading zero) needs the same guard.
test_inverted_range_that_cancels_general_path_denied if {
	d := deny_of(shard_map_only([["0-16383", "0100-50"], ["51-99"]]))
	d == {"database.shards[0].slots[1]: \"0100-50\" starts after it ends (100 > 50)"}
}

# The slot count is right, but one slot lies past the end and one is missing.
test_slot_past_end_with_gap_denied if {
	d := deny_of(shard_map_only([["0-100"], ["102-16384"]]))
	d == {"database.shards[1].slots[0]: \"102-16384\" slot 16384 is out of range (slots are 0-16383)"}
}

# malformed specs

test_range_past_last_slot_denied if {
	d := deny_of(shard_map_only([["0-8191"], ["8192-16384"]]))
	d == {"database.shards[1].slots[0]: \"8192-16384\" slot 16384 is out of range (slots are 0-16383)"}
}

test_single_slot_past_last_denied if {
	d := deny_of(cell_map_only([["0-16383", "20000"]]))
	d == {"cells[0].slots[1]: \"20000\" slot 20000 is out of range (slots are 0-16383)"}
}

test_junk_spec_denied if {
	d := deny_of(shard_map_only([["0-8191"], ["8192..16383"]]))
	d == {"database.shards[1].slots[0]: \"8192..16383\" is not a slot (\"42\") or an inclusive range (\"0-8191\")"}
}

test_non_string_spec_denied if {
	d := deny_of(shard_map_only([["0-8191"], [8192]]))
	has(d, "database.shards[1].slots[0]: 8192 is not a slot")
}

# owners without slots

test_mixed_empty_owner_denied if {
	d := deny_of(shard_map_only([["0-16383"], [], ["5"]]))
	d == {"database.shards[1] (shard-1): no slots while other shards list theirs; give every shard slots, or none so they split evenly"}
}

test_null_slots_split_evenly if {
	c := cfg([rep("/database/shards/0/slots", null), rep("/database/shards/1/slots", null)])
	count(deny_of(c)) == 0
}

test_no_shards_denied if {
	d := deny_of(cfg([rep("/database/shards", [])]))
	d == {"database.shards: slot 0 has no shard (none listed)"}
}

test_no_cells_denied if {
	"cells: slot 0 has no cell (none listed)" in deny_of(cfg([rep("/cells", [])]))
}

# even split: 16384 = 3 * 5461 + 1, so the first owner gets 5462 slots:
# 0-5461, 5462-10922, 10923-16383.

test_even_split_sizes if {
	split := policy.even_split(3)
	split == [[0, 5461], [5462, 10922], [10923, 16383]]
	policy.even_split(1) == [[0, 16383]]

	# 1,000 owners: contiguous, gap-free, sizes 16 or 17. The 16,384-owner
	# bound is TestEvenSplitBound in Go (too slow for opa test's 5 s).
	many := policy.even_split(1000)
	count(many) == 1000
	many[0][0] == 0
	many[999][1] == 16383
	every k in numbers.range(1, 999) {
		many[k][0] == many[k - 1][1] + 1
	}
	every r in many {
		((r[1] - r[0]) + 1) in {16, 17}
	}
}

test_even_cells_over_matching_shards_allowed if {
	c := with_maps([["0-5461"], ["5462-10922"], ["10923-16383"]], [[], [], []])
	count(deny_of(c)) == 0
}

test_even_cells_over_misaligned_shards_denied if {
	c := with_maps([["0-5462"], ["5463-10922"], ["10923-16383"]], [[], [], []])
	deny_of(c) == {"database.shards[0] (shard-0): slots straddle cells cell-0, cell-1; a cell must own whole shards, so move the cell boundary to a shard boundary"}
}

# cells own whole shards

test_cell_owning_whole_shards_allowed if {
	c := with_maps([["0-4095"], ["4096-8191"], ["8192-12287"], ["12288-16383"]], [["0-4095", "8192-12287"], ["4096-8191", "12288-16383"]])
	count(deny_of(c)) == 0
}

test_shard_straddling_cells_denied if {
	c := with_maps([["0-8191"], ["8192-16383"]], [["0-4095"], ["4096-16383"]])
	deny_of(c) == {"database.shards[0] (shard-0): slots straddle cells cell-0, cell-1; a cell must own whole shards, so move the cell boundary to a shard boundary"}
}

test_multi_range_shard_in_two_cells_denied if {
	# shard-0's ranges each lie in one cell, but in different cells.
	c := with_maps([["0-4095", "8192-12287"], ["4096-8191", "12288-16383"]], [["0-8191"], ["8192-16383"]])
	deny_of(c) == {
		"database.shards[0] (shard-0): slots straddle cells cell-0, cell-1; a cell must own whole shards, so move the cell boundary to a shard boundary",
		"database.shards[1] (shard-1): slots straddle cells cell-0, cell-1; a cell must own whole shards, so move the cell boundary to a shard boundary",
	}
}

test_multi_range_shard_in_one_cell_allowed if {
	c := with_maps([["0-4095", "8192-12287"], ["4096-8191", "12288-16383"]], [["0-4095", "8192-12287"], ["4096-8191", "12288-16383"]])
	count(deny_of(c)) == 0
}

test_shard_over_two_ranges_of_one_cell_allowed if {
	# The cell boundary at 4096 falls inside shard-0, but both sides are cell-0.
	c := with_maps([["0-8191"], ["8192-16383"]], [["0-4095", "4096-8191"], ["8192-16383"]])
	count(deny_of(c)) == 0
}

test_containment_skipped_for_broken_map if {
	# Only the coverage problem is reported, not a cascade of straddles.
	c := with_maps([["0-8191"], ["8192-16000"]], [["0-100"], ["101-16383"]])
	deny_of(c) == {"database.shards: slot 16001 has no shard (slots 16001-16383 are unowned)"}
}

# more owners than slots

test_even_split_of_many_owners_allowed if {
	c := with_maps([[] | some _ in numbers.range(1, 100)], [[] | some _ in numbers.range(1, 100)])
	count(deny_of(c)) == 0
}

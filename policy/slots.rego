package cellgate.policy

# Slot maps. Shards (database.shards) and cells (cells) each assign the 16,384
# hash slots to owners. Both maps must cover every slot exactly once, and
# every shard must lie inside one cell, so that a cell owns whole shards.
#
# Everything here works on ranges, never on single slots. Evaluation cost
# matters (the generator and every booting server run this, and a map may
# hold 1,024 ranges), and Rego pays about a microsecond per element per pass,
# so each check has a fast path that only proves the map is fine, using as
# few passes as possible and builtins (string replacement, JSON, sort) for
# the bulk work.
# Only when the fast path fails does the slow path run, which parses every
# spec to [lo, hi], sorts, and walks adjacent pairs to name the first
# problem. Both paths are linear after a sort.

slot_count := 16384

max_slot := 16383

shard_list := arr(input.database.shards)

cell_list := arr(input.cells)

# shard_map and cell_map hold the state of a map, computed once per
# evaluation: "valid", or why it is not: "none", "too_many", "mixed" or
# "invalid". A valid map also says how its ranges are written: "even" (no
# owner lists slots) or "explicit" (specs holds every spec, owner by owner).
shard_map := slot_map(shard_list)

cell_map := slot_map(cell_list)

deny contains msg if {
	shard_map.state != "valid"
	some msg in slot_errors("database.shards", "shard", shard_list, shard_map.state)
}

deny contains msg if {
	cell_map.state != "valid"
	some msg in slot_errors("cells", "cell", cell_list, cell_map.state)
}

# lists holds each owner's slots as written; an owner without the key is
# skipped. The usual explicit map (every owner lists slots) is recognised
# with builtins alone; only the other cases pay a second pass, in which x[0]
# is undefined for [], null or a missing list.
slot_map(list) := classify(list, [o.slots | some o in list])

classify(list, lists) := {"state": "none"} if {
	count(list) == 0
} else := {"state": "too_many"} if {
	count(list) > slot_count
} else := explicit_map(array.flatten(lists)) if {
	count(lists) == count(list)
	not [] in lists
	not null in lists
} else := {"state": "valid", "kind": "even"} if {
	count([x | some o in list; x := o.slots; x[0]]) == 0
} else := {"state": "mixed"}

explicit_map(specs) := {"state": fast_tiling_state(concat(",", specs), count(specs)), "kind": "explicit", "fast": true, "specs": specs} if {
	regex.match(fast_specs_pattern, json.marshal(specs))
} else := {"state": general_tiling_state(specs), "kind": "explicit", "fast": false, "specs": specs}

# A map's state tells whether its specs cover every slot exactly once.
#
# Fast path, for the usual maps written as "a-b" ranges in plain decimal
# (checked once over the whole JSON array; leading zeros are excluded because
# JSON rejects them). It runs no Rego loop at all, only builtins over the
# joined text "a0-b0,a1-b1,...", because Rego costs about a microsecond per
# element per pass. With the n ranges sorted by lo, they tile 0..16383 iff
#   (1) a0 <= b0 < a1 <= b1 < ... (no range inverted, none reaching into the
#       next),
#   (2) the last hi is 16383, and
#   (3) sum(lo) - sum(hi) = n - 16384.
# By (1) every gap g(k) = a(k+1) - b(k) is at least 1, and by (2) the gaps
# sum to sum(lo) - sum(hi) - a0 + 16383, which (3) makes n - 1 - a0: so a0 is
# 0 and every gap is exactly 1. To test (1) with one sort, each lo is written
# as "1<lo>0" and each hi as "1<hi>5": the leading "1" keeps the order of
# numbers of any length, and the trailing 0 or 5 sorts a lo before an equal
# hi but after a smaller one, so (1) holds iff the flattened sorted pairs are
# already sorted. 1163835 encodes hi 16383. The sums in (3) come without
# parsing a number list: Go's duration parser adds up "0ns15ns16ns31ns" to
# sum(lo) + sum(hi), and "0ns15us16ns31us" to sum(lo) + 1000 * sum(hi).
#
# Anything else (single slots, leading zeros, junk) takes the per-spec parse.
fast_specs_pattern := `^\[(?:"(?:0|[1-9][0-9]{0,4})-(?:0|[1-9][0-9]{0,4})"(?:,"(?:0|[1-9][0-9]{0,4})-(?:0|[1-9][0-9]{0,4})")*)?\]$`

fast_tiling_state(joined, n) := "valid" if {
	encoded := json.unmarshal(concat("", ["[[1", strings.replace_n({"-": "0,1", ",": "5],[1"}, joined), "5]]"]))
	flat := array.flatten(sort(encoded))
	flat == sort(flat)
	flat[count(flat) - 1] == 1163835
	sums := time.parse_duration_ns(concat("", [strings.replace_n({"-": "ns", ",": "ns"}, joined), "ns"]))
	mixed := time.parse_duration_ns(concat("", [strings.replace_n({"-": "ns", ",": "us"}, joined), "us"]))
	sum_hi := (mixed - sums) / 999
	(sums - sum_hi) - sum_hi == n - slot_count
} else := "invalid"

# general_tiling_state parses each spec (a malformed one yields nothing) and
# compares multisets: the number of ranges holding slot x is
# #{lo <= x} - #{hi + 1 <= x}, which is 1 for every x exactly when the starts
# plus 16384 and the (hi + 1)s plus 0 are the same multiset, given lo <= hi
# for each range (an inverted range could otherwise cancel a duplicate one).
# The equality also bounds the ends: the largest hi + 1 must be 16384, or it
# would be a start of a range ending beyond it.
general_tiling_state(specs) := "valid" if {
	pairs := [b | some spec in specs; b := spec_bounds(spec)]
	nexts := [(p[1] + 1) | some p in pairs; p[0] <= p[1]]
	count(nexts) == count(specs)
	los := [p[0] | some p in pairs]
	sort(array.concat(los, [slot_count])) == sort(array.concat([0], nexts))
} else := "invalid"

# slot_pairs lists [lo, hi] of a valid map's ranges, in spec order, owner by
# owner (one range per owner for an even split). Only containment needs it.
slot_pairs(m, list) := range_pairs(m) if {
	m.kind == "explicit"
} else := even_split(count(list))

# range_pairs parses an explicit map's specs: a fast-path map's with one
# replacement ("0-15,32-47" gives [[0,15],[32,47]]) and json.unmarshal, any
# other spec by spec.
range_pairs(m) := json.unmarshal(concat("", ["[[", strings.replace_n({"-": ",", ",": "],["}, concat(",", m.specs)), "]]"])) if {
	m.fast
} else := [b | some spec in m.specs; b := spec_bounds(spec)]

# even_split gives owner i of n a contiguous block of 16384 div n slots, one
# more for the first 16384 mod n owners, in order: owners below r start at
# i*(q+1), the rest at i*q + r.
even_split(n) := [[lo, (lo + size) - 1] |
	q := floor(slot_count / n)
	r := slot_count % n
	some i in numbers.range(0, n - 1)
	lo := (i * q) + min([i, r])
	size := q + extra_slot(i, r)
]

extra_slot(i, r) := 1 if {
	i < r
} else := 0

# upto is numbers.range for a <= b and empty otherwise (numbers.range counts
# down when a > b).
upto(a, b) := numbers.range(a, b) if {
	a <= b
} else := []

# Slow path: messages --------------------------------------------------------------

slot_errors(base, noun, _, "none") := [sprintf("%s: slot 0 has no %s (none listed)", [base, noun])]

slot_errors(base, noun, list, "too_many") := [sprintf("%s: %d %ss cannot split %d slots; each needs at least one", [base, count(list), noun, slot_count])]

slot_errors(base, noun, list, "mixed") := [sprintf("%s[%d] (%s): no slots while other %ss list theirs; give every %s slots, or none so they split evenly", [base, i, o.name, noun, noun]) |
	some i, o in list
	not o.slots[0]
]

slot_errors(base, noun, list, "invalid") := errs if {
	malformed := [sprintf("%s[%d].slots[%d]: %s %s", [base, i, j, json.marshal(spec), why]) |
		some i, o in list
		some j, spec in o.slots
		why := spec_problem(spec)
	]
	errs := invalid_errors(base, noun, list, malformed)
}

# Malformed specs come first: a coverage walk over them would only repeat the
# problem in a more confusing form.
invalid_errors(base, noun, list, malformed) := malformed if {
	count(malformed) > 0
} else := coverage_errors(base, noun, list, sort([[b[0], b[1], i, j] |
	some i, o in list
	some j, spec in o.slots
	b := spec_bounds(spec)
]))

# spec_bounds parses "42" to [42, 42] and "0-8191" to [0, 8191], and is
# undefined for anything else. The pattern guards to_number, whose error
# would abort the whole evaluation.
spec_bounds(spec) := [to_number(p[0]), to_number(p[count(p) - 1])] if {
	is_string(spec)
	regex.match(`^[0-9]{1,5}(-[0-9]{1,5})?$`, spec)
	p := split(spec, "-")
}

spec_problem(spec) := "is not a slot (\"42\") or an inclusive range (\"0-8191\")" if {
	not spec_bounds(spec)
} else := sprintf("starts after it ends (%d > %d)", [b[0], b[1]]) if {
	b := spec_bounds(spec)
	b[0] > b[1]
} else := sprintf("slot %d is out of range (slots are 0-%d)", [b[1], max_slot]) if {
	b := spec_bounds(spec)
	b[1] > max_slot
}

# coverage_errors names the first problem in slot order, given ranges
# [lo, hi, owner, spec] sorted by lo. Up to the first pair that does not abut
# (lo == previous hi + 1) the ranges tile 0..hi exactly, so comparing adjacent
# pairs classifies that first problem correctly; pairs after it are not
# trusted, which is why only one message comes out.
coverage_errors(base, noun, list, sorted) := [gap_message(base, noun, 0, sorted[0][0] - 1)] if {
	sorted[0][0] > 0
} else := [msg] if {
	breaks := [k |
		some k in upto(1, count(sorted) - 1)
		sorted[k][0] != sorted[k - 1][1] + 1
	]
	count(breaks) > 0
	k := min(breaks)
	msg := break_message(base, noun, list, sorted[k - 1], sorted[k])
} else := [gap_message(base, noun, last + 1, max_slot)] if {
	last := sorted[count(sorted) - 1][1]
	last < max_slot
} else := []

gap_message(base, noun, lo, hi) := sprintf("%s: slot %d has no %s", [base, lo, noun]) if {
	lo == hi
} else := sprintf("%s: slot %d has no %s (slots %d-%d are unowned)", [base, lo, noun, lo, hi])

break_message(base, noun, list, prev, cur) := gap_message(base, noun, prev[1] + 1, cur[0] - 1) if {
	cur[0] > prev[1] + 1
} else := sprintf("%s[%d] (%s): slots %s overlap %s (%s vs %s)", [
	base, cur[2], list[cur[2]].name,
	slot_text(cur[0], min([cur[1], prev[1]])),
	list[prev[2]].name,
	range_source(base, list, cur), range_source(base, list, prev),
])

slot_text(lo, hi) := sprintf("%d", [lo]) if {
	lo == hi
} else := sprintf("%d-%d", [lo, hi])

# range_source names where a range was written: database.shards[1].slots[0] "0-200".
range_source(base, list, r) := sprintf("%s[%d].slots[%d] %s", [base, r[2], r[3], json.marshal(list[r[2]].slots[r[3]])])

# Cells own whole shards ------------------------------------------------------------
#
# Runs only when both maps are valid. Fast path, the common layout: every
# shard has one range and every cell range starts where a shard range starts.
# Then no cell boundary falls inside a shard, so each shard lies in one cell.

shards_in_cells if {
	one_range_per_shard
	cells_start_at_shard_starts
}

one_range_per_shard if shard_map.kind == "even"

one_range_per_shard if count(shard_map.specs) == count(shard_list)

# cells_start_at_shard_starts: every cell range starts where a shard range
# starts, so no cell boundary falls inside a shard range.
cells_start_at_shard_starts if count(cell_starts - shard_starts) == 0

shard_starts := slot_starts(shard_map, shard_list)

cell_starts := slot_starts(cell_map, cell_list)

# slot_starts is the set of a valid map's range starts, as decimal strings.
# For a fast-path map one replacement turns "0-15,16-31" into the JSON object
# {"0":15,"16":31}, whose keys are the starts, with no Rego loop.
slot_starts(m, list) := object.keys(json.unmarshal(concat("", ["{\"", strings.replace_n({"-": "\":", ",": ",\""}, concat(",", m.specs)), "}"]))) if {
	m.fast
} else := {format_int(p[0], 10) | some p in slot_pairs(m, list)}

# Otherwise (shards with several ranges, or a cell boundary inside a shard)
# each shard's cells are found with sorts, linear after them. A map's ranges,
# sorted as [lo, hi, owner], partition the slots, so the range holding a point
# x is the last one starting at or before x. Merging the ranges with the
# points, written [x, point_marker, r, payload] (r: the point's rank), and
# sorting finds it without a search: a point at position p has exactly r
# points and p - r ranges before it (a range starting at x sorts first, as
# hi < point_marker), so range p - r - 1 holds x. Points are given as
# [x, _, payload], the shape of a range, so one map's ranges can serve as
# points into the other.
#
# The cells of a shard are the cells holding its range starts, plus the cells
# whose range starts fall inside the shard (cell starts that are no shard
# start; usually none).

point_marker := 1000000000

shard_sorted := sorted_ranges(shard_map, shard_list)

cell_sorted := sorted_ranges(cell_map, cell_list)

# sorted_ranges lists a valid map's ranges as [lo, hi, owner], sorted. Specs
# are in owner order, so one pass over the owners' lists gives each spec's
# owner.
sorted_ranges(m, list) := sort([[p[0], p[1], owners[k]] | some k, p in range_pairs(m)]) if {
	m.kind == "explicit"
	owners := [i | some i, o in list; some _ in o.slots]
} else := [[p[0], p[1], i] | some i, p in even_split(count(list))]

# holders maps ascending points [x, _, payload] to the set of
# [payload, owner of the range holding x].
holders(sorted, points) := {[e[3], sorted[(p - e[2]) - 1][2]] |
	marker := point_marker
	merged := sort(array.concat(sorted, [[pt[0], marker, r, pt[2]] | some r, pt in points]))
	some p, e in merged
	e[1] == marker
}

# shard_cells holds [shard, cell] for every cell a shard's slots touch.
# When both maps cut the slots at the same places (cells list exactly the
# shards' ranges, the usual layout) and write them the same way (fast-path
# specs are plain decimal), every shard spec is also a cell spec, so a lookup
# by spec text replaces the merge.
shard_cells := {[i, cell_of[spec]] | some i, o in shard_list; some spec in o.slots} if {
	same_cuts
} else := start_cells | inner_cells

same_cuts if {
	shard_map.fast
	cell_map.fast
	count(shard_map.specs) == count(cell_map.specs)
	cells_start_at_shard_starts
}

cell_of := {spec: i | some i, o in cell_list; some spec in o.slots}

start_cells := holders(cell_sorted, shard_sorted)

inner_cells := {[shard, cell] |
	not cells_start_at_shard_starts
	missing := cell_starts - shard_starts
	cell_at := {c[0]: c[2] | some c in cell_sorted}
	points := sort([[x, x, cell_at[x]] | some s in missing; x := to_number(s)])
	some pair in holders(shard_sorted, points)
	[cell, shard] := pair
}

deny contains msg if {
	shard_map.state == "valid"
	cell_map.state == "valid"
	not shards_in_cells
	count(shard_cells) > count(shard_list)
	pairs := sort(shard_cells)
	firsts := array.concat([0], [k |
		some k in upto(1, count(pairs) - 1)
		pairs[k - 1][0] != pairs[k][0]
	])
	some b, first in firsts
	last := run_end(pairs, firsts, b)
	last > first
	shard := pairs[first][0]
	names := [n | some k in numbers.range(first, last); n := cell_list[pairs[k][1]].name]
	msg := sprintf("database.shards[%d] (%s): slots straddle cells %s; a cell must own whole shards, so move the cell boundary to a shard boundary", [shard, shard_list[shard].name, concat(", ", names)])
}

run_end(pairs, firsts, b) := firsts[b + 1] - 1 if {
	b + 1 < count(firsts)
} else := count(pairs) - 1

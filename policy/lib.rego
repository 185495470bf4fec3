# Package cellgate.policy holds the cross-field rules of a cellgate spec. CUE
# already checks every field's type, range and enum; these rules check what
# one field cannot say alone. The generator evaluates them over the exported
# `config` JSON, and the server re-checks its final config at boot with the
# same embedded files.
#
# Two sets come out: deny (the spec is wrong; generation and boot stop) and
# warn (legal but risky). Every message starts with the spec path it is about.
#
# Input may come from Go (the boot check), where an empty list can arrive as
# null, so lists are read through arr().
package cellgate.policy

# arr returns x when it is an array and [] otherwise (null, missing).
arr(x) := x if {
	is_array(x)
} else := []

# num returns obj[key] when it is a number and 0 otherwise, so a missing
# setting reads as its "off" value.
num(obj, key) := v if {
	v := obj[key]
	is_number(v)
} else := 0

# duration_ns reads a duration: a Go duration string as the spec writes it
# ("30s"), or a number of nanoseconds, which is how a Go time.Duration
# marshals if the server hands over its typed config.
duration_ns(x) := x if {
	is_number(x)
} else := time.parse_duration_ns(x) if {
	is_string(x)
}

# tenancy_enabled is true only for an explicit enabled: true.
tenancy_enabled if input.tenancy.enabled == true

# tenant_caps lists the per-tenant caps that are on, in a fixed order.
tenant_caps := [k |
	some k in ["max_concurrent_requests", "max_db_connections", "rate_per_second"]
	num(input.tenancy, k) > 0
]

# duplicates finds equal keys in one list by sorting [key, index] pairs, so a
# list of 1,024 names costs n log n rather than n². Each result is
# [index, earlier index, key]: the earlier index is the previous entry with
# the same key, so a name used three times yields two results.
duplicates(keys) := [[s[k][1], s[k - 1][1], s[k][0]] |
	s := sort([[key, i] | some i, key in keys; key != null])
	count(s) > 1
	some k in numbers.range(1, count(s) - 1)
	s[k][0] == s[k - 1][0]
]

# route_key is a route's identity as Echo sees it: method plus path with
# every {param} segment reduced to ":", since "/orders/{id}" and
# "/orders/{oid}" are the same node in Echo's router (one shadows the
# other).
route_key(r) := sprintf("%s %s", [r.method, route_shape(r.path)])

route_shape(path) := concat("/", [seg |
	some s in split(path, "/")
	seg := param_shape(s)
])

param_shape(s) := ":" if {
	startswith(s, "{")
} else := s

# route_label names a route in messages: routes[3] (POST /orders).
route_label(i, r) := sprintf("routes[%d] (%s %s)", [i, r.method, r.path])

package cellgate.policy

# Server and admission engine.

# Paths the server serves itself, before any app route: probes are always
# public, /admin/* is guarded by the admin token.
reserved_route(path) if path in {"/healthz", "/readyz", "/metrics", "/admin"}

reserved_route(path) if startswith(path, "/admin/")

deny contains msg if {
	some i, r in arr(input.routes)
	reserved_route(r.path)
	msg := sprintf("%s: %s is served by cellgate itself (probes /healthz, /readyz, /metrics; /admin/*); choose another path", [route_label(i, r), r.path])
}

# server.cell picks this process's cell from cells (per-cell deploy files set
# it; empty means the only cell). A name that is not a cell would make the
# process serve no slots.
deny contains msg if {
	name := object.get(input.server, "cell", "")
	name != ""
	not cell_names[name]
	msg := sprintf("server.cell: %s is not one of cells[].name (%s); name the cell this process serves, or leave it empty for a single cell", [json.marshal(name), cell_name_list])
}

cell_name_list := concat(", ", sort(cell_names)) if {
	count(cell_names) <= 8
} else := sprintf("%d cells", [count(cell_names)])

# An unlimited line (funding 0) never runs empty, so an overage allowance
# can never be used.
warn contains msg if {
	num(input.admission, "funding") == 0
	o := num(input.admission, "overage_allowance")
	o > 0
	msg := sprintf("admission.overage_allowance: %d has no effect while admission.funding is 0 (unlimited)", [o])
}

# Leases are taken in whole chunks: when the line is smaller than one lease
# per shard, the first shards drain it and the others reject admissions while
# units sit unspent in their neighbours' leases.
warn contains msg if {
	funding := num(input.admission, "funding")
	funding > 0
	lease := num(input.admission, "lease_size")
	shards := num(input.admission, "shards")
	shards > 1
	lease * shards > funding
	msg := sprintf("admission.lease_size: %d units × %d shards is more than admission.funding (%d); some shards would find the line empty while units sit in other shards' leases; lower lease_size to at most funding / shards (%d)", [lease, shards, funding, max([1, floor(funding / shards)])])
}

# net/http's read_timeout bounds the whole request, the body included, so a
# body_read_timeout at or above it never fires.
warn contains msg if {
	b := duration_ns(input.server.body_read_timeout)
	r := duration_ns(input.server.read_timeout)
	b > 0
	r > 0
	b >= r
	msg := sprintf("server.body_read_timeout: %s is not below server.read_timeout (%s), which bounds the whole request; it has no effect; set it below read_timeout", [input.server.body_read_timeout, input.server.read_timeout])
}

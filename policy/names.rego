package cellgate.policy

# Uniqueness. Names become Go identifiers, metric label values, table and
# environment lookups; two equal ones would collide in generated code or
# route traffic to the wrong place. Each list is first collected into a set
# (one pass); only when the set is smaller than the list does the sorting
# duplicates() run to name the culprits.

shard_names := {s.name | some s in shard_list}

shard_dsn_envs := {s.dsn_env | some s in shard_list}

deny contains msg if {
	count(shard_names) < count(shard_list)
	some d in duplicates([s.name | some s in shard_list])
	msg := sprintf("database.shards[%d].name: %s is also database.shards[%d].name; shard names must be unique", [d[0], json.marshal(d[2]), d[1]])
}

# Two shards reading one DSN variable are one database counted twice: the
# same tenants would look split across two pools.
deny contains msg if {
	count(shard_dsn_envs) < count(shard_list)
	some d in duplicates([s.dsn_env | some s in shard_list])
	msg := sprintf("database.shards[%d].dsn_env: %s is also database.shards[%d].dsn_env; each shard needs its own database", [d[0], json.marshal(d[2]), d[1]])
}

cell_names := {c.name | some c in cell_list}

deny contains msg if {
	count(cell_names) < count(cell_list)
	some d in duplicates([c.name | some c in cell_list])
	msg := sprintf("cells[%d].name: %s is also cells[%d].name; cell names must be unique", [d[0], json.marshal(d[2]), d[1]])
}

# URLs compare without case and without a trailing slash, as the router
# would treat them.
deny contains msg if {
	urls := [lower(trim_suffix(c.url, "/")) | some c in cell_list]
	count({u | some u in urls}) < count(urls)
	some d in duplicates(urls)
	msg := sprintf("cells[%d].url: %s is also cells[%d].url; each cell is its own deployment", [d[0], json.marshal(cell_list[d[0]].url), d[1]])
}

deny contains msg if {
	some d in duplicates([route_key(r) | some r in routes])
	msg := sprintf("%s: same method and path as %s; Echo cannot register both", [route_label(d[0], routes[d[0]]), route_label(d[1], routes[d[1]])])
}

# A handler name is one method of the generated Handler interface.
deny contains msg if {
	some d in duplicates([r.handler | some r in routes])
	msg := sprintf("routes[%d].handler: %s is also routes[%d].handler; each route needs its own method on the generated Handler interface", [d[0], json.marshal(d[2]), d[1]])
}

// Package shardmap keeps a cell's shard map live: which shard holds each
// slot, and which slots are frozen while a range moves between two shards
// of the cell.
//
// A cell boots with the map of its config (database.shards). The control
// database then holds the map in force as one versioned record
// (cellgate_shard_map, this package's own migrations): the first process
// of the cell to start writes it from its config, and from then on the
// record wins over the config, so a range moved between shards stays moved
// across restarts. A Watcher in every process follows the record with
// LISTEN/NOTIFY and a periodic resync, compiles each new version and
// installs it in the process's shards.Set; the request path reads it with
// one atomic load. A record that does not check out (an unknown shard,
// overlapping or missing slots, a slot outside 0..16383) is refused when
// written through this package, and ignored with an error log and a metric
// when found, the last good map staying in force.
//
// The slot-move tool drives a move with Freeze, Switch and Unfreeze, each
// returning the version it wrote, and WaitApplied, which returns once every
// live process of the cell has recorded that it applies that version and,
// with Drain, that none of its requests routed by an older map is left
// (cellgate_shard_map_applied: one row per process, its version, its
// requests on older maps and a heartbeat).
//
// # Concurrency contract
//
// Record values are plain data; their methods return new values. Every
// Watcher method is safe for concurrent use; Run is called once per
// watcher. The write functions are safe to call from any number of
// processes at once: each runs in one transaction that locks the record's
// row, so writes are applied one after another and each gets its own
// version.
package shardmap

// Package plans resolves a tenant's limits from its plan and overrides, and
// keeps the cell's live tenant table (cellgate_tenants in the control
// database) in memory.
//
// A Catalog is the spec's plans (tenancy.plans, or the one implicit plan of
// the top-level fields). A Snapshot is an immutable view of the table over
// a catalog; Resolve applies the precedence override > authenticated claim
// > table > default plan. A Store loads snapshots from the control database,
// follows LISTEN/NOTIFY and a periodic version check, and publishes each
// snapshot through an atomic pointer.
//
// # Concurrency contract
//
// Catalog and Snapshot are immutable and safe for concurrent use; Resolve
// takes no lock and allocates nothing. Every Store method is safe for
// concurrent use: Snapshot and JobLimits are one atomic load plus map
// lookups; Run is called once; writes (Set, Unset, ...) go to the database
// and are seen by every Store of the cell through its notification or its
// next resync. With the database down the last snapshot stays in force.
package plans

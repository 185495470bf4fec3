// Package cells maps tenants to cells: identical, independent deployments
// of the service, each owning a set of the 16,384 hash slots (package
// slots, the same hash the database shards use, so a cell can own whole
// shards). It is pure: no network, no HTTP server, no database.
//
// It holds two things:
//
//   - CellRouter: the slot map from tenant (or key, or slot) to CellSpec,
//     and URLFor. Built from specs that must cover every slot exactly once;
//     SlotMap is its file form (the router's slot map file).
//   - Deploy output: DeployFiles renders the per-cell config overlays and
//     the router's slot map from a spec, as bytes (the generator writes
//     them to gen/deploy).
//
// The router process that serves a CellRouter is package
// internal/cells/router; moving slots between cells is internal/cells/slotmove.
//
// Concurrency contract: a CellRouter and a SlotMap's Build result are
// immutable and safe for concurrent use. DeployFiles and the SlotMap
// helpers are pure functions (WriteSlotMap and WriteFileAtomic write one
// file each).
package cells

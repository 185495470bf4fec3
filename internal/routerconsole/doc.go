// Package routerconsole is the cell router's own console at the router's
// /admin/: every cell of the slot map in use with its health, passive and
// active ejections, last error and down-since time, the router's refusals
// for it (cell down, cell cap, tenant cap, slot frozen) and its traffic
// over the last ten minutes as a chart drawn on the server; the slot map
// with its generation, digest and last reloads; a link to each cell's own
// console. The same under /admin/api/ as JSON (cells, slotmap, traffic).
//
// It knows net/http only, like the router (no Echo): cmd/router hands
// internal/cells/router a hook that builds it from the running proxy (see
// router.Options.Console). The admin token (router.admin_token_env)
// reads; there is nothing to change here, so there is no operator role.
// Scripts send "Authorization: Bearer <token>"; a browser trades the token
// for a session at /admin/login (consoleauth, as the cells' console does),
// kept in this router process's memory and ended by its logout, after at
// most 15 minutes unused, or by a restart; other copies of the router never
// know it. The one form that changes something (log out) carries the
// session's CSRF secret.
//
// Nothing is added to the router's request path: the traffic chart is fed
// by a sampler that reads the proxy's existing per-cell counters every
// SampleEvery into fixed rings (Samples points per cell and series, cells
// of the map in use only), and the pages read the proxy's atomics and
// small per-cell mutexes that only error and health paths take.
//
// Concurrency: a Console is safe for concurrent use; its rings are guarded
// by one mutex the sampler holds for a few microseconds every SampleEvery.
package routerconsole

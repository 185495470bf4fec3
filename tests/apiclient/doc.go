// Package apiclient proves the committed OpenAPI document is enough for a
// real client generator: client/ is what oapi-codegen (pinned in this
// module's go.mod as a tool) generates from gen/openapi-3.0.json, and the
// test drives a real cell with it (sign up, create an order, read it back,
// a bad path parameter refused).
//
// It is a module of its own so that the service's module never carries
// the generator or its runtime. `make test` runs it; `make drift` checks
// that client/ is what the generator writes today (`make apiclient`
// rewrites it).
package apiclient

package client

// client.go is what oapi-codegen, pinned in ../go.mod, writes from the
// committed gen/openapi-3.0.json (`make apiclient` runs this); `make drift`
// fails when it differs. Never edit it by hand.
//go:generate go tool oapi-codegen -generate types,client -package client -o client.go ../../../gen/openapi-3.0.json

// Package archtest holds the module's import rules test: the table in
// docs/architecture.md (between the import-rules markers) says which of the
// module's packages may import which and what each must never link, and
// TestArchitecture checks `go list -deps ./...` of the module against it.
//
// It is its own package so `make arch` (run by `make check`) lists the
// import graph without building any binary, unlike the end-to-end tests in
// tests/. It has no code outside its tests; nothing is shared or concurrent.
package archtest

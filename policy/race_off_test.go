//go:build !race

package policy

// raceEnabled: see race_on_test.go.
const raceEnabled = false

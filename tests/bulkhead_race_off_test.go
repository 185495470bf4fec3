//go:build !race

package tests

// underRace is false without the race detector; see bulkhead_race_on_test.go.
const underRace = false

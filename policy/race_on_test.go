//go:build race

package policy

// raceEnabled: the race detector slows evaluation several times over, so
// long loops shrink and the wall-clock budget check compares CPU time only.
const raceEnabled = true

//go:build race

package tests

// underRace: the race detector slows a loopback request about twentyfold
// on a shared 2-core host, so the leak test sends 5,000 requests instead of
// 100,000 (same mix).
const underRace = true

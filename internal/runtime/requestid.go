package runtime

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
)

// requestIDPrefix makes ids unique across processes and restarts; the
// counter makes them unique within one. Request ids are correlation keys,
// not secrets, so they need no per-request entropy: Echo's default reads
// crypto/rand for every request, which cost more than the rest of the
// global middleware together (BenchmarkChain).
var (
	requestIDPrefix = newRequestIDPrefix()
	requestIDSeq    atomic.Uint64
)

func newRequestIDPrefix() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("runtime: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// newRequestID returns "<16 hex digits of the process>-<sequence in base 36>".
func newRequestID() string {
	var buf [32]byte
	b := append(buf[:0], requestIDPrefix...)
	b = append(b, '-')
	b = strconv.AppendUint(b, requestIDSeq.Add(1), 36)
	return string(b)
}

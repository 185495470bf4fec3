// Package requestid makes the correlation ids that cells and the router put
// in the X-Request-Id header of every answer (keeping a client's own id).
//
// An id is a random per-process prefix and a counter: unique across
// processes and restarts without a random read per request. Request ids are
// correlation keys, not secrets, so they need no per-request entropy (Echo's
// default reads crypto/rand for every request, which cost more than the
// rest of the server's global middleware together).
//
// Concurrency: New is safe for concurrent use; it is one atomic add.
package requestid

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
)

// Header is the request and response header, in canonical MIME form so
// it can index an http.Header map directly.
const Header = "X-Request-Id"

var (
	prefix = newPrefix()
	seq    atomic.Uint64
)

func newPrefix() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("requestid: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// New returns "<16 hex digits of the process>-<sequence in base 36>".
func New() string {
	var buf [32]byte
	n := copy(buf[:], prefix)
	buf[n] = '-'
	return string(strconv.AppendUint(buf[:n+1], seq.Add(1), 36))
}

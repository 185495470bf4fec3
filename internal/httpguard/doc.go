// Package httpguard is the hardening the cell and the router share at the
// HTTP edge, on net/http alone (no Echo), so that both refuse the same
// bytes with the same answer:
//
//   - a connection wrapper (Listener, Conn) that classifies every request
//     head as net/http reads it, for the framing net/http accepts and then
//     normalises away (Content-Length with Transfer-Encoding, folded header
//     lines, Transfer-Encoding on HTTP/1.0), and that fixes a head's
//     deadline at its first byte;
//   - Rules.Check, the refusals of a parsed request before anything is
//     spent on it: that head verdict, the protocol version, the method,
//     and a Connection header naming an identity header;
//   - Body, the body deadline and minimum-rate guard of a request body;
//   - Problem, the one shape of every refusal: RFC 9457 problem details
//     (application/problem+json) with the stable code as an extension
//     member, and the refusals above as values.
//
// Concurrency contract: Problems and Rules are immutable and safe for
// concurrent use. A Conn is used by net/http as any net.Conn (reads on one
// goroutine at a time); its head verdicts are handed to request goroutines
// under a mutex. A Body is read by one goroutine at a time; whether it
// failed (Failed) may be asked from any goroutine.
package httpguard

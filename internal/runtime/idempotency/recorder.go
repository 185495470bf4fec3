package idempotency

import (
	"bytes"
	"cmp"
	"net/http"
	"strconv"
)

// answer is a handler's answer as stored.
type answer struct {
	status      int
	contentType string
	body        []byte
}

// recorder buffers a handler's answer: the answer is sent only once it is
// stored, so a client never sees an answer a retry would not replay.
// Headers go to the real response's header map at once (nothing is sent
// before flush); only the content type is stored for replays.
type recorder struct {
	header http.Header
	status int
	buf    bytes.Buffer
}

// Header implements http.ResponseWriter.
func (r *recorder) Header() http.Header { return r.header }

// WriteHeader implements http.ResponseWriter.
func (r *recorder) WriteHeader(status int) {
	r.status = cmp.Or(r.status, status)
}

// Write implements http.ResponseWriter.
func (r *recorder) Write(p []byte) (int, error) {
	r.status = cmp.Or(r.status, http.StatusOK)
	return r.buf.Write(p)
}

// Flush is a no-op: the answer is buffered whole, so a streaming handler
// gets no early bytes on an idempotent route.
func (r *recorder) Flush() {}

// answer returns what the handler answered.
func (r *recorder) answer() answer {
	st := r.status
	st = cmp.Or(st, http.StatusOK)
	return answer{status: st, contentType: r.header.Get("Content-Type"), body: r.buf.Bytes()}
}

// flush sends the buffered answer to w.
func (r *recorder) flush(w http.ResponseWriter) error {
	a := r.answer()
	w.Header().Set("Content-Length", strconv.Itoa(len(a.body)))
	w.WriteHeader(a.status)
	_, err := w.Write(a.body)
	return err
}

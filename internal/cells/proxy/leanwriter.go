package proxy

import (
	"bufio"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// leanWriter is the http.ResponseWriter of the front server's own serving
// loop (front.go). It writes what net/http's server writes for the same
// handler calls, for the calls Proxy makes on the lean path and in its
// refusals: a 1xx head at once; the final head when the body starts, on a
// flush or at the end; Content-Length when the handler set it or when the
// whole body was written before the end without a flush, chunked
// otherwise; a sniffed Content-Type and a Date when missing; no body for
// HEAD, 1xx, 204 and 304; trailers declared in "Trailer" or set with
// http.TrailerPrefix; Connection: close once the server is shutting down.
// TestOwnLoopMatchesNetHTTP compares the two servers byte for byte (Date
// aside). It is not a general ResponseWriter: no Hijack, no request
// bodies, HTTP/1.1 requests only.
type leanWriter struct {
	bw      *bufio.Writer // the client connection's
	header  http.Header   // cleared per request, so the map is reused
	closing *atomic.Bool  // the front server's: Shutdown or Close began
	isHEAD  bool

	status        int   // 0 until the final WriteHeader
	contentLength int64 // -1: unknown
	written       int64 // body bytes the handler wrote
	committed     bool  // the final head is in bw
	chunked       bool
	done          bool     // the handler returned
	closeAfter    bool     // the connection cannot carry another request
	trailers      []string // declared in the Trailer header, canonical
	pending       []byte   // body bytes held before the head is committed
	keys          []string // the header's keys while a head is written
	scratch       [32]byte
}

// holdBytes is how much body is held before the head goes out, as
// net/http's bufferBeforeChunkingSize: a small answer written whole gets a
// Content-Length instead of chunks.
const holdBytes = 2048

func (w *leanWriter) reset(isHEAD bool) {
	clear(w.header)
	*w = leanWriter{bw: w.bw, header: w.header, closing: w.closing, isHEAD: isHEAD, contentLength: -1,
		trailers: w.trailers[:0], pending: w.pending[:0], keys: w.keys[:0]}
}

// Header implements http.ResponseWriter.
func (w *leanWriter) Header() http.Header { return w.header }

// WriteHeader implements http.ResponseWriter.
func (w *leanWriter) WriteHeader(code int) {
	if w.status != 0 {
		return // superfluous, as net/http (which also logs it)
	}
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		w.writeStatusLine(code)
		w.keys = w.keys[:0]
		for k := range w.header {
			w.keys = append(w.keys, k)
		}
		writeHeader(w.bw, w.header, w.keys, skipContentLength|skipTransferEncoding)
		_, _ = w.bw.WriteString("\r\n")
		_ = w.bw.Flush()
		return
	}
	w.status = code
	if cl := w.header.Get("Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			w.contentLength = v
		} else {
			delete(w.header, "Content-Length")
		}
	}
}

// Write implements http.ResponseWriter.
func (w *leanWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.written += int64(len(p))
	if w.contentLength != -1 && w.written > w.contentLength {
		return 0, http.ErrContentLength
	}
	if !w.committed {
		if len(w.pending)+len(p) <= holdBytes {
			w.pending = append(w.pending, p...)
			return len(p), nil
		}
		w.commitPending()
	}
	w.writeBody(p)
	return len(p), nil
}

// commitPending commits the head with the held bytes and writes them.
func (w *leanWriter) commitPending() {
	w.commit(w.pending)
	w.writeBody(w.pending)
	w.pending = w.pending[:0]
}

func (w *leanWriter) writeBody(p []byte) {
	if len(p) == 0 || w.isHEAD {
		return
	}
	if w.chunked {
		_, _ = w.bw.Write(strconv.AppendInt(w.scratch[:0], int64(len(p)), 16))
		_, _ = w.bw.WriteString("\r\n")
	}
	_, _ = w.bw.Write(p)
	if w.chunked {
		_, _ = w.bw.WriteString("\r\n")
	}
}

// FlushError sends the head and what the body has so far to the client;
// http.ResponseController.Flush calls it.
func (w *leanWriter) FlushError() error {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commitPending()
	}
	return w.bw.Flush()
}

// Flush implements http.Flusher.
func (w *leanWriter) Flush() { _ = w.FlushError() }

// finish ends the answer after the handler returned, as net/http's
// finishRequest, and reports whether the connection may carry another
// request.
func (w *leanWriter) finish() (keep bool, err error) {
	w.done = true
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commitPending()
	}
	if w.chunked {
		_, _ = w.bw.WriteString("0\r\n")
		w.writeTrailers()
		_, _ = w.bw.WriteString("\r\n")
	}
	if err := w.bw.Flush(); err != nil {
		return false, err
	}
	if w.contentLength != -1 && bodyAllowed(w.status) && !w.isHEAD && w.written != w.contentLength {
		return false, nil // the client would read the next answer as this body
	}
	return !w.closeAfter, nil
}

// commit writes the final head; p is the start of the body (net/http
// sniffs the Content-Type from it).
func (w *leanWriter) commit(p []byte) {
	w.committed = true
	h := w.header
	// The handler's keys, collected once: sorted and written below.
	keys := w.keys[:0]
	hasTrailers := false
	for k := range h {
		keys = append(keys, k)
		if strings.HasPrefix(k, http.TrailerPrefix) {
			hasTrailers = true
		}
	}
	w.keys = keys
	// Proxy never sets Transfer-Encoding; framing is decided here. The
	// handler's http.TrailerPrefix keys need no skipping: the ':' in them
	// makes them invalid names, which writeHeader drops.
	skip := skipTransferEncoding
	for _, v := range h["Trailer"] {
		hasTrailers = true
		for tok := range strings.SplitSeq(v, ",") {
			if k := http.CanonicalHeaderKey(strings.Trim(tok, " \t")); k != "" && !badTrailer(k) {
				w.trailers = append(w.trailers, k)
			}
		}
	}
	// What net/http adds is written after the handler's header, in its
	// order: Date, Content-Length, Content-Type, Connection,
	// Transfer-Encoding.
	var date, clen, ctype, conn string
	if w.done && !hasTrailers && bodyAllowed(w.status) && w.contentLength == -1 && (!w.isHEAD || len(p) > 0) {
		w.contentLength = int64(len(p))
		clen = strconv.Itoa(len(p))
	}
	if h.Get("Connection") == "close" {
		w.closeAfter = true
	}
	if w.closing.Load() {
		// As net/http once Shutdown began (keep-alives off): this is the
		// connection's last answer, and it says so in place of any
		// Connection the handler set.
		w.closeAfter = true
		skip |= skipConnection
		conn = "close"
	}
	if bodyAllowed(w.status) {
		if _, ok := h["Content-Type"]; !ok && h.Get("Content-Encoding") == "" && len(p) > 0 {
			ctype = http.DetectContentType(p)
		}
	} else {
		skip |= skipContentLength
		if w.status == http.StatusNotModified {
			skip |= skipContentType
		}
	}
	if _, ok := h["Date"]; !ok {
		date = httpDate()
	}
	if !w.isHEAD && bodyAllowed(w.status) && w.contentLength == -1 {
		w.chunked = true
		skip |= skipContentLength
	}
	w.writeStatusLine(w.status)
	writeHeader(w.bw, h, keys, skip)
	writeExtra(w.bw, "Date", date)
	writeExtra(w.bw, "Content-Length", clen)
	writeExtra(w.bw, "Content-Type", ctype)
	writeExtra(w.bw, "Connection", conn)
	if w.chunked {
		_, _ = w.bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	_, _ = w.bw.WriteString("\r\n")
}

// headerSkip is the set of a header's keys writeHeader leaves out.
type headerSkip uint8

const (
	skipConnection headerSkip = 1 << iota
	skipContentLength
	skipTransferEncoding
	skipContentType
)

func (s headerSkip) skips(k string) bool {
	switch k {
	case "Connection":
		return s&skipConnection != 0
	case "Content-Length":
		return s&skipContentLength != 0
	case "Transfer-Encoding":
		return s&skipTransferEncoding != 0
	case "Content-Type":
		return s&skipContentType != 0
	}
	return false
}

// writeHeader writes h's fields as http.Header.WriteSubset does with the
// keys skip names excluded: keys sorted, invalid names dropped (keys with
// http.TrailerPrefix among them), CR and LF
// in values turned into spaces and the values trimmed. keys holds h's
// keys (sorted here, in place). It allocates nothing, where WriteSubset
// wants an exclusion map per call and sorts through a pooled sorter.
func writeHeader(bw *bufio.Writer, h http.Header, keys []string, skip headerSkip) {
	slices.Sort(keys)
	for _, k := range keys {
		if skip.skips(k) || !validFieldName(k) {
			continue
		}
		for _, v := range h[k] {
			_, _ = bw.WriteString(k)
			_, _ = bw.WriteString(": ")
			writeTrimmedValue(bw, v)
			_, _ = bw.WriteString("\r\n")
		}
	}
}

// validFieldName reports whether k is a token, as httpguts'
// ValidHeaderFieldName.
func validFieldName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !tokenByte(k[i]) {
			return false
		}
	}
	return true
}

// writeTrimmedValue writes v as WriteSubset does: CR and LF turned into
// spaces, then leading and trailing spaces, tabs, CRs and LFs trimmed
// (textproto.TrimString).
func writeTrimmedValue(bw *bufio.Writer, v string) {
	i, j := 0, len(v)
	for i < j && asciiSpace(v[i]) {
		i++
	}
	for j > i && asciiSpace(v[j-1]) {
		j--
	}
	v = v[i:j]
	if !strings.ContainsAny(v, "\r\n") {
		_, _ = bw.WriteString(v)
		return
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		_ = bw.WriteByte(c)
	}
}

func asciiSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func writeExtra(bw *bufio.Writer, k, v string) {
	if v != "" {
		_, _ = bw.WriteString(k)
		_, _ = bw.WriteString(": ")
		_, _ = bw.WriteString(v)
		_, _ = bw.WriteString("\r\n")
	}
}

// writeTrailers writes the trailers of a chunked answer, as net/http's
// finalTrailers: keys set with http.TrailerPrefix and declared keys.
func (w *leanWriter) writeTrailers() {
	var t http.Header
	for k, vv := range w.header {
		if kk, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			if t == nil {
				t = http.Header{}
			}
			t[kk] = vv
		}
	}
	for _, k := range w.trailers {
		for _, v := range w.header[k] {
			if t == nil {
				t = http.Header{}
			}
			t.Add(k, v)
		}
	}
	if t != nil {
		_ = t.Write(w.bw)
	}
}

func (w *leanWriter) writeStatusLine(code int) {
	_, _ = w.bw.WriteString("HTTP/1.1 ")
	_, _ = w.bw.Write(strconv.AppendInt(w.scratch[:0], int64(code), 10))
	if text := http.StatusText(code); text != "" {
		_ = w.bw.WriteByte(' ')
		_, _ = w.bw.WriteString(text)
	} else {
		_, _ = w.bw.WriteString(" status code ")
		_, _ = w.bw.Write(strconv.AppendInt(w.scratch[:0], int64(code), 10))
	}
	_, _ = w.bw.WriteString("\r\n")
}

// bodyAllowed reports whether an answer with status code may have a body.
func bodyAllowed(code int) bool {
	return (code < 100 || code > 199) && code != http.StatusNoContent && code != http.StatusNotModified
}

// badTrailer reports whether k may not be a trailer (httpguts'
// ValidTrailerHeader list); net/http drops such declarations.
func badTrailer(k string) bool {
	switch k {
	case "Authorization", "Cache-Control", "Connection", "Content-Encoding", "Content-Length",
		"Content-Range", "Content-Type", "Expect", "Host", "Keep-Alive", "Max-Forwards", "Pragma",
		"Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection", "Range", "Realm", "Te",
		"Trailer", "Transfer-Encoding", "Www-Authenticate":
		return true
	}
	return false
}

// httpDate is the Date header value for now.
func httpDate() string { return time.Now().UTC().Format(http.TimeFormat) }

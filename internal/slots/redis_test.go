package slots

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestSlotMatchesRedisCluster asks a real cluster-enabled redis-server, the
// reference oracle named in the design, for CLUSTER KEYSLOT of a few thousand
// keys and compares with Slot. It never skips: a machine without Redis fails
// it, because passing silently would stop checking the one property shards
// and cells rely on.
func TestSlotMatchesRedisCluster(t *testing.T) {
	addr := startRedisCluster(t)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial redis at %s: %v", addr, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(60 * time.Second)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	w := bufio.NewWriter(conn)

	seed := uint64(time.Now().UnixNano())
	keys := redisTestKeys(rand.New(rand.NewPCG(seed, 0x5107)), 3000)
	const batch = 500 // pipelined, small enough that neither side's buffers fill
	braced := 0
	for start := 0; start < len(keys); start += batch {
		chunk := keys[start:min(start+batch, len(keys))]
		for _, k := range chunk {
			writeCommand(w, "CLUSTER", "KEYSLOT", k)
		}
		if err := w.Flush(); err != nil {
			t.Fatalf("write to redis: %v", err)
		}
		for _, k := range chunk {
			reply, err := readReply(r)
			if err != nil {
				t.Fatalf("CLUSTER KEYSLOT %q: %v", k, err)
			}
			want, ok := reply.(int64)
			if !ok {
				t.Fatalf("CLUSTER KEYSLOT %q: reply %#v, want an integer", k, reply)
			}
			got, err := Slot(k)
			if err != nil || int64(got) != want {
				t.Errorf("Slot(%q) = %d, %v; redis says %d (seed %d)", k, got, err, want, seed)
			}
			if bytes.IndexByte([]byte(k), '{') >= 0 {
				braced++
			}
		}
	}
	if braced < len(keys)/4 {
		t.Fatalf("only %d of %d keys had a '{'; the generator is not testing hash tags", braced, len(keys))
	}
}

// redisTestKeys returns n non-empty keys: the fixed vectors, then random
// keys of several shapes, many with braces in awkward places.
func redisTestKeys(rng *rand.Rand, n int) []string {
	keys := make([]string, 0, n)
	for _, v := range vectors {
		keys = append(keys, v.key)
	}
	keys = append(keys, "{", "}", "{}", "}{", "{{}}", "a{b", "a}b{c}d", "{\x00}", "\xff{\xfe}")
	const printable = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/{}{}"
	for len(keys) < n {
		var b []byte
		size := 1 + rng.IntN(48)
		switch rng.IntN(4) {
		case 0: // arbitrary bytes, binary-safe over RESP
			for range size {
				b = append(b, byte(rng.UintN(256)))
			}
		default: // key-like text, braces appear often
			for range size {
				b = append(b, printable[rng.IntN(len(printable))])
			}
		}
		if rng.IntN(3) == 0 { // plant a tag, possibly empty, anywhere
			at := rng.IntN(len(b) + 1)
			tag := []byte{'{'}
			for range rng.IntN(6) {
				tag = append(tag, printable[rng.IntN(len(printable))])
			}
			tag = append(tag, '}')
			b = append(b[:at], append(tag, b[at:]...)...)
		}
		keys = append(keys, string(b))
	}
	return keys
}

// startRedisCluster starts a cluster-enabled redis-server on free loopback
// ports in a temporary directory, waits until it answers PING, and kills it
// when the test ends. It returns the server's address.
func startRedisCluster(tb testing.TB) string {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if _, statErr := os.Stat("/usr/bin/redis-server"); statErr != nil {
			tb.Fatalf("redis-server is not installed (not on PATH, not /usr/bin/redis-server); "+
				"install it with `apt-get install redis-server` (make test does this: scripts/test-deps.sh): %v", err)
		}
		bin = "/usr/bin/redis-server"
	}
	var lastErr error
	for attempt := range 3 {
		addr, err := tryStartRedis(tb, bin, attempt)
		if err == nil {
			return addr
		}
		lastErr = err
		tb.Logf("redis-server attempt %d: %v", attempt+1, err)
	}
	tb.Fatalf("redis-server would not start: %v", lastErr)
	return ""
}

func tryStartRedis(tb testing.TB, bin string, attempt int) (string, error) {
	// Ports chosen by the kernel and released: another process may grab
	// one before Redis binds it, hence the retries. The cluster bus gets
	// its own port because the default, port+10000, may be above 65535.
	port, err := freePort()
	if err != nil {
		return "", err
	}
	busPort, err := freePort()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(tb.TempDir(), strconv.Itoa(attempt))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--cluster-enabled", "yes",
		"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
		"--cluster-port", strconv.Itoa(busPort),
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
	)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case err := <-exited:
			return "", fmt.Errorf("redis-server exited early (%v); output:\n%s", err, out)
		default:
		}
		if pingErr := ping(addr); pingErr == nil {
			tb.Cleanup(stop)
			return addr, nil
		} else if time.Now().After(deadline) {
			stop()
			return "", fmt.Errorf("no PONG from %s within 15s (%v); output:\n%s", addr, pingErr, out)
		}
		time.Sleep(20 * time.Millisecond) // waiting on another process's start-up
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return err
	}
	w := bufio.NewWriter(conn)
	writeCommand(w, "PING")
	if err := w.Flush(); err != nil {
		return err
	}
	reply, err := readReply(bufio.NewReader(conn))
	if err != nil {
		return err
	}
	if reply != "PONG" {
		return fmt.Errorf("PING answered %#v", reply)
	}
	return nil
}

// writeCommand writes a RESP array of bulk strings. Errors surface at Flush.
func writeCommand(w *bufio.Writer, args ...string) {
	fmt.Fprintf(w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(w, "$%d\r\n%s\r\n", len(a), a)
	}
}

// readReply reads one RESP2 reply: a simple string (string), an integer
// (int64), a bulk string ([]byte, nil for the null bulk string). An error
// reply is returned as an error.
func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("malformed RESP line %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+':
		return body, nil
	case '-':
		return nil, errors.New("redis: " + body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("bad bulk length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return buf[:n], nil
	default:
		return nil, fmt.Errorf("unsupported RESP type in %q", line)
	}
}

// lockedBuffer collects the server's output; exec copies into it from its
// own goroutine while the test may read it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

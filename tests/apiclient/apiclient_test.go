package apiclient

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/testpg"
	"github.com/cellgate/cellgate/tests/apiclient/client"
)

// serverBin is the cell binary, built once from the service's module.
var serverBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cellgate-apiclient-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	serverBin = filepath.Join(dir, "server")
	build := exec.Command("go", "build", "-C", "../..", "-o", serverBin, "./cmd/server")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build cmd/server:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// logBuffer keeps a process's output for the failure report.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startCell runs the example cell on fresh databases and returns its base
// URL once it is ready; it is killed at cleanup.
func startCell(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(serverBin)
	cmd.Env = append(os.Environ(),
		"CELLGATE_ADDRESS="+addr,
		"CELLGATE_CONTROL_DSN="+testpg.CreateDB(t, "control"),
		"CELLGATE_SHARD_0_DSN="+testpg.CreateDB(t, "shard0"),
		"CELLGATE_SHARD_1_DSN="+testpg.CreateDB(t, "shard1"),
	)
	var logs logBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("cell logs:\n%s", logs.String())
		}
	})
	url := "http://" + addr
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cell was not ready within 60s (last: %v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tenant sets the spec's tenant header (the document's "tenant" security
// scheme) on every request of the client.
func tenant(id string) client.ClientOption {
	return client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		req.Header.Set("X-Tenant-ID", id)
		return nil
	})
}

// TestGeneratedClientAgainstCell: the oapi-codegen client signs up,
// creates an order and reads it back from a running cell, every value
// typed by the document, and a bad path parameter comes back as the
// document's 400 naming it.
func TestGeneratedClientAgainstCell(t *testing.T) {
	url := startCell(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.NewClientWithResponses(url, tenant("acme"))
	if err != nil {
		t.Fatal(err)
	}

	name := "Ada"
	signup, err := c.SignUpWithResponse(ctx, client.SignUp{Email: "ada@acme.test", Name: &name})
	if err != nil {
		t.Fatal(err)
	}
	acct := signup.JSON201
	if acct == nil {
		t.Fatalf("sign-up: %d %s", signup.StatusCode(), signup.Body)
	}
	if acct.Id <= 0 || acct.Email != "ada@acme.test" || acct.Name != "Ada" || acct.CreatedAt.IsZero() {
		t.Fatalf("sign-up answered %+v", *acct)
	}

	note := "first"
	created, err := c.CreateOrderWithResponse(ctx, client.NewOrder{AccountId: acct.Id, AmountCents: 1250, Note: &note},
		func(_ context.Context, req *http.Request) error {
			req.Header.Set("Idempotency-Key", "apiclient-order-1")
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	order := created.JSON201
	if order == nil {
		t.Fatalf("create order: %d %s", created.StatusCode(), created.Body)
	}
	if order.Id <= 0 || order.AccountId != acct.Id || order.AmountCents != 1250 || order.Note != "first" {
		t.Fatalf("create order answered %+v", *order)
	}

	got, err := c.GetOrderWithResponse(ctx, order.Id)
	if err != nil {
		t.Fatal(err)
	}
	if got.JSON200 == nil {
		t.Fatalf("read order %d: %d %s", order.Id, got.StatusCode(), got.Body)
	}
	if *got.JSON200 != *order {
		t.Fatalf("read back %+v, created %+v", *got.JSON200, *order)
	}

	// The path parameter is typed (int64, > 0) in the document and checked
	// by the cell: 0 is the document's 400 naming it, in the path.
	bad, err := c.GetOrderWithResponse(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := bad.ApplicationproblemJSON400
	if p == nil {
		t.Fatalf("GET /orders/0: %d %s, want a 400 problem", bad.StatusCode(), bad.Body)
	}
	if p.Code != "invalid_request" || p.Errors == nil || len(*p.Errors) != 1 ||
		(*p.Errors)[0].Field != "id" || (*p.Errors)[0].In != client.Path {
		t.Fatalf("GET /orders/0: %s, want invalid_request naming the path parameter id", bad.Body)
	}

	// Another tenant's client does not see the order.
	other, err := client.NewClientWithResponses(url, tenant("globex"))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := other.GetOrderWithResponse(ctx, order.Id); err != nil || r.StatusCode() != http.StatusNotFound {
		t.Fatalf("globex read acme's order: %v %d %s", err, r.StatusCode(), r.Body)
	}
}

package pgjobs

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestStatementsScanEachLookupOnce: no plan of the statements an enqueue,
// a claim or a completion runs holds the same scan twice. PostgreSQL
// initializes every scan of a plan at each execution, run or not, and the
// planner copies a pulled-up subquery's expressions, subplans included,
// into every use of its columns: the transactional enqueue's INSERT held
// thirteen scans (the head eight times) for the four lookups it makes,
// and a batch's places read the head four times, until migration 000011
// fenced those subqueries (OFFSET 0). The plans, of the statements inside
// the functions too, come from auto_explain; two scans are the same when
// they read the same relation through the same index under the same
// conditions. The enqueue sent as a statement of its own (sqlInsertPlaced)
// runs without the planner settings the functions have: its generic plan
// must read no table but the head's whole.
func TestStatementsScanEachLookupOnce(t *testing.T) {
	dsn := newMigratedDB(t)
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var notices []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		notices = append(notices, n.Message)
		mu.Unlock()
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	exec := func(sql string, args ...any) {
		t.Helper()
		rows, err := conn.Query(ctx, sql, args...)
		if err == nil {
			rows.Close()
			err = rows.Err()
		}
		if err != nil {
			t.Fatalf("%.60s: %v", strings.Join(strings.Fields(sql), " "), err)
		}
	}
	// A capped tenant, so that the claims take the paths with caps.
	exec(`INSERT INTO cellgate_jobs_tenant_limits (tenant, max_running, weight, updated_at) VALUES ('capped', 1, 2, now())`)
	// LOAD of a library outside $libdir/plugins needs a superuser, as the
	// test databases' role is in CI and on the embedded cluster.
	exec(`LOAD 'auto_explain'`)
	for _, set := range []string{"log_min_duration = 0", "log_nested_statements = on", "log_format = json", "log_level = notice"} {
		exec(`SET auto_explain.` + set)
	}
	exec(`SET client_min_messages = notice`)

	now := time.Now()
	for _, tenantID := range []string{"acme", "capped", "capped", "capped"} {
		exec(sqlInsertOne, "k", "default", tenantID, []byte(`{}`), int32(5), nil, now, now, int16(2))
	}
	// The enqueue sent as a statement of its own has no planner settings
	// of its own: its generic plan, which a session keeps for a prepared
	// statement, must read through the indexes (checked below).
	exec(`SET plan_cache_mode = force_generic_plan`)
	for _, tenantID := range []string{"acme", "capped", "capped", "capped"} {
		exec(sqlInsertPlaced, "k", "default", tenantID, []byte(`{}`), int32(5), now, now, int16(2))
	}
	exec(`RESET plan_cache_mode`)
	exec(sqlInsertMany, []string{"k", "k"}, []string{"default", "default"}, []string{"acme", "capped"}, []string{"{}", "{}"},
		[]int32{5, 5}, []time.Time{now, now.Add(-time.Second)}, now, []int16{1, 3})
	for _, fair := range []bool{true, true, false} {
		exec(sqlClaim, now, int32(3), fair, []string{"k"}, []int32{10}, int32(64), "test", []int64{1}, []int32{1}, int32(64))
	}
	exec(sqlClaim, now, int32(3), true, []string{}, []int32{}, int32(64), "test", []int64{2}, []int32{1}, int32(64))
	exec(sqlClaimTurns, now, int32(3), []string{"acme", "capped", "acme"}, []string{"k"}, []int32{10}, "test",
		[]int64{5}, []int32{1}, int32(64))
	exec(sqlReadyTenants)
	exec(sqlComplete, []int64{3, 4}, []int32{1, 1}, now)

	mu.Lock()
	defer mu.Unlock()
	// The statements the test must have seen a plan of, or it checks
	// nothing.
	seen := map[string]bool{
		"INSERT INTO cellgate_jobs (kind":              false, // an enqueue
		"RETURNING id, false":                          false, // the enqueue as a statement of its own
		"SELECT array_agg(CASE WHEN NOT u.ready":       false, // a batch's places
		"UPDATE cellgate_jobs j SET state = 'running'": false, // a claim
		"SET state = 'completed'":                      false, // a completion
		"ORDER BY j.priority, j.id LIMIT CASE":         false, // a fair claim's tenants
		"FROM cellgate_jobs_ready_tenants()":           false, // the tenants with ready jobs
	}
	for _, n := range notices {
		i := strings.IndexByte(n, '{')
		if i < 0 {
			continue
		}
		var e struct {
			Text string `json:"Query Text"`
			Plan planNode
		}
		if err := json.Unmarshal([]byte(n[i:]), &e); err != nil {
			t.Fatalf("auto_explain's plan: %v\n%s", err, n)
		}
		text := strings.Join(strings.Fields(e.Text), " ")
		for s := range seen {
			seen[s] = seen[s] || strings.Contains(text, s)
		}
		scans := map[string]int{}
		e.Plan.walk(func(s planNode) {
			// A modifying node names its table too, and is no scan.
			if s.RelationName != "" && strings.HasSuffix(s.NodeType, "Scan") {
				scans[s.scanKey()]++
			}
		})
		for s, k := range scans {
			if k > 1 {
				t.Errorf("%d× %s in the plan of %.120s", k, s, text)
			}
		}
		if strings.Contains(text, "ORDER BY j.priority, j.id LIMIT CASE") || strings.Contains(text, "FROM cellgate_jobs_ready_tenants()") {
			// A tenant's ready jobs, in its order, from the index that
			// holds only those.
			n := 0
			e.Plan.walk(func(s planNode) {
				if s.RelationName == "cellgate_jobs" && s.IndexName == "cellgate_jobs_turns_idx" {
					n++
				}
			})
			if n == 0 {
				t.Errorf("the plan of %.120s does not read cellgate_jobs_turns_idx", text)
			}
			e.Plan.walk(func(s planNode) {
				if s.NodeType == "Seq Scan" && s.RelationName == "cellgate_jobs" {
					t.Errorf("the plan of %.120s reads all of cellgate_jobs", text)
				}
			})
		}
		if strings.Contains(text, "RETURNING id, false") {
			e.Plan.walk(func(s planNode) {
				if s.NodeType == "Seq Scan" && s.RelationName != "cellgate_jobs_head" {
					t.Errorf("the generic plan of the enqueue reads all of %s: %s", s.RelationName, s.scanKey())
				}
			})
		}
	}
	for s, ok := range seen {
		if !ok {
			t.Errorf("no plan of a statement %q among the notices: the test no longer sees what it checks", s)
		}
	}
}

// scanKey tells one scan from another: the same relation through the
// same index under the same conditions is the same scan.
func (n planNode) scanKey() string {
	return fmt.Sprintf("%s on %s %s [%s %s %s]", n.NodeType, n.RelationName, n.IndexName, n.IndexCond, n.TIDCond, n.Filter)
}

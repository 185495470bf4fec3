package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/internal/console"
	"github.com/cellgate/cellgate/internal/shardmap"
	"github.com/cellgate/cellgate/internal/slots"
	"github.com/cellgate/cellgate/internal/testpg"
)

// shardMoveRig is the scenario of moveRig inside one cell: the cell runs
// as two server processes over one control database and its two shards
// (a private cluster with wal_level = logical; the spec splits the slots
// evenly, so shard-0 holds 0–8191), and the tenants of slots 4096–8191
// move from shard-0 to shard-1 with their orders preloaded and their
// waiting shard-local jobs. Tenants stay on both shards. Inserts go to the
// two processes in turn (no router: the cell itself refuses a frozen
// slot); the moving tenants' updates and deletes go to the shard the
// cell's shard map gives them.
type shardMoveRig struct {
	*moveScenario
	procs                []*cell
	layout, state        string
	env                  []string // the layout's DSN variables
	slotmove             string
	ctlDSN, s0DSN, s1DSN string
	jobs                 map[string]int // a tenant's waiting jobs on shard-0 before the move
}

const shardMoveCell = "cell-1"

// shardMoveAdminToken opens the processes' consoles: each must show the
// shard map the move left.
const shardMoveAdminToken = "shard-move-admin-token-0123456789abcdef0123"

func newShardMoveRig(tb testing.TB, preload int) *shardMoveRig {
	rig := &shardMoveRig{moveScenario: &moveScenario{tb: tb, moving: slots.Range{Lo: 4096, Hi: 8191},
		account: map[string]int64{}, preloaded: map[orderKey]bool{}}, slotmove: toolBinary(tb, "slotmove"), jobs: map[string]int{}}
	pg := testpg.StartCluster(tb, testpg.ClusterOptions{Settings: []string{"max_wal_size = 2GB"}})
	env := append(cellEnvOn(tb, pg.CreateDB), "CELLGATE_ADMIN_TOKEN="+shardMoveAdminToken)
	// The second process starts once the first has migrated the databases
	// and written the shard map from its config.
	for range 2 {
		p := startCell(tb, env)
		p.waitStatus(tb, "/readyz", 200, 60*time.Second)
		rig.procs = append(rig.procs, p)
		rig.urls = append(rig.urls, p.url)
	}
	first := &runningCell{cell: rig.procs[0], env: env}
	rig.ctlDSN, rig.s0DSN, rig.s1DSN = first.dsn("CELLGATE_CONTROL_DSN"), first.dsn("CELLGATE_SHARD_0_DSN"), first.dsn("CELLGATE_SHARD_1_DSN")
	dir := tb.TempDir()
	rig.layout = filepath.Join(dir, "layout.json")
	rig.state = rig.layout + "." + shardMoveCell + ".move.json"
	if err := os.WriteFile(rig.layout, []byte(`{"cells":{
		"`+shardMoveCell+`":[{"name":"shard-0","dsn_env":"C1_S0"},{"name":"shard-1","dsn_env":"C1_S1"}]},
		"control":{"`+shardMoveCell+`":"C1_CTL"}}`), 0o644); err != nil {
		tb.Fatal(err)
	}
	rig.env = []string{"C1_S0=" + rig.s0DSN, "C1_S1=" + rig.s1DSN, "C1_CTL=" + rig.ctlDSN}

	rig.movers = tenantsInRange("mv", rig.moving, 4)
	rig.stayers = append(tenantsInRange("st", slots.Range{Lo: 0, Hi: 4095}, 2), tenantsInRange("s1", slots.Range{Lo: 8192, Hi: 16383}, 2)...)
	for _, tn := range append(append([]string(nil), rig.movers...), rig.stayers...) {
		rig.account[tn] = seedAccount(tb, first, tn)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, rig.s0DSN)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(ctx)
	rig.preloadOrders(conn, preload)
	// Waiting jobs at shard-0, scheduled an hour ahead so that no worker
	// claims them during the test: each moving tenant's must move, the
	// staying tenant's must stay.
	for i, tn := range append([]string{rig.stayers[0]}, rig.movers...) {
		n := i%3 + 1
		if _, err := conn.Exec(ctx, `INSERT INTO cellgate_jobs (kind, queue, tenant, args, max_attempts, run_at, created_at)
			SELECT 'send_welcome', 'default', $1, jsonb_build_object('account_id', g, 'email', $1 || '@example.test'), 5, now() + interval '1 hour', now()
			FROM generate_series(1, $2::int) g`, tn, n); err != nil {
			tb.Fatal(err)
		}
		rig.jobs[tn] = n
	}

	control, err := pgxpool.New(ctx, rig.ctlDSN)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(control.Close)
	rig.route = func(ctx context.Context, slot int) (string, bool, error) {
		rec, _, err := shardmap.Read(ctx, control)
		if err != nil {
			return "", false, err
		}
		return rec.ShardOf(slot), recordFrozen(rec, slot), nil
	}
	rig.dsns = map[string]string{"shard-0": rig.s0DSN, "shard-1": rig.s1DSN}
	rig.stores = map[string][]string{"shard-0": {rig.s0DSN}, "shard-1": {rig.s1DSN}}
	rig.home = func(tn string) string {
		if s, _ := slots.Slot(tn); s >= 8192 || rig.moving.Contains(s) {
			return "shard-1"
		}
		return "shard-0"
	}
	rig.afterCheck = rig.checkCell
	return rig
}

// recordFrozen reports whether rec marks slot frozen.
func recordFrozen(rec shardmap.Record, slot int) bool {
	for _, spec := range rec.Frozen {
		if rg, err := slots.ParseSpec(spec); err == nil && rg.Contains(slot) {
			return true
		}
	}
	return false
}

// checkCell asserts what the move leaves in the cell besides the orders:
// the shard map gives the range to shard-1, unfrozen; the moving tenants'
// waiting jobs are on shard-1 only, the staying tenant's on shard-0 only;
// no replication slot or unfinished move is left.
func (rig *shardMoveRig) checkCell(tb testing.TB) {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, rig.ctlDSN)
	if err != nil {
		tb.Fatal(err)
	}
	rec, version, err := shardmap.Read(ctx, conn)
	conn.Close(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	for _, s := range []int{rig.moving.Lo, rig.moving.Hi} {
		if got := rec.ShardOf(s); got != "shard-1" || recordFrozen(rec, s) {
			tb.Errorf("shard map version %d gives slot %d to %q (frozen %v); want shard-1, unfrozen: %+v", version, s, got, recordFrozen(rec, s), rec)
		}
	}
	if got := rec.ShardOf(rig.moving.Lo - 1); got != "shard-0" {
		tb.Errorf("shard map version %d gives slot %d to %q; want shard-0 (outside the range)", version, rig.moving.Lo-1, got)
	}
	for _, p := range rig.procs {
		var rep console.SlotReport
		if err := getAdminJSON(p.url+"/admin/api/slots", shardMoveAdminToken, &rep); err != nil {
			tb.Errorf("console at %s: %v", p.url, err)
			continue
		}
		// The spec's shard-1 (8192-16383) joined by the moved range.
		want0, want1 := fmt.Sprintf("0-%d", rig.moving.Lo-1), fmt.Sprintf("%d-%d", rig.moving.Lo, slots.MaxSlot)
		if rep.Version != version || len(rep.Frozen) != 0 || len(rep.Shards) != 2 ||
			!slices.Equal(rep.Shards[0].Slots, []string{want0}) || !slices.Equal(rep.Shards[1].Slots, []string{want1}) {
			tb.Errorf("console at %s shows shard map version %d (frozen %v, shards %+v); want version %d, nothing frozen, shard-0 %s, shard-1 %s", p.url, rep.Version, rep.Frozen, rep.Shards, version, want0, want1)
		}
	}
	jobs := func(dsn, tenant string) int {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			tb.Fatal(err)
		}
		defer c.Close(ctx)
		var n int
		if err := c.QueryRow(ctx, `SELECT count(*) FROM cellgate_jobs WHERE tenant = $1 AND state = 'available' AND kind = 'send_welcome' AND run_at > now()`, tenant).Scan(&n); err != nil {
			tb.Fatal(err)
		}
		return n
	}
	for tn, n := range rig.jobs {
		want0, want1 := 0, n
		if s, _ := slots.Slot(tn); !rig.moving.Contains(s) {
			want0, want1 = n, 0
		}
		if on0, on1 := jobs(rig.s0DSN, tn), jobs(rig.s1DSN, tn); on0 != want0 || on1 != want1 {
			tb.Errorf("tenant %s: %d waiting jobs on shard-0 and %d on shard-1; want %d and %d", tn, on0, on1, want0, want1)
		}
	}
	out, err := rig.run(nil, "status", "-layout", rig.layout, "-cell", shardMoveCell)
	if err != nil || !strings.Contains(out, "no replication slots of moves") || !strings.Contains(out, "no unfinished move") {
		tb.Errorf("slotmove status after the move: %v\n%s", err, out)
	}
}

func (rig *shardMoveRig) moveArgs() []string {
	return []string{"-layout", rig.layout, "-cell", shardMoveCell, "-from-shard", "shard-0", "-to-shard", "shard-1", "-slots", rig.moving.String()}
}

// run runs the slotmove binary as moveRig.run does.
func (rig *shardMoveRig) run(extraEnv []string, args ...string) (string, error) {
	if len(args) == 0 {
		args = rig.moveArgs()
	}
	return runTool(rig.slotmove, append(append([]string(nil), rig.env...), extraEnv...), args...)
}

// TestShardsSlotMoveUpdatesAndDeletes is TestCellsSlotMoveUpdatesAndDeletes
// between two shards of one cell: while every tenant creates orders
// through the cell's two processes and the moving tenants update and
// delete their orders on their current shard, `slotmove -cell cell-1
// -from-shard shard-0 -to-shard shard-1` moves their range on its first
// run, confirmed by both processes through the shard map; then every
// guarantee of moveLoad.check, and the range's waiting jobs moved.
func TestShardsSlotMoveUpdatesAndDeletes(t *testing.T) {
	rig := newShardMoveRig(t, 2000)
	s, l := moveOnceUnderLoad(t, rig.moveScenario, rig.moveArgs(), rig.run)
	if s["cell"] != shardMoveCell || s["from"] != "shard-0" || s["to"] != "shard-1" {
		t.Errorf("summary names cell %q, from %q, to %q; want %s, shard-0, shard-1", s["cell"], s["from"], s["to"], shardMoveCell)
	}
	if got, want := s["jobs_moved"], fmt.Sprint(rig.jobsOfMovers()); got != want {
		t.Errorf("summary: jobs_moved=%s; want %s", got, want)
	}
	l.check(t)
	t.Logf("summary: freeze %s (settle %s; steps %s), streamed %s, peak lag %s bytes; 503 window at the cell %s (%d refusals); %d inserts, %d updates, %d deletes acknowledged; %d mutations fenced; %s jobs moved",
		s["freeze"], s["settle"], s["freeze_steps"], s["streamed"], s["peak_lag_bytes"], l.window(), sum(l.refused), len(l.inserted), len(l.updated), len(l.deleted), l.fenced, s["jobs_moved"])
}

func (rig *shardMoveRig) jobsOfMovers() int {
	n := 0
	for _, tn := range rig.movers {
		n += rig.jobs[tn]
	}
	return n
}

// TestShardsSlotMoveCrashEveryPhase is TestCellsSlotMoveCrashEveryPhase
// between two shards of one cell: the command killed with SIGKILL once in
// each phase under the load, `slotmove status -cell` listing the move's
// replication slot and state after each kill, `slotmove abort` once; the
// last run finishes with every guarantee, the range's jobs moved and no
// replication slot left.
func TestShardsSlotMoveCrashEveryPhase(t *testing.T) {
	rig := newShardMoveRig(t, 2000)
	crashEveryPhase(t, rig.moveScenario, rig.run, rig.moveArgs(), []string{"status", "-layout", rig.layout, "-cell", shardMoveCell})
}

package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// usage is what one side spent during one phase.
type usage struct {
	pgCPU, goCPU time.Duration
	// From pg_stat_database of the side's database (flushed by the
	// backends about once a second, so approximate at a phase's edges).
	xacts, blocks, tupWrites int64
}

func (u usage) sub(o usage) usage {
	return usage{u.pgCPU - o.pgCPU, u.goCPU - o.goCPU, u.xacts - o.xacts, u.blocks - o.blocks, u.tupWrites - o.tupWrites}
}

// meter measures one side's phase: the CPU time of the PostgreSQL backends
// connected to its database (from /proc, so only with the server on this
// machine), this process's CPU time (getrusage; the other side is stopped
// during the phase) and its database's statistics.
type meter struct {
	pool   *pgxpool.Pool
	start  usage
	pgByID map[int]time.Duration
}

func startMeter(ctx context.Context, pool *pgxpool.Pool) *meter {
	m := &meter{pool: pool}
	m.pgByID = m.backends(ctx)
	m.start = m.read(ctx)
	return m
}

// stop returns the usage since startMeter.
func (m *meter) stop(ctx context.Context) usage {
	now := m.backends(ctx)
	d := m.read(ctx).sub(m.start)
	d.pgCPU = 0
	for pid, t := range now {
		// A backend that started during the phase counts from 0.
		d.pgCPU += t - m.pgByID[pid]
	}
	return d
}

func (m *meter) read(ctx context.Context) usage {
	var u usage
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		u.goCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	_, _ = m.pool.Exec(ctx, "SELECT pg_stat_clear_snapshot()")
	_ = m.pool.QueryRow(ctx, `SELECT xact_commit + xact_rollback, blks_hit + blks_read, tup_inserted + tup_updated + tup_deleted
FROM pg_stat_database WHERE datname = current_database()`).Scan(&u.xacts, &u.blocks, &u.tupWrites)
	return u
}

// backends returns the CPU time of every backend connected to the pool's
// database, by pid.
func (m *meter) backends(ctx context.Context) map[int]time.Duration {
	out := map[int]time.Duration{}
	rows, err := m.pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return out
	}
	var pids []int
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) == nil {
			pids = append(pids, pid)
		}
	}
	rows.Close()
	tick := time.Second / time.Duration(clockTicks)
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// After the command name (which may hold spaces): utime is field
		// 14, stime field 15, in clock ticks.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		out[pid] = time.Duration(ut+st) * tick
	}
	return out
}

// clockTicks is USER_HZ, 100 on Linux.
const clockTicks = 100

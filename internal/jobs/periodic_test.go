package jobs_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/jobs"
)

func mustSchedule(t *testing.T, p jobs.PeriodicJob) jobs.Schedule {
	t.Helper()
	s, err := p.Schedule()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPeriodicSchedule: every counts from the epoch; cron reads its
// expression in its zone (03:00 in Paris is 02:00 UTC in winter, 01:00 in
// summer); errors name the entry's field.
func TestPeriodicSchedule(t *testing.T) {
	at := time.Date(2026, 1, 1, 10, 17, 5, 0, time.UTC)
	if got, want := mustSchedule(t, jobs.PeriodicJob{Name: "a", Every: time.Hour}).Next(at), time.Date(2026, 1, 1, 11, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("every 1h after %s = %s, want %s", at, got, want)
	}
	paris := mustSchedule(t, jobs.PeriodicJob{Name: "b", Cron: "0 3 * * *", TimeZone: "Europe/Paris"})
	if got, want := paris.Next(at), time.Date(2026, 1, 2, 2, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("cron 0 3 * * * Paris after %s = %s, want %s", at, got.UTC(), want)
	}
	summer := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
	if got, want := paris.Next(summer), time.Date(2026, 7, 1, 1, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("cron 0 3 * * * Paris after %s = %s, want %s", summer, got.UTC(), want)
	}
	if got, want := mustSchedule(t, jobs.PeriodicJob{Name: "c", Cron: "@daily"}).Next(at), time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("@daily after %s = %s, want %s", at, got, want)
	}
	for _, tc := range []struct {
		p    jobs.PeriodicJob
		want string
	}{
		{jobs.PeriodicJob{Name: "x", Kind: "k"}, "jobs.periodic.x:"},
		{jobs.PeriodicJob{Name: "x", Kind: "k", Every: time.Minute, Cron: "* * * * *"}, "jobs.periodic.x:"},
		{jobs.PeriodicJob{Name: "x", Kind: "k", Every: time.Millisecond}, "jobs.periodic.x.every:"},
		{jobs.PeriodicJob{Name: "x", Kind: "k", Every: time.Minute, TimeZone: "UTC"}, "jobs.periodic.x.time_zone:"},
		{jobs.PeriodicJob{Name: "x", Kind: "k", Cron: "* * *"}, "jobs.periodic.x.cron:"},
		{jobs.PeriodicJob{Name: "x", Kind: "k", Cron: "@every 1m"}, "jobs.periodic.x.cron:"},
		{jobs.PeriodicJob{Name: "x", Kind: "k", Cron: "CRON_TZ=UTC 0 3 * * *"}, "jobs.periodic.x.cron:"},
		{jobs.PeriodicJob{Name: "x", Kind: "k", Cron: "0 3 * * *", TimeZone: "Nowhere/Else"}, "jobs.periodic.x.time_zone:"},
		{jobs.PeriodicJob{Name: "x", Kind: "k", Every: time.Minute, CatchUp: "twice"}, "jobs.periodic.x.catch_up:"},
		{jobs.PeriodicJob{Name: "x", Every: time.Minute}, "jobs.periodic.x.kind:"},
	} {
		err := jobs.Config{Periodic: []jobs.PeriodicJob{tc.p}}.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.p, err, tc.want)
		}
	}
}

// TestPeriodicDue: the first look starts the schedule (one run with
// run_on_start); on time, each period runs; after an outage, the missed
// periods run once (the latest) or are skipped, and the one on time runs.
func TestPeriodicDue(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)
	min := func(n int) time.Time { return time.Date(2026, 1, 1, 0, n, 0, 0, time.UTC) }
	p := jobs.PeriodicParams{Name: "m", Schedule: mustSchedule(t, jobs.PeriodicJob{Name: "m", Every: time.Minute}), RunOnStart: true, CatchUp: jobs.CatchUpOnce}
	runs, skipped, last := p.Due(time.Time{}, true, t0, time.Second)
	if len(runs) != 1 || !runs[0].Equal(t0) || skipped != 0 || !last.Equal(t0) {
		t.Fatalf("first look = %v, %d, %s; want [%s], 0, %s", runs, skipped, last, t0, t0)
	}
	p.RunOnStart = false
	if runs, _, last := p.Due(time.Time{}, true, t0, time.Second); len(runs) != 0 || !last.Equal(t0) {
		t.Fatalf("first look without run_on_start = %v, %s; want none, %s", runs, last, t0)
	}
	runs, skipped, last = p.Due(t0, false, min(1), time.Second)
	if len(runs) != 1 || !runs[0].Equal(min(1)) || skipped != 0 || !last.Equal(min(1)) {
		t.Fatalf("on time = %v, %d, %s; want [%s], 0, %s", runs, skipped, last, min(1), min(1))
	}
	if runs, skipped, last := p.Due(min(1), false, min(1).Add(30*time.Second), time.Second); len(runs) != 0 || skipped != 0 || !last.Equal(min(1)) {
		t.Fatalf("between periods = %v, %d, %s; want nothing", runs, skipped, last)
	}
	// Down from 00:01 to 00:06 (periods 2..5 missed, 6 on time).
	runs, skipped, last = p.Due(min(1), false, min(6), time.Second)
	if len(runs) != 2 || !runs[0].Equal(min(5)) || !runs[1].Equal(min(6)) || skipped != 3 || !last.Equal(min(6)) {
		t.Fatalf("catch_up once = %v, %d, %s; want [00:05 00:06], 3, 00:06", runs, skipped, last)
	}
	p.CatchUp = jobs.CatchUpSkip
	runs, skipped, _ = p.Due(min(1), false, min(6), time.Second)
	if len(runs) != 1 || !runs[0].Equal(min(6)) || skipped != 4 {
		t.Fatalf("catch_up skip = %v, %d; want [00:06], 4", runs, skipped)
	}
	// The job of a period carries the period's key and time.
	p.Insert = jobs.InsertParams{Kind: "k", Queue: "default", MaxAttempts: 3}
	j := p.Job(min(6))
	if j.UniqueKey != jobs.PeriodKey("m", min(6)) || !j.RunAt.Equal(min(6)) || j.Kind != "k" {
		t.Fatalf("Job = %+v", j)
	}
}

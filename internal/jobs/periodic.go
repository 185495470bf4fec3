package jobs

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// CatchUp is what a periodic job does with the periods it missed while no
// process scheduled it (every process of the cell down, or its control
// database): see PeriodicJob.
type CatchUp string

const (
	// CatchUpOnce runs the missed periods once, as one job (for the latest
	// of them), and skips the others.
	CatchUpOnce CatchUp = "once"
	// CatchUpSkip skips every missed period; the next period runs on time.
	CatchUpSkip CatchUp = "skip"
)

// PeriodicJob is one entry of `jobs.periodic`: a job of Kind with Args,
// enqueued once per period of its schedule, Every or Cron (one of them).
//
// Periods: with Every, the multiples of Every since the Unix epoch (so
// every 1h runs on the hour, whatever the start time); with Cron, the
// times the expression names in TimeZone. A period is enqueued when it
// comes due, with RunAt the period's time and a uniqueness key naming the
// entry and the period. A period seen later than the scheduler's grace
// (the PostgreSQL backend's maintenance tick; a second for the local one)
// was missed; CatchUp says whether it runs.
type PeriodicJob struct {
	// Name identifies the entry (its key in `jobs.periodic`); the
	// PostgreSQL backend stores the latest period it scheduled under it,
	// so renaming an entry starts its schedule afresh.
	Name string
	// Kind is the job kind to enqueue; its worker must be registered.
	Kind string
	// Args is the JSON encoding of the kind's args ("" or null means {}).
	Args json.RawMessage
	// Every is the interval between two periods (≥ 1s), or 0 with Cron.
	Every time.Duration
	// Cron is a five-field cron expression ("0 3 * * *") or a descriptor
	// (@hourly, @daily, @weekly, @monthly, @yearly), or "" with Every.
	Cron string
	// TimeZone is the IANA zone Cron is read in; "" means UTC.
	TimeZone string
	// RunOnStart enqueues one run at once when the entry is scheduled for
	// the first time (no period of it was ever recorded), instead of
	// waiting for its first period. Later restarts follow CatchUp.
	RunOnStart bool
	// CatchUp is the missed-period policy; "" means CatchUpOnce.
	CatchUp CatchUp
}

// Schedule gives the period after t.
type Schedule interface {
	// Next returns the first period strictly after t.
	Next(t time.Time) time.Time
}

// everySchedule: the multiples of d since the epoch.
type everySchedule time.Duration

func (e everySchedule) Next(t time.Time) time.Time {
	d := time.Duration(e)
	return time.Unix(0, 0).Add(t.Sub(time.Unix(0, 0)).Truncate(d) + d).In(t.Location())
}

// zoned reads a cron schedule in one zone.
type zoned struct {
	s   cron.Schedule
	loc *time.Location
}

func (z zoned) Next(t time.Time) time.Time { return z.s.Next(t.In(z.loc)) }

// path names the entry in errors, as the spec does.
func (p PeriodicJob) path(field string) string {
	return "jobs.periodic." + p.Name + "." + field
}

// Schedule parses the entry's schedule; its error names the spec path.
func (p PeriodicJob) Schedule() (Schedule, error) {
	switch {
	case p.Every != 0 && p.Cron != "":
		return nil, fmt.Errorf("%s: set either every or cron, not both", "jobs.periodic."+p.Name)
	case p.Every != 0:
		if p.Every < time.Second {
			return nil, fmt.Errorf("%s: must be at least 1s, got %s", p.path("every"), p.Every)
		}
		if p.TimeZone != "" {
			return nil, fmt.Errorf("%s: applies to cron only (every counts from the Unix epoch)", p.path("time_zone"))
		}
		return everySchedule(p.Every), nil
	case p.Cron != "":
		c := strings.TrimSpace(p.Cron)
		if strings.HasPrefix(c, "TZ=") || strings.HasPrefix(c, "CRON_TZ=") || strings.HasPrefix(c, "@every") {
			return nil, fmt.Errorf("%s: %q: use time_zone for a zone and every for an interval", p.path("cron"), p.Cron)
		}
		s, err := cron.ParseStandard(c)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", p.path("cron"), p.Cron, err)
		}
		loc, err := time.LoadLocation(p.TimeZone)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", p.path("time_zone"), p.TimeZone, err)
		}
		return zoned{s: s, loc: loc}, nil
	default:
		return nil, fmt.Errorf("%s: set every or cron", "jobs.periodic."+p.Name)
	}
}

// Validate checks everything but the kind and its args, which need the
// registry (NewClient checks those).
func (p PeriodicJob) Validate() error {
	var errs []error
	if p.Name == "" {
		errs = append(errs, errors.New("jobs.periodic: an entry has no name"))
	}
	if p.Kind == "" {
		errs = append(errs, fmt.Errorf("%s: required", p.path("kind")))
	}
	if p.CatchUp != "" && p.CatchUp != CatchUpOnce && p.CatchUp != CatchUpSkip {
		errs = append(errs, fmt.Errorf("%s: must be %q or %q, got %q", p.path("catch_up"), CatchUpOnce, CatchUpSkip, p.CatchUp))
	}
	if _, err := p.Schedule(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// PeriodicParams is one periodic entry as a Backend schedules it: the
// Client has validated it, checked its kind and args, and encoded its job.
type PeriodicParams struct {
	// Name is PeriodicJob.Name, the key of its stored state.
	Name string
	// Job is the job of every period; Job returns it for one period.
	Insert InsertParams
	// Schedule gives the periods.
	Schedule Schedule
	// RunOnStart and CatchUp are PeriodicJob's.
	RunOnStart bool
	CatchUp    CatchUp
}

// Job returns the job of the period at: due then, with a uniqueness key
// naming the entry and the period, so the period's run is one active job
// even if two schedulers ever raced.
func (p *PeriodicParams) Job(at time.Time) InsertParams {
	ip := p.Insert
	ip.RunAt = at
	ip.UniqueKey = PeriodKey(p.Name, at)
	return ip
}

// PeriodKey is the uniqueness key of entry name's run for the period at.
func PeriodKey(name string, at time.Time) string {
	return "periodic:" + name + ":" + at.UTC().Format(time.RFC3339)
}

// maxPeriodsScanned bounds the periods one Due call walks, so an entry
// every second left unscheduled for a month costs one bounded pass; the
// periods past the bound are skipped (and counted so) by the next calls.
const maxPeriodsScanned = 10000

// Due plans the runs of the entry at now. last is the latest period
// already handled (enqueued or skipped); first says there is none (the
// entry was never scheduled). grace is how late a period may be seen and
// still count as on time. It returns the periods to enqueue (in order),
// how many it skips, and the new last (unchanged when nothing came due).
//
// The first time, the entry starts from now: one run at now with
// RunOnStart, none otherwise. After that, each period in (last, now] on
// time is enqueued; the missed ones (older than now-grace) are skipped,
// except the latest of them with CatchUpOnce.
func (p *PeriodicParams) Due(last time.Time, first bool, now time.Time, grace time.Duration) (runs []time.Time, skipped int, newLast time.Time) {
	if first {
		if p.RunOnStart {
			return []time.Time{now}, 0, now
		}
		return nil, 0, now
	}
	newLast = last
	var missed time.Time
	truncated := false
	t := p.Schedule.Next(last)
	for n := 0; !t.After(now); n++ {
		if n == maxPeriodsScanned {
			truncated = true // the next call goes on from newLast
			break
		}
		if now.Sub(t) > grace {
			if !missed.IsZero() {
				skipped++
			}
			missed = t
		} else {
			runs = append(runs, t)
		}
		newLast = t
		t = p.Schedule.Next(t)
	}
	if !missed.IsZero() {
		if p.CatchUp == CatchUpSkip || truncated {
			skipped++
		} else {
			runs = append([]time.Time{missed}, runs...)
		}
	}
	return runs, skipped, newLast
}

// periodicParams checks the entries against the registered kinds and
// encodes their jobs.
func (c *Client) periodicParams(ps []PeriodicJob) ([]PeriodicParams, error) {
	out := make([]PeriodicParams, 0, len(ps))
	seen := map[string]bool{}
	var errs []error
	for _, p := range ps {
		if err := p.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[p.Name] {
			errs = append(errs, fmt.Errorf("jobs.periodic.%s: named twice", p.Name))
			continue
		}
		seen[p.Name] = true
		r := c.kinds[p.Kind]
		if r == nil {
			errs = append(errs, fmt.Errorf("%s: %q has no registered worker", p.path("kind"), p.Kind))
			continue
		}
		args := bytes.TrimSpace(p.Args)
		if len(args) == 0 || bytes.Equal(args, []byte("null")) {
			args = []byte("{}")
		}
		if err := r.check(args); err != nil {
			errs = append(errs, fmt.Errorf("%s: do not match kind %s: %w", p.path("args"), p.Kind, err))
			continue
		}
		s, _ := p.Schedule()
		cu := p.CatchUp
		cu = cmp.Or(cu, CatchUpOnce)
		out = append(out, PeriodicParams{
			Name: p.Name,
			Insert: InsertParams{
				Kind:        r.spec.Name,
				Queue:       r.spec.Queue,
				EncodedArgs: append([]byte(nil), args...),
				MaxAttempts: r.spec.MaxAttempts,
			},
			Schedule:   s,
			RunOnStart: p.RunOnStart,
			CatchUp:    cu,
		})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

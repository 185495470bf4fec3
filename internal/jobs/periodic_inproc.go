package jobs

import (
	"sync"
	"time"
)

// InProcessGrace is how late the in-process scheduler may see a period and
// still count it on time: its timers fire at the period, so only a stalled
// process is later than this.
const InProcessGrace = time.Second

// InProcessScheduler schedules periodic entries in one process's memory,
// for a backend whose jobs live there too (the local backend): each entry
// starts afresh when the process starts (so RunOnStart runs at every
// start), and nothing coordinates two processes. Its timers run on the
// backend's Clock.
type InProcessScheduler struct {
	clock   Clock
	entries []PeriodicParams
	insert  func(InsertParams) (EnqueueResult, error)
	report  func(name string, enqueued, skipped int)
	onErr   func(name string, err error)

	mu      sync.Mutex
	last    []time.Time
	started []bool
	timer   Timer
	stopped bool
}

// StartInProcess starts scheduling entries: insert enqueues a period's
// job, report (may be nil) is OpenParams.Scheduled, onErr (may be nil)
// hears of a failed insert (that period is not retried). The first look
// is a timer due at once.
func StartInProcess(clock Clock, entries []PeriodicParams, insert func(InsertParams) (EnqueueResult, error),
	report func(name string, enqueued, skipped int), onErr func(name string, err error)) *InProcessScheduler {
	s := &InProcessScheduler{
		clock: clock, entries: entries, insert: insert, report: report, onErr: onErr,
		last: make([]time.Time, len(entries)), started: make([]bool, len(entries)),
	}
	s.mu.Lock()
	s.timer = clock.AfterFunc(0, s.run)
	s.mu.Unlock()
	return s
}

func (s *InProcessScheduler) run() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	now := s.clock.Now()
	var next time.Time
	for i := range s.entries {
		p := &s.entries[i]
		runs, skipped, newLast := p.Due(s.last[i], !s.started[i], now, InProcessGrace)
		s.started[i], s.last[i] = true, newLast
		enq := 0
		for _, at := range runs {
			r, err := s.insert(p.Job(at))
			switch {
			case err != nil:
				if s.onErr != nil {
					s.onErr(p.Name, err)
				}
			case !r.Duplicate:
				enq++
			}
		}
		if s.report != nil && (enq > 0 || skipped > 0) {
			s.report(p.Name, enq, skipped)
		}
		if n := p.Schedule.Next(newLast); next.IsZero() || n.Before(next) {
			next = n
		}
	}
	if !next.IsZero() {
		s.timer = s.clock.AfterFunc(max(next.Sub(now), 0), s.run)
	}
}

// Stop ends the scheduling; a look in progress finishes first.
func (s *InProcessScheduler) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	if s.timer != nil {
		s.timer.Stop()
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// settings are the shapes' parameters, the same for both sides.
type settings struct {
	workers    int           // per side, every shape
	window     time.Duration // measured window of bulk and tx
	bulkBatch  int           // bulk: jobs per EnqueueMany / InsertMany
	bulkMin    int           // bulk: jobs kept waiting
	txProd     int           // tx: producers
	txMax      int           // tx: jobs enqueued and not yet run, at most
	tenants    int           // bulk and tx: tenants the jobs are spread over
	noisyJobs  int           // noisy: the noisy tenant's one batch
	quiet      int           // noisy: quiet tenants
	quietEvery time.Duration // noisy: each quiet tenant's enqueue interval
}

// result is one side's phase: the shape's value, the jobs it covers and
// what they cost.
type result struct {
	value float64 // jobs/s, or the quiet p99 wait in ms
	jobs  int64
	use   usage
	// detail is printed with the median round (noisy: where the wait
	// goes).
	detail string
	// stall says why the round is not a figure of the side at its best
	// (see pace), or is "".
	stall string
}

// pace samples a phase's completed-jobs counter every 250ms, so a round in
// which a side stalled part of the window is caught: the median of a run
// must not silently stand on a stalled baseline. It samples the warm-up
// too, so a stall message shows whether the side ran before the window.
type pace struct {
	stop, done chan struct{}
	count      *atomic.Int64
	mu         sync.Mutex
	samples    []int64
	from       int // the sample the window starts at
}

func startPace(count *atomic.Int64) *pace {
	p := &pace{stop: make(chan struct{}), done: make(chan struct{}), count: count}
	p.samples = append(p.samples, count.Load())
	go func() {
		defer close(p.done)
		t := time.NewTicker(paceTick)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.mu.Lock()
				p.samples = append(p.samples, count.Load())
				p.mu.Unlock()
			}
		}
	}()
	return p
}

const paceTick = 250 * time.Millisecond

// window marks the start of the measured window.
func (p *pace) window() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.samples = append(p.samples, p.count.Load())
	p.from = len(p.samples) - 1
}

// finish stops the sampling and returns why the phase stalled, or "": some
// whole second of its window finished fewer than a tenth of the window's
// mean rate.
func (p *pace) finish(mean float64) string {
	close(p.stop)
	<-p.done
	const perSecond = int(time.Second / paceTick)
	for i := p.from + perSecond; i < len(p.samples); i++ {
		if got := float64(p.samples[i] - p.samples[i-perSecond]); got < mean/10 {
			var per []string
			for j := p.from % perSecond; j+perSecond < len(p.samples); j += perSecond {
				if j == p.from {
					per = append(per, "|")
				}
				per = append(per, fmt.Sprint(p.samples[j+perSecond]-p.samples[j]))
			}
			return fmt.Sprintf("%.0f jobs in the second ending %s into the window, mean %.0f/s (per second, warm-up | window: %s)",
				got, time.Duration(i-p.from)*paceTick, mean, strings.Join(per, " "))
		}
	}
	return ""
}

func tenantName(i int) string { return fmt.Sprintf("tenant-%03d", i) }

// runBulk is River's benchmark shape: one inserter adds batches of
// bulkBatch in one call whenever fewer than bulkMin jobs wait (checking
// every 250ms, as River's benchmark does), while the workers drain them;
// measured over window once bulkMin jobs wait. Batches go round-robin over
// the tenants (River ignores the tenant).
func runBulk(ctx context.Context, s side, st settings) (result, error) {
	var done atomic.Int64
	if err := s.Start(ctx, st.workers, func(*payload) { done.Add(1) }); err != nil {
		return result{}, err
	}
	defer func() { _ = s.Stop(context.WithoutCancel(ctx)) }()
	batch := make([]payload, st.bulkBatch)
	var inserted int64
	var n, k int
	topUp := func(upTo int) error {
		for inserted-done.Load() < int64(upTo) {
			for i := range batch {
				n++
				batch[i] = payload{N: n}
			}
			if err := s.EnqueueMany(ctx, tenantName(k%st.tenants), batch); err != nil {
				return fmt.Errorf("%s: bulk enqueue: %w", s.Name(), err)
			}
			k++
			inserted += int64(len(batch))
		}
		return nil
	}
	pc := startPace(&done)
	// Statistics of a table with jobs in it, for both sides alike, before
	// the workers' statements meet the backlog rather than after: a
	// statement in flight keeps its plan (see analyzeJobs).
	if err := topUp(1); err != nil {
		return result{}, err
	}
	if err := s.Analyze(ctx); err != nil {
		return result{}, err
	}
	if err := topUp(st.bulkMin); err != nil {
		return result{}, err
	}
	keepUp := func(d time.Duration) error {
		for t := time.Now(); time.Since(t) < d; {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(min(250*time.Millisecond, d-time.Since(t))):
			}
			if err := topUp(st.bulkMin); err != nil {
				return err
			}
		}
		return nil
	}
	// A warm-up, unmeasured, so that neither side is measured while it
	// starts up.
	if err := keepUp(bulkWarmUp); err != nil {
		return result{}, err
	}
	m := startMeter(ctx, s.Pool())
	start, from := time.Now(), done.Load()
	pc.window()
	if err := keepUp(st.window); err != nil {
		return result{}, err
	}
	jobs := done.Load() - from
	elapsed := time.Since(start)
	rate := float64(jobs) / elapsed.Seconds()
	return result{value: rate, jobs: jobs, use: m.stop(ctx), stall: pc.finish(rate)}, nil
}

// bulkWarmUp is the bulk shape's unmeasured time between ANALYZE and the
// window.
const bulkWarmUp = 3 * time.Second

// runTx is the sign-up shape: txProd producers each loop over one
// transaction that writes a signups row and enqueues one job, round-robin
// over the tenants, waiting while txMax jobs are enqueued and not yet run;
// measured over window after a second of warm-up.
func runTx(ctx context.Context, s side, st settings) (result, error) {
	var done atomic.Int64
	slots := make(chan struct{}, st.txMax)
	if err := s.Start(ctx, st.workers, func(*payload) {
		done.Add(1)
		<-slots
	}); err != nil {
		return result{}, err
	}
	defer func() { _ = s.Stop(context.WithoutCancel(ctx)) }()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for p := range st.txProd {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case slots <- struct{}{}:
				}
				if err := s.SignupTx(ctx, tenantName((p*7+i)%st.tenants), payload{N: p<<32 | i}); err != nil {
					<-slots
					if ctx.Err() == nil {
						err = fmt.Errorf("%s: signup transaction: %w", s.Name(), err)
						failed.CompareAndSwap(nil, &err)
					}
					return
				}
			}
		})
	}
	pc := startPace(&done)
	time.Sleep(time.Second)
	// Plans for the table as it is in flight, not empty (see runBulk).
	if err := s.Analyze(ctx); err != nil {
		close(stop)
		wg.Wait()
		return result{}, err
	}
	m := startMeter(ctx, s.Pool())
	start, from := time.Now(), done.Load()
	pc.window()
	select {
	case <-ctx.Done():
	case <-time.After(st.window):
	}
	jobs := done.Load() - from
	elapsed := time.Since(start)
	use := m.stop(ctx)
	rate := float64(jobs) / elapsed.Seconds()
	stall := pc.finish(rate)
	close(stop)
	// Free producers blocked on a slot; running jobs may free more.
	wg.Wait()
	if err := failed.Load(); err != nil {
		return result{}, *err
	}
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	return result{value: rate, jobs: jobs, use: use, stall: stall}, nil
}

// runNoisy is the noisy-tenant shape: one tenant enqueues noisyJobs in one
// call; then quiet tenants each enqueue one job every quietEvery until the
// noisy backlog is drained. The value is the quiet jobs' p99 wait from
// enqueue to start, in ms.
func runNoisy(ctx context.Context, s side, st settings) (result, error) {
	var noisyDone, all atomic.Int64
	var mu sync.Mutex
	var waits []time.Duration
	drained := make(chan struct{})
	if err := s.Start(ctx, st.workers, func(p *payload) {
		all.Add(1)
		if p.Quiet {
			w := time.Since(time.Unix(0, p.At))
			mu.Lock()
			waits = append(waits, w)
			mu.Unlock()
			return
		}
		if noisyDone.Add(1) == int64(st.noisyJobs) {
			close(drained)
		}
	}); err != nil {
		return result{}, err
	}
	defer func() { _ = s.Stop(context.WithoutCancel(ctx)) }()
	m := startMeter(ctx, s.Pool())
	noisy := make([]payload, st.noisyJobs)
	for i := range noisy {
		noisy[i] = payload{N: i, Tenant: "noisy"}
	}
	if err := s.EnqueueMany(ctx, "noisy", noisy); err != nil {
		return result{}, fmt.Errorf("%s: noisy enqueue: %w", s.Name(), err)
	}
	var sent atomic.Int64
	var enqueues []time.Duration // how long each quiet Enqueue call took, under mu
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for q := range st.quiet {
		id := fmt.Sprintf("quiet-%02d", q)
		wg.Go(func() {
			// Spread the tenants' ticks over the interval.
			time.Sleep(st.quietEvery * time.Duration(q) / time.Duration(st.quiet))
			t := time.NewTicker(st.quietEvery)
			defer t.Stop()
			for i := 0; ; i++ {
				select {
				case <-drained:
					return
				case <-ctx.Done():
					return
				case <-t.C:
				}
				at := time.Now()
				p := payload{N: i, Tenant: id, Quiet: true, At: at.UnixNano()}
				if err := s.Enqueue(ctx, id, p); err != nil {
					err = fmt.Errorf("%s: quiet enqueue: %w", s.Name(), err)
					failed.CompareAndSwap(nil, &err)
					return
				}
				took := time.Since(at)
				mu.Lock()
				enqueues = append(enqueues, took)
				mu.Unlock()
				sent.Add(1)
			}
		})
	}
	select {
	case <-drained:
	case <-ctx.Done():
	case <-time.After(5 * time.Minute):
		return result{}, fmt.Errorf("%s: noisy backlog not drained after 5 minutes (%d of %d)", s.Name(), noisyDone.Load(), st.noisyJobs)
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return result{}, *err
	}
	// The quiet jobs enqueued last still have to start.
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(waits)
		mu.Unlock()
		if int64(n) >= sent.Load() || ctx.Err() != nil {
			break
		}
		if time.Now().After(deadline) {
			return result{}, fmt.Errorf("%s: %d quiet jobs of %d did not start", s.Name(), sent.Load()-int64(n), sent.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	use := m.stop(ctx)
	mu.Lock()
	defer mu.Unlock()
	if len(waits) == 0 {
		return result{}, errors.New(s.Name() + ": no quiet job ran")
	}
	slices.Sort(waits)
	slices.Sort(enqueues)
	detail := fmt.Sprintf("quiet-jobs=%d wait-p50=%.1fms wait-p99=%.1fms enqueue-call-p50=%.1fms enqueue-call-p99=%.1fms",
		len(waits), ms(quantile(waits, 50)), ms(quantile(waits, 99)), ms(quantile(enqueues, 50)), ms(quantile(enqueues, 99)))
	return result{value: ms(quantile(waits, 99)), jobs: all.Load(), use: use, detail: detail}, nil
}

// quantile returns the q-th percentile of sorted ds (nearest rank).
func quantile(ds []time.Duration, q int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[(len(ds)*q+99)/100-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

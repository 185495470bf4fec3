// Package browser holds the operator console's browser tests: headless
// Chromium, driven with chromedp, logs in, lists the jobs of both shards,
// filters by tenant, opens a job, retries it and checks that a read-only
// user sees no action buttons, saving screenshots into docs/console/.
//
// It is a module of its own so that the service's module never carries
// chromedp. `make test` runs it; a missing browser fails, never skips.
package browser

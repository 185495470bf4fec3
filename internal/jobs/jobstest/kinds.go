package jobstest

import (
	"time"

	"github.com/cellgate/cellgate/internal/jobs"
)

// The suite's job kinds, shaped like generated code: a struct with json tags
// and a value-receiver JobSpec.

type nested struct {
	A map[string]int `json:"a"`
}

type basicArgs struct {
	Key    string   `json:"key"`
	N      int      `json:"n"`
	Note   string   `json:"note,omitempty"`
	Tags   []string `json:"tags,omitempty"`
	Nested *nested  `json:"nested,omitempty"`
}

func (basicArgs) JobSpec() jobs.KindSpec { return jobs.KindSpec{Name: "jobstest_basic"} }

type otherQueueArgs struct {
	Key string `json:"key"`
}

func (otherQueueArgs) JobSpec() jobs.KindSpec {
	return jobs.KindSpec{Name: "jobstest_other", Queue: "jobstest_other"}
}

type retryArgs struct {
	Key string `json:"key"`
}

func (retryArgs) JobSpec() jobs.KindSpec {
	return jobs.KindSpec{Name: "jobstest_retry", MaxAttempts: 3}
}

const suiteTimeout = 100 * time.Millisecond

type timeoutArgs struct {
	Key string `json:"key"`
}

func (timeoutArgs) JobSpec() jobs.KindSpec {
	return jobs.KindSpec{Name: "jobstest_timeout", MaxAttempts: 2, Timeout: suiteTimeout}
}

type limitedArgs struct {
	Key string `json:"key"`
}

func (limitedArgs) JobSpec() jobs.KindSpec {
	return jobs.KindSpec{Name: "jobstest_limited", Concurrency: 2}
}

type uniqueArgs struct {
	Key   string `json:"key"`
	Extra int    `json:"extra"`
}

func (uniqueArgs) JobSpec() jobs.KindSpec {
	return jobs.KindSpec{Name: "jobstest_unique", Queue: "jobstest_unique", MaxAttempts: 3, UniqueBy: []string{"key"}}
}

func (a uniqueArgs) UniqueKey() string { return jobs.UniqueKeyOf(a.Key) }

// badArgs has an invalid spec (no name).
type badArgs struct{}

func (badArgs) JobSpec() jobs.KindSpec { return jobs.KindSpec{} }

// snoozeArgs has a budget of one attempt, so a snooze that counted as an
// attempt would leave no run after it.
type snoozeArgs struct {
	Key string `json:"key"`
}

func (snoozeArgs) JobSpec() jobs.KindSpec {
	return jobs.KindSpec{Name: "jobstest_snooze", MaxAttempts: 1}
}

// periodicArgs is the kind of the periodic cases.
type periodicArgs struct {
	Note string `json:"note"`
}

func (periodicArgs) JobSpec() jobs.KindSpec { return jobs.KindSpec{Name: "jobstest_periodic"} }

// cancelArgs is the kind of the running-cancellation case: attempts to
// spare, so a cancelled job that were retried would run again.
type cancelArgs struct {
	Key string `json:"key"`
}

func (cancelArgs) JobSpec() jobs.KindSpec {
	return jobs.KindSpec{Name: "jobstest_cancel", MaxAttempts: 5}
}

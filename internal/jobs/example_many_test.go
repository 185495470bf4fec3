package jobs_test

import (
	"context"
	"fmt"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/local"
	"github.com/cellgate/cellgate/internal/tenant"
)

type welcomeArgs struct {
	AccountID int64 `json:"account_id"`
}

func (welcomeArgs) JobSpec() jobs.KindSpec {
	return jobs.KindSpec{Name: "example_welcome", UniqueBy: []string{"account_id"}}
}

func (a welcomeArgs) UniqueKey() string { return jobs.UniqueKeyOf(a.AccountID) }

// EnqueueMany enqueues a batch for the tenant of ctx, one result per
// element; an element whose unique key an earlier one holds is a
// duplicate of that element's job.
func ExampleClient_EnqueueMany() {
	ctx := context.Background()
	c, err := jobs.NewClient(ctx, jobs.Config{}, local.New(), nil, jobs.Options{})
	if err != nil {
		panic(err)
	}
	defer func() { _, _ = c.Stop(ctx) }()

	batch := []jobs.Args{welcomeArgs{AccountID: 1}, welcomeArgs{AccountID: 2}, welcomeArgs{AccountID: 1}}
	results, err := c.EnqueueMany(tenant.With(ctx, "acme"), batch)
	if err != nil {
		panic(err)
	}
	for i, r := range results {
		fmt.Printf("element %d: duplicate=%v same job as element 0: %v\n", i, r.Duplicate, r.ID == results[0].ID)
	}
	// Output:
	// element 0: duplicate=false same job as element 0: true
	// element 1: duplicate=false same job as element 0: false
	// element 2: duplicate=true same job as element 0: true
}

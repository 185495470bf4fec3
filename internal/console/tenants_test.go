package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/console"
	"github.com/cellgate/cellgate/internal/console/consoletest"
	"github.com/cellgate/cellgate/internal/plans"
)

// testPlans are free (the default) and pro.
var testPlans = []config.Plan{
	{Name: "free", MaxConcurrentRequests: 4, MaxDBConnections: 1, RatePerSecond: 5, Burst: 10, Jobs: config.PlanJobs{MaxConcurrent: 1, Weight: 1}},
	{Name: "pro", MaxConcurrentRequests: 32, MaxDBConnections: 4, RatePerSecond: 50, Burst: 100, Jobs: config.PlanJobs{MaxConcurrent: 4, Weight: 4}},
}

// plannedEnv is a console over a cell with testPlans; every tenant has 2
// requests in flight and the uniform cap 99, which the plans replace.
func plannedEnv(t *testing.T) *consoletest.Env {
	t.Helper()
	return consoletest.New(t, consoletest.Options{Plans: testPlans, Configure: func(c *console.Config) {
		c.InFlight = func(string) (int64, int64) { return 2, 99 }
	}})
}

// postJSON posts body as JSON with a bearer token.
func postJSON(t *testing.T, u, token string, body any, out any) (int, string) {
	t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest("POST", u, bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("POST %s: %v in %s", u, err, b)
		}
	}
	return resp.StatusCode, string(b)
}

func rowOf(t *testing.T, rep console.TenantsReport, tenant string) console.TenantRow {
	t.Helper()
	for _, r := range rep.Tenants {
		if r.Tenant == tenant {
			return r
		}
	}
	t.Fatalf("tenants view lacks %s: %+v", tenant, rep.Tenants)
	return console.TenantRow{}
}

func limitOf(p *console.TenantPlan, f plans.Field) console.TenantLimit {
	for _, l := range p.Limits {
		if l.Field == f {
			return l
		}
	}
	return console.TenantLimit{}
}

// TestTenantsViewPlans: the API and the page show each tenant's plan, its
// source, the limits in force, in flight against the plan's cap and the
// refusals and shadow refusals per resource; a tenant of the table shows
// though never refused; the read-only role sees no form.
func TestTenantsViewPlans(t *testing.T) {
	t.Parallel()
	env := plannedEnv(t)
	ctx := context.Background()
	pro := "pro"
	if _, _, err := env.Plans.Apply(ctx, "initech", "test", plans.Change{Plan: &pro,
		Set: map[plans.Field]plans.Override{plans.RatePerSecond: {Value: 20, Enforce: false}, plans.JobsWeight: {Value: 8, Enforce: true}}}); err != nil {
		t.Fatal(err)
	}
	env.Rejections.Add("acme")
	for range 3 {
		env.LimitCounts.Add("acme", console.ResourceRate, false)
	}
	env.LimitCounts.Add("acme", console.ResourceRequest, true)
	env.LimitCounts.Add("acme", console.ResourceRequest, true)
	env.LimitCounts.Add("acme", console.ResourceDB, false)

	var rep console.TenantsReport
	if st, body := call(t, "GET", env.URL+"/admin/api/tenants", consoletest.AdminToken, &rep); st != http.StatusOK {
		t.Fatalf("GET tenants = %d %s", st, body)
	}
	if strings.Join(rep.Plans, ",") != "free,pro" || rep.DefaultPlan != "free" || rep.TableTenants != 1 || !rep.LimitsCounted {
		t.Errorf("report plans %v default %q table %d counted %v", rep.Plans, rep.DefaultPlan, rep.TableTenants, rep.LimitsCounted)
	}
	acme := rowOf(t, rep, "acme")
	if acme.Plan == nil || acme.Plan.Name != "free" || acme.Plan.Source != plans.SourceDefault || acme.Plan.InTable {
		t.Fatalf("acme's plan = %+v, want free from the default", acme.Plan)
	}
	if acme.InFlight != 2 || acme.Cap != 4 {
		t.Errorf("acme in flight %d / %d, want 2 / 4 (free's cap, not the uniform 99)", acme.InFlight, acme.Cap)
	}
	want := console.LimitTally{Refused: console.ResourceCounts{Rate: 3, DB: 1}, Shadow: console.ResourceCounts{Request: 2}}
	if acme.Limited == nil || *acme.Limited != want {
		t.Errorf("acme limited = %+v, want %+v", acme.Limited, want)
	}
	initech := rowOf(t, rep, "initech")
	if initech.Plan == nil || initech.Plan.Name != "pro" || initech.Plan.Source != plans.SourceTable || initech.Cap != 32 || initech.Rejections != 0 || initech.Limited != nil {
		t.Fatalf("initech = %+v plan %+v, want pro from the table, cap 32, no refusals", initech, initech.Plan)
	}
	if l := limitOf(initech.Plan, plans.JobsWeight); l.Value != 8 || l.From != "override" || l.Shadow {
		t.Errorf("initech's weight = %+v, want 8 from an override", l)
	}
	if l := limitOf(initech.Plan, plans.RatePerSecond); l.Value != 50 || l.From != "plan" || !l.Shadow || l.Override == nil || l.Override.Value != 20 {
		t.Errorf("initech's rate = %+v, want pro's 50 in force and a shadow 20", l)
	}

	ro := newBrowser(t)
	ro.post(env.URL+"/admin/login", url.Values{"token": {consoletest.AdminToken}})
	st, page := ro.get(env.URL + "/admin/tenants")
	if st != http.StatusOK {
		t.Fatalf("tenants page = %d", st)
	}
	for _, want := range []string{
		`<tr data-tenant="initech">`, `data-plan="pro">pro <span class="hint">(table)</span>`,
		`<span class="limit" data-field="jobs.weight">weight 8*</span>`,
		`<span class="limit" data-field="rate_per_second">rate 50 (shadow 20)</span>`,
		`data-plan="free">free <span class="hint">(default)</span>`,
		`<td class="limited"><span class="refused">refused: rate 3, db 1</span><br><span class="shadow">shadow: request 2</span></td>`,
		`<td class="n in-flight">2 / 4</td>`, `<td class="n in-flight">2 / 32</td>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("tenants page lacks %s:\n%s", want, page)
		}
	}
	if strings.Contains(page, "tenant-plan") || strings.Contains(page, "tenant-add") {
		t.Errorf("the read-only role sees a tenant form")
	}
	op := newBrowser(t)
	op.post(env.URL+"/admin/login", url.Values{"token": {consoletest.OperatorToken}})
	_, page = op.get(env.URL + "/admin/tenants")
	for _, want := range []string{`class="tenant-plan" data-tenant="acme"`, `class="tenant-plan" data-tenant="initech"`, `id="tenant-add"`,
		`<option value="pro" selected>pro</option>`, `<input name="rate_per_second" value="20"`, `<option value="shadow" selected>shadow</option>`} {
		if !strings.Contains(page, want) {
			t.Errorf("operator's tenants page lacks %s", want)
		}
	}
}

// TestTenantsChange: an operator's form and API changes reach the tenant
// table through the store and are audited with before and after; the
// read-only role is refused 403, a form without its CSRF token 403, a bad
// value 400 naming the field.
func TestTenantsChange(t *testing.T) {
	t.Parallel()
	env := plannedEnv(t)
	op := newBrowser(t)
	op.post(env.URL+"/admin/login", url.Values{"token": {consoletest.OperatorToken}})
	_, page := op.get(env.URL + "/admin/tenants")
	csrf := csrfRe.FindStringSubmatch(page)[1]

	// Add acme on pro with a shadow request cap of 2.
	st, body := op.post(env.URL+"/admin/tenants", url.Values{"csrf": {csrf}, "tenant": {"acme"}, "plan": {"pro"},
		"max_concurrent_requests": {"2"}, "max_concurrent_requests.mode": {"shadow"}})
	if st != http.StatusOK || !strings.Contains(body, "The tenant&#39;s plan and overrides are saved") {
		t.Fatalf("save acme = %d %s", st, body)
	}
	e := env.Plans.Resolve("acme", "")
	if v, ok := e.HasShadow(plans.MaxConcurrentRequests); e.Plan != "pro" || e.Limits.MaxConcurrentRequests != 32 || !ok || v != 2 {
		t.Fatalf("acme after the form = %+v, want pro with a shadow cap of 2", e)
	}
	if !strings.Contains(body, `<span class="limit" data-field="max_concurrent_requests">requests 32 (shadow 2)</span>`) {
		t.Errorf("the page after the change does not show it:\n%s", body)
	}
	row, _ := env.Plans.Snapshot().Row("acme")
	if !strings.HasPrefix(row.UpdatedBy, "console:session:") {
		t.Errorf("updated_by = %q, want the session", row.UpdatedBy)
	}
	// Enforce it and drop the plan: the same form, other values.
	st, body = op.post(env.URL+"/admin/tenants", url.Values{"csrf": {csrf}, "tenant": {"acme"}, "plan": {""},
		"max_concurrent_requests": {"2"}, "max_concurrent_requests.mode": {"enforce"}, "burst": {""}})
	if st != http.StatusOK {
		t.Fatalf("enforce = %d %s", st, body)
	}
	if e := env.Plans.Resolve("acme", ""); e.Plan != "free" || e.Limits.MaxConcurrentRequests != 2 || e.ShadowMask != 0 {
		t.Fatalf("acme after enforcing = %+v, want free with a cap of 2", e)
	}
	// The same form again changes nothing.
	if st, body = op.post(env.URL+"/admin/tenants", url.Values{"csrf": {csrf}, "tenant": {"acme"}, "plan": {""},
		"max_concurrent_requests": {"2"}}); st != http.StatusOK || !strings.Contains(body, "Nothing changed") {
		t.Errorf("unchanged form = %d %s", st, body)
	}

	// Refusals: no CSRF token, the read-only role, bad values.
	if st, body = op.post(env.URL+"/admin/tenants", url.Values{"tenant": {"acme"}, "plan": {"pro"}}); st != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Errorf("form without CSRF = %d, want 403", st)
	}
	ro := newBrowser(t)
	ro.post(env.URL+"/admin/login", url.Values{"token": {consoletest.AdminToken}})
	_, roPage := ro.get(env.URL + "/admin/tenants")
	roCSRF := csrfRe.FindStringSubmatch(roPage)[1]
	if st, _ = ro.post(env.URL+"/admin/tenants", url.Values{"csrf": {roCSRF}, "tenant": {"acme"}, "plan": {"pro"}}); st != http.StatusForbidden {
		t.Errorf("read-only form = %d, want 403", st)
	}
	if st, _ = postJSON(t, env.URL+"/admin/api/tenants/acme", consoletest.AdminToken, console.TenantChange{Plan: ptr("pro")}, nil); st != http.StatusForbidden {
		t.Errorf("read-only API change = %d, want 403", st)
	}
	for _, bad := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"tenant": {"acme"}, "max_concurrent_requests": {"-1"}}, "max_concurrent_requests: must be a finite number &gt;= 0, got -1"},
		{url.Values{"tenant": {"acme"}, "max_db_connections": {"lots"}}, "max_db_connections: &#34;lots&#34; is not a number"},
		{url.Values{"tenant": {"acme"}, "jobs.weight": {"0"}}, "jobs.weight: must be from 1 to 1000, got 0"},
		{url.Values{"tenant": {"acme"}, "burst": {"3"}, "burst.mode": {"sometimes"}}, "burst.mode: &#34;sometimes&#34;; want enforce or shadow"},
		{url.Values{"tenant": {"acme"}, "plan": {"gold"}}, "plan: plan &#34;gold&#34; is not in the spec; one of free, pro"},
		{url.Values{"tenant": {"a b"}, "plan": {"pro"}}, "tenant: &#34;a b&#34;"},
	} {
		bad.form.Set("csrf", csrf)
		st, body := op.post(env.URL+"/admin/tenants", bad.form)
		if st != http.StatusBadRequest || !strings.Contains(body, bad.want) {
			t.Errorf("form %v = %d, want 400 with %q:\n%s", bad.form, st, bad.want, body)
		}
	}
	if e := env.Plans.Resolve("acme", ""); e.Limits.MaxConcurrentRequests != 2 || e.Limits.JobsWeight != 1 {
		t.Errorf("a refused form changed acme: %+v", e)
	}

	// The API: operator bearer, JSON.
	var res console.TenantChangeResult
	st, body = postJSON(t, env.URL+"/admin/api/tenants/globex", consoletest.OperatorToken,
		console.TenantChange{Plan: ptr("pro"), Set: map[string]console.TenantOverride{"rate_per_second": {Value: 0.5}}}, &res)
	if st != http.StatusOK {
		t.Fatalf("API change = %d %s", st, body)
	}
	if res.After.Plan != "pro" || res.Plan.Name != "pro" || res.Before.Plan != "" {
		t.Errorf("API change answered %+v", res)
	}
	if l := limitOf(&res.Plan, plans.RatePerSecond); l.Value != 0.5 || l.From != "override" {
		t.Errorf("globex's rate after the API change = %+v, want 0.5 from an override", l)
	}
	for _, bad := range []struct {
		body any
		want string
	}{
		{console.TenantChange{Set: map[string]console.TenantOverride{"max_db_connections": {Value: -2}}}, "max_db_connections: must be a finite number \\u003e= 0, got -2"},
		{console.TenantChange{Plan: ptr("gold")}, `plan: plan \"gold\" is not in the spec`},
		{console.TenantChange{Unset: []string{"speed"}}, `unset: unknown limit \"speed\"`},
		{console.TenantChange{}, "names no change"},
		{map[string]any{"plan": "pro", "colour": "red"}, `unknown field \"colour\"`},
	} {
		if st, body := postJSON(t, env.URL+"/admin/api/tenants/globex", consoletest.OperatorToken, bad.body, nil); st != http.StatusBadRequest || !strings.Contains(body, bad.want) {
			t.Errorf("API %+v = %d %s, want 400 with %s", bad.body, st, body, bad.want)
		}
	}

	audit := env.Audit.String()
	for _, want := range []string{
		`role=operator actor=session:`,
		`action=set_tenant outcome=ok console=cell tenant=acme before="plan=- overrides=-" after="plan=pro overrides=max_concurrent_requests=2(shadow)"`,
		`action=set_tenant outcome=ok console=cell tenant=acme before="plan=pro overrides=max_concurrent_requests=2(shadow)" after="plan=- overrides=max_concurrent_requests=2"`,
		`role=operator actor=operator-token remote=127.0.0.1 action=set_tenant outcome=ok console=cell tenant=globex before="plan=- overrides=-" after="plan=pro overrides=rate_per_second=0.5"`,
	} {
		if !strings.Contains(audit, want) {
			t.Errorf("audit log lacks %s:\n%s", want, audit)
		}
	}
	if n := strings.Count(audit, "action=set_tenant"); n != 3 {
		t.Errorf("%d set_tenant audit lines, want 3 (refusals and no-ops write none):\n%s", n, audit)
	}
}

// TestTenantsChangeWithoutPlans: a cell without plans shows no plan
// columns and answers a change 501.
func TestTenantsChangeWithoutPlans(t *testing.T) {
	t.Parallel()
	env := consoletest.New(t, consoletest.Options{})
	if st, body := postJSON(t, env.URL+"/admin/api/tenants/acme", consoletest.OperatorToken, console.TenantChange{Plan: ptr("pro")}, nil); st != http.StatusNotImplemented {
		t.Errorf("change without plans = %d %s, want 501", st, body)
	}
	var rep console.TenantsReport
	call(t, "GET", env.URL+"/admin/api/tenants", consoletest.AdminToken, &rep)
	if len(rep.Plans) != 0 || rep.LimitsCounted {
		t.Errorf("report without plans: %+v", rep)
	}
}

func ptr(s string) *string { return &s }

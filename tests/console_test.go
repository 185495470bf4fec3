package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestCellConsole: a cell started with the admin token answers /admin/
// with HTML and /admin/api/jobs with JSON listing the jobs of both shards,
// each naming its database; without a token both refuse with no data.
func TestCellConsole(t *testing.T) {
	const (
		admin    = "cell-console-admin-token-0123456789abcdef"
		operator = "cell-console-operator-token-0123456789abcdef"
	)
	c := startCell(t, append(cellEnv(t), "CELLGATE_ADMIN_TOKEN="+admin, "CELLGATE_OPERATOR_TOKEN="+operator))
	c.waitStatus(t, "/readyz", 200, 30*time.Second)
	for i := range 8 {
		tenant := fmt.Sprintf("tenant-%d", i)
		if code, body := c.do(t, "POST", "/signup", tenant, `{"email":"a@`+tenant+`.test","name":"A"}`); code != http.StatusCreated {
			t.Fatalf("signup %s: %d %s", tenant, code, body)
		}
	}
	get := func(path, token string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", c.url+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	if code, _, body := get("/admin/api/jobs", ""); code != http.StatusUnauthorized || strings.Contains(body, "tenant-") {
		t.Errorf("/admin/api/jobs without a token = %d %s", code, body)
	}
	if code, _, body := get("/admin/", ""); code != http.StatusSeeOther || strings.Contains(body, "tenant-") {
		t.Errorf("/admin/ without a token = %d %s, want a redirect to the login page", code, body)
	}
	if code, ctype, body := get("/admin/", admin); code != 200 || !strings.HasPrefix(ctype, "text/html") || !strings.Contains(body, "shard-1") {
		t.Errorf("/admin/ with the token = %d %s", code, ctype)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, ctype, body := get("/admin/api/jobs?kind=send_welcome", admin)
		var page struct {
			Jobs []struct {
				Database string `json:"database"`
				Tenant   string `json:"tenant"`
			} `json:"jobs"`
			Partial bool `json:"partial"`
		}
		if code != 200 || !strings.HasPrefix(ctype, "application/json") || json.Unmarshal([]byte(body), &page) != nil {
			t.Fatalf("/admin/api/jobs = %d %s %s", code, ctype, body)
		}
		per := map[string]int{}
		for _, j := range page.Jobs {
			per[j.Database]++
		}
		if !page.Partial && len(page.Jobs) == 8 && per["shard-0"] > 0 && per["shard-1"] > 0 && per["shard-0"]+per["shard-1"] == 8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobs per database = %v (partial %v), want the 8 welcome jobs over shard-0 and shard-1", per, page.Partial)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The cell hands the console its workers and runs its sampler: the
	// lanes see every worker, the series have the sample taken at start.
	code, _, body := get("/admin/api/lanes", admin)
	var lanes struct {
		Observed bool `json:"observed"`
		Workers  int  `json:"workers"`
		PerDB    []struct {
			Database string `json:"database"`
		} `json:"per_database"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &lanes) != nil || !lanes.Observed || lanes.Workers == 0 || len(lanes.PerDB) != 3 {
		t.Errorf("/admin/api/lanes = %d %s, want the workers observed over 3 databases", code, body)
	}
	code, _, body = get("/admin/api/series", admin)
	var ser struct {
		Cell struct {
			Backlog []json.RawMessage `json:"backlog"`
		} `json:"cell"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &ser) != nil || len(ser.Cell.Backlog) == 0 {
		t.Errorf("/admin/api/series = %d %s, want the start-up sample", code, body)
	}

	// With tenancy on the cell hands the console its tenant table's store:
	// an operator's override through the API is written, served at once
	// and shown in the tenants view with the cap it sets.
	req, _ := http.NewRequest("POST", c.url+"/admin/api/tenants/tenant-0", strings.NewReader(`{"set":{"max_concurrent_requests":{"value":3}}}`))
	req.Header.Set("Authorization", "Bearer "+operator)
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("operator's override of tenant-0 = %d %s", resp.StatusCode, b)
		}
	}
	code, _, body = get("/admin/api/tenants", admin)
	var tv struct {
		Tenants []struct {
			Tenant string `json:"tenant"`
			Cap    int64  `json:"cap"`
			Plan   *struct {
				Source string `json:"source"`
				Row    struct {
					UpdatedBy string `json:"updated_by"`
				} `json:"row"`
			} `json:"plan"`
		} `json:"tenants"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &tv) != nil || len(tv.Tenants) != 1 || tv.Tenants[0].Tenant != "tenant-0" ||
		tv.Tenants[0].Cap != 3 || tv.Tenants[0].Plan == nil || tv.Tenants[0].Plan.Row.UpdatedBy != "console:operator-token" {
		t.Errorf("/admin/api/tenants after the override = %d %s, want tenant-0 with cap 3 changed by the operator token", code, body)
	}

	// A browser session lives in the control database: after its logout
	// the saved cookie is refused.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(method, path string, ck *http.Cookie, form url.Values) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, c.url+path, strings.NewReader(form.Encode()))
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if ck != nil {
			req.AddCookie(ck)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, _ := send("POST", "/admin/login", nil, url.Values{"token": {admin}})
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("login = %d %v", resp.StatusCode, resp.Cookies())
	}
	ck := resp.Cookies()[0]
	_, page := send("GET", "/admin/", ck, nil)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token on the overview:\n%s", page)
	}
	if resp, _ := send("GET", "/admin/api/queues", ck, nil); resp.StatusCode != 200 || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("session read = %d %v", resp.StatusCode, resp.Header)
	}
	if resp, _ := send("POST", "/admin/logout", ck, url.Values{"csrf": {m[1]}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout = %d", resp.StatusCode)
	}
	if resp, body := send("GET", "/admin/api/queues", ck, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("cookie replayed after logout = %d %s, want 401", resp.StatusCode, body)
	}
}

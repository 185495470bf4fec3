package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestCellConsole: a cell started with the admin token answers /admin/
// with HTML and /admin/api/jobs with JSON listing the jobs of both shards,
// each naming its database; without a token both refuse with no data.
func TestCellConsole(t *testing.T) {
	const admin = "cell-console-admin-token-0123456789abcdef"
	c := startCell(t, append(cellEnv(t), "CELLGATE_ADMIN_TOKEN="+admin, "CELLGATE_OPERATOR_TOKEN=cell-console-operator-token-0123456789abcdef"))
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
}

package tenancy

import (
	"net/http/httptest"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

func TestExtractWithPlanOnlyFromVerifiedToken(t *testing.T) {
	x := hsExtractor(t, func(c *JWTConfig) { c.PlanClaim = "plan" }).(PlanExtractor)
	claims := goodClaims("acme")
	claims["plan"] = "pro"
	id, plan, err := x.ExtractWithPlan(bearerRequest(t, mint(t, jwt.SigningMethodHS256, testHMACKey, claims)))
	if err != nil || id != "acme" || plan != "pro" {
		t.Fatalf("jwt: %q %q %v, want acme pro", id, plan, err)
	}
	claims["plan"] = 7
	if _, plan, err := x.ExtractWithPlan(bearerRequest(t, mint(t, jwt.SigningMethodHS256, testHMACKey, claims))); err != nil || plan != "" {
		t.Fatalf("non-string plan claim: %q %v, want none", plan, err)
	}
	// Without PlanClaim the token's plan is not read.
	plain := hsExtractor(t, nil).(PlanExtractor)
	claims["plan"] = "pro"
	if _, plan, _ := plain.ExtractWithPlan(bearerRequest(t, mint(t, jwt.SigningMethodHS256, testHMACKey, claims))); plan != "" {
		t.Fatalf("plan %q without a plan claim configured", plan)
	}
	// The header source never reports a plan, whatever the request holds.
	h := newExtractorT(t, Config{Source: SourceHeader}).(PlanExtractor)
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Tenant-ID", "acme")
	r.Header.Set("X-Plan", "pro")
	r.Header.Set("Authorization", "Bearer "+mint(t, jwt.SigningMethodHS256, testHMACKey, claims))
	if id, plan, err := h.ExtractWithPlan(r); err != nil || id != "acme" || plan != "" {
		t.Fatalf("header source: %q %q %v, want acme and no plan", id, plan, err)
	}
}

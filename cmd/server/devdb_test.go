package main

import (
	"strings"
	"testing"
)

func TestDevPrefix(t *testing.T) {
	a, err := devPrefix("", "/work/checkout-a")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := devPrefix("", "/work/checkout-b")
	again, _ := devPrefix("", "/work/checkout-a/.")
	if a == b || a != again || !rePrefix.MatchString(a) || len(a) != 10 {
		t.Fatalf("prefixes %q %q %q: want distinct per checkout, stable per path", a, b, again)
	}
	if p, err := devPrefix("alice", "/x"); err != nil || p != "alice" {
		t.Fatalf("explicit prefix: %q %v", p, err)
	}
	if _, err := devPrefix("Bad-Prefix", ""); err == nil || !strings.Contains(err.Error(), "CELLGATE_DEVDB_PREFIX") {
		t.Fatalf("a bad prefix: %v", err)
	}
	if n := devName("cg0123abcd", "my-app", "shard-0"); n != "cg0123abcd_my_app_shard_0" {
		t.Fatalf("devName = %q", n)
	}
}

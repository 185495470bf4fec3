package jobs

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// statsBackend is the least Backend the depth collector needs.
type statsBackend struct{ Backend }

func (statsBackend) Stats(context.Context) ([]QueueStats, error) {
	return []QueueStats{{Queue: "default", Waiting: 3, Running: 1}, {Queue: "mail", Waiting: 0}}, nil
}

func TestEachCollectorLints(t *testing.T) {
	m := newMetrics(statsBackend{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.forKind("send_welcome").completed.Inc()
	m.lane(0).Inc()
	for _, c := range []prometheus.Collector{m.running, m.completed, m.failed, m.retried, m.laneBusy, m.depth} {
		problems, err := testutil.CollectAndLint(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
	if n := testutil.CollectAndCount(m.depth); n != 2 {
		t.Errorf("queue depth series = %d, want 2", n)
	}
}

type plainStruct struct {
	A int               `json:"a"`
	B string            `json:"b,omitempty"`
	C [2]float64        `json:"c"`
	D inner             `json:"d"`
	E uint8             `json:"e,string"`
	F bool              `json:"f"`
	G namedString       `json:"g"`
	H [1]inner          `json:"h"`
	I int64             `json:"i"`
	J float32           `json:"j"`
	K map[string]string `json:"-"` // excluded below by its own type
}

type inner struct {
	X int `json:"x"`
}

type namedString string

type noTags struct{ A, B int }

type (
	withSlice struct{ A []int }
	withMap   struct{ A map[string]int }
	withPtr   struct{ A *int }
	withAny   struct{ A any }
	withTime  struct{ A time.Time }
	withDash  struct {
		A int `json:"-"`
	}
	//lint:ignore U1000 the unexported field is the point: plainArgs must see it
	withHidden  struct{ a int }
	withEmbed   struct{ inner }
	withCustom  struct{ A custom }
	custom      int
	withRawJSON struct{ A json.RawMessage }
)

func (c custom) MarshalJSON() ([]byte, error) { return []byte(`"x"`), nil }

// clash builds a struct whose two fields have the JSON names a and b (built
// at run time: vet rightly refuses such a literal type).
func clash(a, b string) reflect.Type {
	return reflect.StructOf([]reflect.StructField{
		{Name: "A", Type: reflect.TypeFor[int](), Tag: reflect.StructTag(`json:"` + a + `"`)},
		{Name: "B", Type: reflect.TypeFor[int](), Tag: reflect.StructTag(`json:"` + b + `"`)},
	})
}

func TestPlainArgs(t *testing.T) {
	type onlyPlain struct {
		A int         `json:"a"`
		B string      `json:"b,omitempty"`
		C [2]float64  `json:"c"`
		D inner       `json:"d"`
		E uint8       `json:"e,string"`
		G namedString `json:"g"`
		H [1]inner    `json:"h"`
	}
	for _, typ := range []reflect.Type{
		reflect.TypeFor[onlyPlain](), reflect.TypeFor[noTags](), reflect.TypeFor[inner](), reflect.TypeFor[struct{}](),
	} {
		if !plainArgs(typ) {
			t.Errorf("%v: want plain", typ)
		}
	}
	for _, typ := range []reflect.Type{
		reflect.TypeFor[plainStruct](), reflect.TypeFor[withSlice](), reflect.TypeFor[withMap](),
		reflect.TypeFor[withPtr](), reflect.TypeFor[withAny](), reflect.TypeFor[withTime](),
		reflect.TypeFor[withDash](), reflect.TypeFor[withHidden](), reflect.TypeFor[withEmbed](),
		clash("x", "x"), clash("name", "NAME"), reflect.TypeFor[withCustom](),
		reflect.TypeFor[withRawJSON](),
	} {
		if plainArgs(typ) {
			t.Errorf("%v: want not plain", typ)
		}
	}

	// The property plainArgs promises: the round trip gives back the value.
	v := onlyPlain{A: -7, B: "héllo <&> \"q\" \u2028 \ufffd", C: [2]float64{0.1, -0}, D: inner{X: 3}, E: 255, G: "g", H: [1]inner{{X: 9}}}
	enc, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if !handOver(enc) {
		t.Fatalf("valid UTF-8 (including a real U+FFFD) refused: %s", enc)
	}
	var back onlyPlain
	if err := json.Unmarshal(enc, &back); err != nil {
		t.Fatal(err)
	}
	if back != v {
		t.Fatalf("round trip %+v != %+v", back, v)
	}
	bad, _ := json.Marshal(onlyPlain{B: "bad \xff byte"})
	if handOver(bad) {
		t.Fatal("a string with invalid UTF-8 changes in the round trip and must not be handed over")
	}
}

func TestUniqueKeyOf(t *testing.T) {
	if UniqueKeyOf("a,b") == UniqueKeyOf("a", "b") {
		t.Error(`("a,b") and ("a", "b") collide`)
	}
	if got := UniqueKeyOf("u1", 42); got != `["u1",42]` {
		t.Errorf("UniqueKeyOf = %s", got)
	}
}

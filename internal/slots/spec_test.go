package slots

import (
	"errors"
	"strings"
	"testing"
)

func TestParseSpecValid(t *testing.T) {
	cases := []struct {
		spec string
		want Range
	}{
		{"0", Range{0, 0}},
		{"42", Range{42, 42}},
		{"16383", Range{16383, 16383}},
		{"0-8191", Range{0, 8191}},
		{"8192-16383", Range{8192, 16383}},
		{"0-16383", Range{0, 16383}},
		{"7-7", Range{7, 7}},
	}
	for _, c := range cases {
		got, err := ParseSpec(c.spec)
		if err != nil || got != c.want {
			t.Errorf("ParseSpec(%q) = %v, %v; want %v", c.spec, got, err, c.want)
		}
	}
}

func TestParseSpecInvalid(t *testing.T) {
	cases := []struct {
		spec   string
		kind   error
		reason string // substring of the message
	}{
		{"", ErrSyntax, "empty"},
		{"16384", ErrOutOfRange, "slot 16384 is out of range 0..16383"},
		{"99999999999999999999999", ErrOutOfRange, "out of range"},
		{"0-16384", ErrOutOfRange, "range high end 16384 is out of range"},
		{"20000-1", ErrOutOfRange, "range low end 20000 is out of range"},
		{"8191-0", ErrReversed, "reversed range (8191 > 0)"},
		{"abc", ErrSyntax, `"abc" is not a slot number`},
		{"1-x", ErrSyntax, `range high end "x" is not a slot number`},
		{"1-2-3", ErrSyntax, `range high end "2-3" is not a slot number`},
		{"-5", ErrSyntax, "range low end is missing"},
		{"5-", ErrSyntax, "range high end is missing"},
		{"-", ErrSyntax, "range low end is missing"},
		{"+5", ErrSyntax, "not a slot number"},
		{"0x10", ErrSyntax, "not a slot number"},
		{"1.5", ErrSyntax, "not a slot number"},
		{"007", ErrSyntax, "leading zero"},
		{"0-08191", ErrSyntax, `range high end "08191" has a leading zero`},
		{" 42", ErrSyntax, "whitespace is not allowed"},
		{"42\n", ErrSyntax, "whitespace is not allowed"},
		{"0 - 8191", ErrSyntax, "whitespace is not allowed"},
		{"0-\t1", ErrSyntax, "whitespace is not allowed"},
		{"٤٢", ErrSyntax, "not a slot number"}, // Arabic-Indic digits
	}
	for _, c := range cases {
		r, err := ParseSpec(c.spec)
		if err == nil {
			t.Errorf("ParseSpec(%q) = %v, want error", c.spec, r)
			continue
		}
		var se *SpecError
		if !errors.As(err, &se) || se.Spec != c.spec || se.Owner != "" {
			t.Errorf("ParseSpec(%q) error %#v, want *SpecError naming the spec", c.spec, err)
			continue
		}
		if !errors.Is(err, c.kind) {
			t.Errorf("ParseSpec(%q) error %v, want errors.Is %v", c.spec, err, c.kind)
		}
		if se.Err != ErrSyntax && se.Err != ErrOutOfRange && se.Err != ErrReversed {
			t.Errorf("ParseSpec(%q): Err = %v, want an exported sentinel", c.spec, se.Err)
		}
		msg := err.Error()
		if !strings.Contains(msg, c.reason) {
			t.Errorf("ParseSpec(%q) error %q, want it to contain %q", c.spec, msg, c.reason)
		}
		if quoted := `"` + strings.ReplaceAll(c.spec, "\n", `\n`) + `"`; !strings.Contains(msg, strings.ReplaceAll(quoted, "\t", `\t`)) {
			t.Errorf("ParseSpec(%q) error %q does not quote the spec", c.spec, msg)
		}
	}
}

func TestRangeString(t *testing.T) {
	for _, c := range []struct {
		r    Range
		want string
	}{{Range{42, 42}, "42"}, {Range{0, 8191}, "0-8191"}, {Range{0, 0}, "0"}} {
		if got := c.r.String(); got != c.want {
			t.Errorf("%#v.String() = %q, want %q", c.r, got, c.want)
		}
	}
	r := Range{10, 19}
	if r.Len() != 10 || !r.Contains(10) || !r.Contains(19) || r.Contains(9) || r.Contains(20) {
		t.Errorf("Range{10,19}: Len=%d Contains(9,10,19,20)=%v,%v,%v,%v",
			r.Len(), r.Contains(9), r.Contains(10), r.Contains(19), r.Contains(20))
	}
}

// FuzzParseSpec checks the parser's invariants on arbitrary input; the seed
// corpus is in testdata/fuzz/FuzzParseSpec.
func FuzzParseSpec(f *testing.F) {
	f.Fuzz(func(t *testing.T, spec string) {
		r, err := ParseSpec(spec)
		if err != nil {
			var se *SpecError
			if !errors.As(err, &se) || se.Spec != spec {
				t.Fatalf("ParseSpec(%q): error %v is not a *SpecError naming the spec", spec, err)
			}
			if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrOutOfRange) && !errors.Is(err, ErrReversed) {
				t.Fatalf("ParseSpec(%q): error %v wraps no sentinel", spec, err)
			}
			if r != (Range{}) {
				t.Fatalf("ParseSpec(%q) returned %v with an error", spec, r)
			}
			return
		}
		if r.Lo < 0 || r.Hi > MaxSlot || r.Lo > r.Hi {
			t.Fatalf("ParseSpec(%q) = %v, outside 0..%d or reversed", spec, r, MaxSlot)
		}
		s := r.String()
		r2, err := ParseSpec(s)
		if err != nil || r2 != r {
			t.Fatalf("ParseSpec(%q) = %v; its String %q re-parses to %v, %v", spec, r, s, r2, err)
		}
		// Accepted input is canonical except for the "N-N" spelling of "N".
		if s != spec && spec != s+"-"+s {
			t.Fatalf("ParseSpec(%q) accepted a non-canonical spelling of %q", spec, s)
		}
	})
}

package slots

import (
	"errors"
	"fmt"
	"strconv"
)

// Sentinels that a [*SpecError] wraps, for callers that branch on the kind of
// mistake rather than on its text.
var (
	// ErrSyntax: the spec is not "N" or "LO-HI" in canonical decimal (this
	// includes whitespace, signs, leading zeros and empty specs).
	ErrSyntax = errors.New("slots: slot spec syntax")
	// ErrOutOfRange: a slot number is above MaxSlot.
	ErrOutOfRange = errors.New("slots: slot out of range")
	// ErrReversed: a range whose low end is above its high end.
	ErrReversed = errors.New("slots: reversed slot range")
)

// Range is an inclusive run of slots, Lo <= Hi, both within 0..MaxSlot when
// it comes from this package.
type Range struct {
	// Lo is the first slot of the run.
	Lo int
	// Hi is the last slot of the run (inclusive).
	Hi int
}

// String returns the canonical spec: "42" for a single slot, "0-8191"
// otherwise. ParseSpec(r.String()) == r for every valid r.
func (r Range) String() string {
	if r.Lo == r.Hi {
		return strconv.Itoa(r.Lo)
	}
	return strconv.Itoa(r.Lo) + "-" + strconv.Itoa(r.Hi)
}

// Len is the number of slots in r.
func (r Range) Len() int { return r.Hi - r.Lo + 1 }

// Contains reports whether slot lies in r.
func (r Range) Contains(slot int) bool { return r.Lo <= slot && slot <= r.Hi }

// SpecError describes a slot spec that does not parse. It wraps ErrSyntax,
// ErrOutOfRange or ErrReversed.
type SpecError struct {
	// Owner is the owner whose spec this is; empty when the spec was parsed
	// on its own by ParseSpec.
	Owner string
	// Spec is the offending spec, verbatim.
	Spec string
	// Reason says what is wrong, for people.
	Reason string
	// Err is the sentinel for the kind of mistake.
	Err error
}

func (e *SpecError) Error() string {
	if e.Owner != "" {
		return fmt.Sprintf("slots: owner %q: bad slot spec %q: %s", e.Owner, e.Spec, e.Reason)
	}
	return fmt.Sprintf("slots: bad slot spec %q: %s", e.Spec, e.Reason)
}

// Unwrap returns the sentinel, for errors.Is.
func (e *SpecError) Unwrap() error { return e.Err }

// ParseSpec parses a slot spec: "N" (one slot) or "LO-HI" (inclusive, LO <=
// HI), numbers in 0..MaxSlot.
//
// The syntax is strict on purpose: no whitespace anywhere, no sign, no
// leading zeros ("0" itself is fine), nothing else. Specs live in
// configuration that decides where tenant data goes, and a lenient parser
// turns a typo like "0 - 8191" or "08191" into a silent guess; a config
// author who gets an error naming the spec fixes it in seconds. "N-N" is
// accepted and means the same as "N".
func ParseSpec(spec string) (Range, error) {
	bad := func(err error, format string, args ...any) (Range, error) {
		if errors.Is(err, ErrSyntax) {
			err = ErrSyntax // errLeadingZero and errNotNumber are private
		}
		return Range{}, &SpecError{Spec: spec, Reason: fmt.Sprintf(format, args...), Err: err}
	}
	if spec == "" {
		return bad(ErrSyntax, "empty; want N or LO-HI")
	}
	for i := 0; i < len(spec); i++ {
		switch spec[i] {
		case ' ', '\t', '\n', '\r', '\v', '\f':
			return bad(ErrSyntax, "whitespace is not allowed; want N or LO-HI")
		}
	}
	loText, hiText, isRange := cut(spec, '-')
	lo, err := parseSlot(loText)
	if err != nil {
		return bad(err, "%s", describe(loText, err, isRange, "low end"))
	}
	if !isRange {
		return Range{Lo: lo, Hi: lo}, nil
	}
	hi, err := parseSlot(hiText)
	if err != nil {
		return bad(err, "%s", describe(hiText, err, true, "high end"))
	}
	if lo > hi {
		return bad(ErrReversed, "reversed range (%d > %d); want LO-HI with LO <= HI", lo, hi)
	}
	return Range{Lo: lo, Hi: hi}, nil
}

// cut is strings.Cut for one byte, kept local so the parser reads top-down.
func cut(s string, sep byte) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// errLeadingZero and errNotNumber refine ErrSyntax inside the parser only;
// parseSlot's callers turn them into a reason and report ErrSyntax.
var (
	errLeadingZero = fmt.Errorf("%w: leading zero", ErrSyntax)
	errNotNumber   = fmt.Errorf("%w: not a number", ErrSyntax)
)

// parseSlot parses canonical decimal in 0..MaxSlot. It never overflows: it
// stops accumulating once the value is known to be out of range.
func parseSlot(s string) (int, error) {
	if s == "" {
		return 0, errNotNumber
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, errNotNumber
		}
		if n <= MaxSlot {
			n = n*10 + int(c-'0')
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, errLeadingZero
	}
	if n > MaxSlot {
		return 0, ErrOutOfRange
	}
	return n, nil
}

func describe(text string, err error, isRange bool, end string) string {
	what := "slot"
	if isRange {
		what = "range " + end
	}
	switch {
	case text == "":
		if isRange {
			return fmt.Sprintf("%s is missing; want LO-HI with decimal slots", what)
		}
		return "empty; want N or LO-HI"
	case err == ErrOutOfRange:
		return fmt.Sprintf("%s %s is out of range 0..%d", what, text, MaxSlot)
	case err == errLeadingZero:
		return fmt.Sprintf("%s %q has a leading zero; want plain decimal", what, text)
	default:
		if isRange {
			return fmt.Sprintf("%s %q is not a slot number; want N or LO-HI with decimal slots", what, text)
		}
		return fmt.Sprintf("%q is not a slot number; want N or LO-HI with decimal slots", text)
	}
}

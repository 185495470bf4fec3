package configload

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/tenancy"
	"github.com/cellgate/cellgate/policy"
	"github.com/cellgate/cellgate/schema"
)

// Mode says what a config is for, which decides one rule.
type Mode int

const (
	// Spec is the generator's view: the spec may list many cells and leave
	// server.cell empty, since the per-cell deploy files set it.
	Spec Mode = iota
	// Final is a config a process runs: with more than one cell it must
	// name its cell, or it would open every shard and serve every slot.
	Final
)

// Error is a refused config: every problem at once, ordered by file:line,
// each naming its spec path.
type Error struct {
	// Issues are the problems, sorted (schema.SortIssues).
	Issues []schema.Issue
}

func (e *Error) Error() string {
	return "config is invalid:\n  " + strings.ReplaceAll(schema.FormatIssues(e.Issues), "\n", "\n  ")
}

// Paths returns the spec path of every issue, in order.
func (e *Error) Paths() []string {
	out := make([]string, len(e.Issues))
	for i, is := range e.Issues {
		out[i] = is.Path
	}
	return out
}

// Validate is the one validation path of a config, shared by the generator
// (ValidateSpec), `server check` and `server serve` (Load): the CUE
// definitions (types, ranges, enums), the config's Go shape (durations
// that parse), the rules the server would otherwise meet only at start
// (StartRules) and the generated names, then the Rego policy. raw is the
// whole config; name labels positions in it ("" for a document the user
// did not write, such as a config built in memory). It returns the typed
// config and the policy's warnings; every refusal is an *Error listing
// all problems at once.
func Validate(ctx context.Context, raw []byte, name string, mode Mode) (config.Config, []string, error) {
	in := input{doc: raw, mode: mode}
	if name != "" {
		in.src = schema.JSONSource(name, raw)
	}
	return validate(ctx, in)
}

// ValidateSpec is the generator's check of a CUE spec as loaded
// (specload.LoadSpec; mode Spec, while the parity tests judge a spec in
// mode Final as a process would): the same stages as Validate, after CUE's
// own check of the spec, so every problem is named at once with its line
// in the spec. It returns the typed config, the complete config as JSON
// (what the generator renders) and the policy's warnings.
func ValidateSpec(ctx context.Context, sp *schema.Spec, mode Mode) (config.Config, []byte, []string, error) {
	cfg, warns, complete, err := run(ctx, input{spec: sp, src: sp.Source, mode: mode})
	return cfg, complete, warns, err
}

// input is one config to validate.
type input struct {
	// doc is the user's document: the whole config, or with base the
	// per-cell file merged over base.
	doc, base []byte
	// spec is a CUE spec as loaded (doc and base unused).
	spec *schema.Spec
	// src locates spec paths in the file the user wrote (nil: none).
	src  *schema.Source
	mode Mode
}

func validate(ctx context.Context, in input) (config.Config, []string, error) {
	cfg, warns, _, err := run(ctx, in)
	return cfg, warns, err
}

// maxRounds bounds how often the stages re-run after removing bad fields;
// each round removes at least one field, so a few suffice for any config
// the corpus or the fuzzer has produced.
const maxRounds = 8

// run is the staged validation. Each stage's bad fields are removed from
// the document (the default stands in) and the later stages run on the
// rest, so one report names every problem; an issue a later stage finds
// at, inside or around a removed path is a follow-on of one already
// reported and is dropped. All issues are placed in the user's file by
// spec path (in.src) and sorted by file:line.
func run(ctx context.Context, in input) (config.Config, []string, []byte, error) {
	var v verdict
	var doc []byte
	switch {
	case in.spec != nil:
		v.issues = append(v.issues, in.spec.Issues...)
		v.removed = append(v.removed, in.spec.Removed...)
		for _, is := range in.spec.Issues {
			v.removed = append(v.removed, is.Path)
		}
		doc = in.spec.Complete
		if doc == nil {
			doc = in.spec.Partial
		}
	default:
		var err error
		if doc, err = v.userDoc(in); err != nil {
			return config.Config{}, nil, nil, err
		}
	}

	var cfg config.Config
	var res policy.Result
	var complete []byte
	for round := 0; ; round++ {
		if round == maxRounds {
			return cfg, nil, nil, v.fail(v.issues, in.src)
		}
		// A spec CUE accepted whole is complete already (LoadSpec unified
		// it with #Config): its first round needs no second unification.
		out := schema.Outcome{Complete: doc}
		var err error
		if round > 0 || in.spec == nil || in.spec.Complete == nil {
			if out, err = schema.Unify(doc); err != nil {
				return cfg, nil, nil, err
			}
		}
		if len(out.Issues) > 0 {
			v.addAll(out.Issues)
			v.removed = append(v.removed, out.Removed...)
			if out.Partial == nil || bytes.Equal(out.Partial, doc) {
				v.standing(out.Issues)
				return cfg, nil, nil, v.fail(v.issues, in.src)
			}
			doc = out.Partial
			continue
		}
		complete = out.Complete
		if es := config.CheckShape(complete); len(es) > 0 {
			next, changed := v.stage(shapeIssues(es), doc)
			if changed {
				doc = next
				continue
			}
			v.standing(shapeIssues(es))
			return cfg, nil, nil, v.fail(v.issues, in.src)
		}
		cfg, err = config.Decode(complete)
		if err != nil {
			return cfg, nil, nil, v.fail(append(v.issues, schema.Issue{Msg: "decode config: " + err.Error()}), in.src)
		}
		if rules := append(StartRules(cfg, in.mode), nameRules(cfg)...); len(rules) > 0 {
			next, changed := v.stage(rules, doc)
			if changed {
				doc = next
				continue
			}
			v.standing(rules)
		}
		break
	}
	ev, err := evaluator(ctx)
	if err != nil {
		return cfg, nil, nil, err
	}
	res, err = ev.Eval(ctx, cfg)
	if err != nil {
		return cfg, nil, nil, fmt.Errorf("policy: %w", err)
	}
	for _, d := range res.Deny {
		path, msg := splitPath(d)
		if is := (schema.Issue{Path: path, Msg: msg}); !v.add(is) {
			v.standing([]schema.Issue{is})
		}
	}
	if !v.any() {
		v.issues = mapRules(cfg)
	}
	if v.any() {
		return cfg, res.Warn, nil, v.fail(v.issues, in.src)
	}
	return cfg, res.Warn, complete, nil
}

// userDoc is the first stage of a document the user wrote: its Go shape
// (unknown fields and mistyped values cannot be merged or unified: they
// are recorded and removed), then the merge over in.base when it is a
// per-cell file. The error ends validation: a document that does not read
// as JSON, or a merge that fails.
func (v *verdict) userDoc(in input) ([]byte, error) {
	es := config.CheckShape(in.doc)
	for _, e := range es {
		if strings.HasPrefix(e.Msg, "not valid JSON") || e.Path == "(document)" || e.Path == "" {
			is := schema.Issue{Path: strings.TrimPrefix(e.Path, "(document)"), Msg: e.Msg}
			if in.src != nil {
				is.File, is.Line = in.src.File, e.Line
			}
			return nil, v.fail(append(v.issues, is), in.src)
		}
	}
	doc, _ := v.stage(shapeIssues(es), in.doc)
	if in.base == nil {
		return doc, nil
	}
	merged, err := config.Merge(in.base, doc)
	if err != nil {
		return nil, v.fail(append(v.issues, schema.Issue{Msg: err.Error()}), in.src)
	}
	return merged, nil
}

// verdict gathers the issues of every stage and the paths removed.
type verdict struct {
	issues  []schema.Issue
	removed []string
}

func (v *verdict) any() bool { return len(v.issues) > 0 }

// followOn reports whether an issue is a follow-on of a removed path: its
// path is at, inside or around it, or its message names it (a rule
// relating two fields, judging the default that stands in for the one
// refused). Its problem is one already reported.
func (v *verdict) followOn(is schema.Issue) bool {
	if is.Path == "" {
		return false
	}
	for _, r := range v.removed {
		if r == "" {
			continue
		}
		if schema.Within(is.Path, r) || schema.Within(r, is.Path) || mentions(is.Msg, r) {
			return true
		}
	}
	return false
}

// mentions reports whether msg names path as a whole path (not a prefix
// of a longer one).
func mentions(msg, path string) bool {
	for i := 0; ; {
		j := strings.Index(msg[i:], path)
		if j < 0 {
			return false
		}
		end := i + j + len(path)
		before := i+j == 0 || !pathByte(msg[i+j-1])
		after := end == len(msg) || !pathByte(msg[end]) ||
			msg[end] == '.' && (end+1 == len(msg) || !pathByte(msg[end+1])) // a full stop
		if before && after {
			return true
		}
		i = i + j + 1
	}
}

func pathByte(c byte) bool {
	return c == '.' || c == '_' || c == '[' || c == ']' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// standing records a stage's issues when nothing is recorded yet: a guard
// so that a stage's refusal never turns into an acceptance, should every
// issue it found be judged a follow-on.
func (v *verdict) standing(is []schema.Issue) {
	if !v.any() {
		v.issues = append(v.issues, is...)
	}
}

// add records is unless it is a follow-on, and reports whether it did.
func (v *verdict) add(is schema.Issue) bool {
	if v.followOn(is) {
		return false
	}
	v.issues = append(v.issues, is)
	return true
}

// addAll records the issues of one stage: a follow-on test against the
// paths removed before it, not against its own. It returns those kept.
func (v *verdict) addAll(is []schema.Issue) []schema.Issue {
	var keep []schema.Issue
	for _, x := range is {
		if !v.followOn(x) {
			keep = append(keep, x)
		}
	}
	v.issues = append(v.issues, keep...)
	for _, x := range keep {
		v.removed = append(v.removed, x.Path)
	}
	return keep
}

// stage records the issues of one stage (addAll) and removes the path of
// each from doc, so the later stages run on the rest; it reports whether
// doc changed.
func (v *verdict) stage(is []schema.Issue, doc []byte) ([]byte, bool) {
	out := doc
	for _, x := range v.addAll(is) {
		out = v.remove(out, x.Path)
	}
	return out, !bytes.Equal(out, doc)
}

// remove takes path out of the JSON document doc (for a list element, the
// list: the indices of the rest would shift) and records what it removed.
// A path the document does not hold leaves it as it is.
func (v *verdict) remove(doc []byte, path string) []byte {
	if path == "" {
		return doc
	}
	v.removed = append(v.removed, path)
	sel := schema.SplitPath(path)
	for len(sel) > 0 {
		if _, err := strconv.Atoi(sel[len(sel)-1]); err != nil {
			break
		}
		sel = sel[:len(sel)-1]
		path = schema.ParentPath(path)
	}
	if len(sel) == 0 {
		return doc
	}
	v.removed = append(v.removed, path) // the list the element was in
	var root any
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	if d.Decode(&root) != nil {
		return doc
	}
	cur := root
	for _, s := range sel[:len(sel)-1] {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[s]
		case []any:
			i, err := strconv.Atoi(s)
			if err != nil || i < 0 || i >= len(c) {
				return doc
			}
			cur = c[i]
		default:
			return doc
		}
	}
	m, ok := cur.(map[string]any)
	if !ok {
		return doc
	}
	if _, ok := m[sel[len(sel)-1]]; !ok {
		return doc
	}
	delete(m, sel[len(sel)-1])
	out, err := json.Marshal(root)
	if err != nil {
		return doc
	}
	return out
}

// fail places the issues in the user's file and sorts them.
func (v *verdict) fail(is []schema.Issue, src *schema.Source) error {
	src.Place(is)
	return &Error{Issues: schema.SortIssues(is)}
}

func shapeIssues(es config.FieldErrors) []schema.Issue {
	out := make([]schema.Issue, len(es))
	for i, e := range es {
		out[i] = schema.Issue{Path: e.Path, Msg: e.Msg}
	}
	return out
}

// splitPath cuts a policy message "path: text" into its parts; the policy
// starts every message with the spec path it is about.
func splitPath(msg string) (string, string) {
	p, rest, ok := strings.Cut(msg, ": ")
	if !ok || strings.ContainsAny(p, " \"") {
		if i := strings.Index(p, " ("); ok && i > 0 && !strings.ContainsAny(p[:i], " \"") {
			return p[:i], p[i+1:] + ": " + rest
		}
		return "", msg
	}
	return p, rest
}

// StartRules are the checks that the server's start-up code (listener,
// tenancy, cell router, shard map) would otherwise be the first to make:
// they live here so `server check` and the generator refuse what `serve`
// would. Each issue names its spec path.
func StartRules(cfg config.Config, mode Mode) []schema.Issue {
	var out []schema.Issue
	add := func(path, format string, args ...any) {
		out = append(out, schema.Issue{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	if err := CheckAddress(cfg.Server.Address); err != nil {
		add("server.address", "%v", err)
	}
	for i, p := range cfg.Tenancy.PublicPaths {
		if _, err := tenancy.NewPublicPaths(p); err != nil {
			add(fmt.Sprintf("tenancy.public_paths[%d]", i), "%s", strings.TrimPrefix(err.Error(), "tenancy: "))
		}
	}
	for i, c := range cfg.Cells {
		if err := cells.CheckURL(c.URL); err != nil {
			add(fmt.Sprintf("cells[%d].url", i), "%v", err)
		}
	}
	for i, p := range cfg.Jobs.Periodic {
		if p.Cron != "" {
			if _, err := cron.ParseStandard(p.Cron); err != nil {
				add(fmt.Sprintf("jobs.periodic[%d].cron", i), "%q: %v", p.Cron, err)
			}
		}
		if _, err := time.LoadLocation(p.TimeZone); err != nil {
			add(fmt.Sprintf("jobs.periodic[%d].time_zone", i), "%q is not an IANA time zone (for example \"Europe/Paris\"): %v", p.TimeZone, err)
		}
	}
	if mode == Final && len(cfg.Cells) > 1 && cfg.Server.Cell == "" {
		add("server.cell", "empty with %d cells; a process serves one cell: set server.cell (the generated gen/deploy/<cell>.json does), or it would open every shard and serve every slot", len(cfg.Cells))
	}
	return out
}

// mapRules builds the cell and shard maps as the server does at start. The
// policy names gaps, overlaps and straddles in its own words; this runs
// only after it passed and catches whatever else the builders refuse.
func mapRules(cfg config.Config) []schema.Issue {
	if _, err := cells.DeployFiles(cfg); err != nil {
		path, msg := splitPath(err.Error())
		if path == "" {
			path = "cells"
		}
		return []schema.Issue{{Path: path, Msg: msg}}
	}
	return nil
}

// CheckAddress accepts a listen address of the form host:port or :port,
// with a numeric port (0-65535).
func CheckAddress(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not a listen address; write \":8080\" or \"127.0.0.1:8080\"", addr)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 || port != strconv.Itoa(n) {
		return fmt.Errorf("%q: port %q must be a number 0-65535; write e.g. \":8080\"", addr, port)
	}
	if strings.ContainsAny(host, " /") {
		return fmt.Errorf("%q: host %q is not a host name or IP address", addr, host)
	}
	return nil
}

package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leaseledger/leaseledger/events"
)

// Bounds of an expectations file.
const (
	// MaxCasesFileBytes bounds an expectations file.
	MaxCasesFileBytes = 1 << 20
	// MaxCases bounds the cases of one file.
	MaxCases = 4096
)

// Expectations of a Case.
const (
	// ExpectAllow: the case must be allowed.
	ExpectAllow = "allow"
	// ExpectDeny: the case must be denied.
	ExpectDeny = "deny"
)

// Case is one expectation an operator writes down about a policy set:
// this principal doing this action on this resource is allowed (or
// denied), and, optionally, by these policies. `leaseledger policy test`
// runs a file of them against a policy before it is put in force.
//
// The file is JSON: {"cases":[{…},…]}, each case an object with the
// fields below by their JSON names; unknown fields are refused. "hints"
// is an object of optional booleans (read_only, destructive, idempotent,
// open_world), each absent one taking its MCP default (DefaultHints).
type Case struct {
	// Name identifies the case in reports; "" is reported as #N (1-based).
	Name      string              `json:"name,omitempty"`
	Principal string              `json:"principal"`
	Action    events.AccessAction `json:"action"`
	Server    string              `json:"server"`
	// Target is the tool, prompt or resource URI (see Request).
	Target string `json:"target,omitempty"`
	// Ref is "ref/prompt" or "ref/resource" (complete only).
	Ref events.CompletionRef `json:"ref,omitempty"`
	// Hints are the tool's annotations; nil: DefaultHints.
	Hints *ToolHints `json:"hints,omitempty"`
	// ClientAddr is the client's address; zero: unknown.
	ClientAddr netip.Addr `json:"client_address,omitzero"`
	// Session is context.session; "" is allowed.
	Session string `json:"session,omitempty"`
	// Time is context.time; zero: the time the cases are run.
	Time time.Time `json:"time,omitzero"`
	// Expect is ExpectAllow or ExpectDeny.
	Expect string `json:"expect"`
	// Policies, when not nil, are the deciding policies expected, in any
	// order; an empty list expects none (a deny for lack of a permit).
	Policies []string `json:"policies,omitempty"`
}

// label names the case i (0-based) in reports.
func (c *Case) label(i int) string {
	if c.Name != "" {
		return c.Name
	}
	return "#" + strconv.Itoa(i+1)
}

// request is the Request the case asks.
func (c *Case) request(now time.Time) Request {
	r := Request{Principal: c.Principal, Action: c.Action, Server: c.Server, Target: c.Target, Ref: c.Ref,
		Session: c.Session, ClientAddr: c.ClientAddr, Time: c.Time, Hints: DefaultHints()}
	if c.Hints != nil {
		r.Hints = *c.Hints
	}
	if r.Time.IsZero() {
		r.Time = now
	}
	return r
}

// casesFile is the file's JSON form.
type casesFile struct {
	Cases []caseJSON `json:"cases"`
}

// caseJSON is a case as written: hints whose absent members take MCP's
// defaults.
type caseJSON struct {
	Case
	Hints *hintsJSON `json:"hints,omitempty"`
}

// hintsJSON is a hints object with optional members.
type hintsJSON struct {
	ReadOnly    *bool `json:"read_only"`
	Destructive *bool `json:"destructive"`
	Idempotent  *bool `json:"idempotent"`
	OpenWorld   *bool `json:"open_world"`
}

// resolve fills absent hints with DefaultHints.
func (h *hintsJSON) resolve() *ToolHints {
	t := DefaultHints()
	for _, f := range []struct {
		src *bool
		dst *bool
	}{{h.ReadOnly, &t.ReadOnly}, {h.Destructive, &t.Destructive}, {h.Idempotent, &t.Idempotent}, {h.OpenWorld, &t.OpenWorld}} {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
	return &t
}

// ParseCases decodes an expectations file (see Case), strictly: unknown
// fields, data after the object, an unknown action or expectation, a
// case Request.Validate refuses, or a policy id that breaks
// events.IDRule is ErrCases; more than MaxCasesFileBytes or MaxCases is
// ErrTooLarge. Errors name the line (JSON errors) or the case.
func ParseCases(b []byte) ([]Case, error) {
	if len(b) > MaxCasesFileBytes {
		return nil, &Error{Err: ErrTooLarge, cause: errors.New("more than " + strconv.Itoa(MaxCasesFileBytes) + " bytes")}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f casesFile
	if err := dec.Decode(&f); err != nil {
		e := &Error{Err: ErrCases, cause: err}
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			e.Line, e.Column = lineCol(b, se.Offset)
		case errors.As(err, &te):
			e.Line, e.Column = lineCol(b, te.Offset)
		}
		return nil, e
	}
	if _, err := dec.Token(); err != io.EOF {
		line, col := lineCol(b, dec.InputOffset())
		return nil, &Error{Line: line, Column: col, Err: ErrCases, cause: errors.New("data after the object")}
	}
	if len(f.Cases) > MaxCases {
		return nil, &Error{Err: ErrTooLarge, cause: errors.New("more than " + strconv.Itoa(MaxCases) + " cases")}
	}
	out := make([]Case, len(f.Cases))
	for i, cj := range f.Cases {
		c := cj.Case
		if cj.Hints != nil {
			c.Hints = cj.Hints.resolve()
		}
		if err := c.check(); err != nil {
			return nil, &Error{Policy: c.label(i), Err: ErrCases, cause: err}
		}
		out[i] = c
	}
	return out, nil
}

// check validates a decoded case.
func (c *Case) check() error {
	if c.Expect != ExpectAllow && c.Expect != ExpectDeny {
		return errors.New(`expect: want "allow" or "deny"`)
	}
	if c.Ref != "" && !c.Ref.Valid() {
		return errors.New(`ref: want "ref/prompt" or "ref/resource"`)
	}
	if err := c.request(time.Time{}).Validate(); err != nil {
		return err
	}
	for _, id := range c.Policies {
		if !events.ValidID(id) {
			return errors.New("policies: want ids " + events.IDRule)
		}
	}
	return nil
}

// CaseResult is the outcome of one Case.
type CaseResult struct {
	Case     Case
	Index    int // 0-based position in the file
	Decision Decision
	// Passed is true when the decision meets the expectation.
	Passed bool
	// Problem says how it failed ("" when it passed).
	Problem string
}

// Label names the case in reports: its name, or #N (1-based).
func (r *CaseResult) Label() string { return r.Case.label(r.Index) }

// Test decides every case under the set and compares each decision with
// its expectation. A case without a time is decided at the time Test
// runs.
func (s *Set) Test(cases []Case) []CaseResult {
	now := time.Now()
	out := make([]CaseResult, len(cases))
	for i := range cases {
		c := &cases[i]
		d := s.Decide(c.request(now))
		res := CaseResult{Case: *c, Index: i, Decision: d, Passed: true}
		got := ExpectDeny
		if d.Allowed {
			got = ExpectAllow
		}
		switch {
		case got != c.Expect:
			res.Passed = false
			res.Problem = fmt.Sprintf("want %s, got %s %s", c.Expect, got, policyList(d.Policies))
		case c.Policies != nil && !sameIDs(c.Policies, d.Policies):
			res.Passed = false
			res.Problem = fmt.Sprintf("%s as expected, but by %s, want %s", got, policyList(d.Policies), policyList(c.Policies))
		}
		out[i] = res
	}
	return out
}

// policyList formats deciding ids for a report.
func policyList(ids []string) string {
	if len(ids) == 0 {
		return "(no deciding policy)"
	}
	return "(" + strings.Join(ids, ", ") + ")"
}

// sameIDs reports whether a and b hold the same ids, in any order.
func sameIDs(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(slices.Compact(x), slices.Compact(y))
}

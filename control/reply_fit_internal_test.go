package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
	"github.com/leaseledger/leaseledger/projector/live"
)

// size is len(json.Marshal(v)).
func size(t *testing.T, v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// countSlack is what a fit may leave unused per omitted count: the base
// size reserves the count's largest value, which may have more digits.
const countSlack = 3

// The fits are exact: the reply is within the bound, and one more entry
// (the next one the rule would keep) would not be (but for countSlack);
// what is cut is counted.
func TestFitsAreExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	now := events.Instant{Time: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
	word := func() string { return strings.Repeat("x", 1+rng.IntN(300)) }
	for round := range 300 {
		limit := 300 + rng.IntN(20000)
		// Summary.
		var s audit.Summary
		s.Verdicts = map[string]int{"confirmed": 1}
		s.Unconfirmed = []audit.Unconfirmed{}
		for i := range rng.IntN(60) {
			s.Unconfirmed = append(s.Unconfirmed, audit.Unconfirmed{Activation: fmt.Sprint("a", i), Reasons: []string{word()}})
		}
		all := s.Unconfirmed
		if err := fitSummary(&s, limit); err != nil {
			t.Fatal(err)
		}
		k := len(s.Unconfirmed)
		if size(t, &s) > limit || s.Omitted != len(all)-k {
			t.Fatalf("round %d: summary %d bytes > %d or omitted %d of %d", round, size(t, &s), limit, s.Omitted, len(all))
		}
		if k < len(all) {
			s.Unconfirmed = all[:k+1]
			if size(t, &s) <= limit-countSlack {
				t.Fatalf("round %d: the summary kept %d entries, %d fit", round, k, k+1)
			}
		}
		// Activation: requests are kept first, then HTTP requests, then
		// the newest events.
		a := audit.Activation{Requests: []audit.Request{}, HTTPRequests: []audit.HTTPRequest{}, Timeline: []audit.Event{}}
		a.Report.Activation = "act"
		for i := range rng.IntN(30) {
			a.Requests = append(a.Requests, audit.Request{Handle: fmt.Sprint("h", i), Steps: []string{word()}})
		}
		for i := range rng.IntN(30) {
			a.HTTPRequests = append(a.HTTPRequests, audit.HTTPRequest{Ref: fmt.Sprint("r", i), Hops: []audit.HTTPHop{}, Barriers: []audit.HTTPBarrier{}, Steps: []string{word()}})
		}
		for i := range rng.IntN(60) {
			a.Timeline = append(a.Timeline, audit.Event{Seq: uint64(i + 1), Time: now, Kind: "call.admitted", Data: json.RawMessage(`{"x":"` + word() + `"}`)})
		}
		reqs, hreqs, tl := a.Requests, a.HTTPRequests, a.Timeline
		err := fitActivation(&a, limit)
		var be *bus.Error
		if err != nil {
			if !errors.As(err, &be) || be.Code != CodeTooLarge {
				t.Fatal(err)
			}
			continue
		}
		r, h, e := len(a.Requests), len(a.HTTPRequests), len(a.Timeline)
		if size(t, &a) > limit || a.RequestsOmitted != len(reqs)-r || a.HTTPRequestsOmitted != len(hreqs)-h || a.TimelineOmitted != uint64(len(tl)-e) {
			t.Fatalf("round %d: activation %d bytes > %d, or omitted counts wrong", round, size(t, &a), limit)
		}
		if e > 0 && a.Timeline[e-1].Seq != tl[len(tl)-1].Seq {
			t.Fatalf("round %d: the timeline lost its newest event", round)
		}
		if r < len(reqs) && h+e > 0 || h < len(hreqs) && e > 0 {
			t.Fatalf("round %d: later lists kept while an earlier one was cut", round)
		}
		grown := true
		switch {
		case r < len(reqs):
			a.Requests = reqs[:r+1]
		case h < len(hreqs):
			a.HTTPRequests = hreqs[:h+1]
		case e < len(tl):
			a.Timeline = tl[len(tl)-e-1:]
		default:
			grown = false
		}
		if grown && size(t, &a) <= limit-3*countSlack {
			t.Fatalf("round %d: one more entry of the first cut list fits", round)
		}
		// Leases: a page keeps a prefix and points at the rest.
		var out LeasesReply
		out.Leases = []projector.Lease{}
		for i := range rng.IntN(40) {
			out.Leases = append(out.Leases, projector.Lease{KeySession: fmt.Sprintf("s%03d", i), Server: strings.Repeat("y", 1+rng.IntN(100)), StartedAt: now})
		}
		rows := out.Leases
		after := len(rows) // a page holds every row after the cursor, or limit rows and more come
		if after > 0 {
			after += rng.IntN(2)
		}
		if err := fitLeases(&out, after, limit); err != nil {
			if !errors.As(err, &be) || be.Code != CodeTooLarge {
				t.Fatal(err)
			}
			continue
		}
		if size(t, &out) > limit || (len(out.Leases) < after) != (out.Next != "") {
			t.Fatalf("round %d: page %d bytes > %d, or next %q with %d of %d rows", round, size(t, &out), limit, out.Next, len(out.Leases), after)
		}
		if n := len(out.Leases); n < len(rows) {
			next := out.Next
			out.Leases, out.Next = rows[:n+1], ""
			if size(t, &out)+len(`,"next":""`)+len(next) <= limit-MaxCursorBytes {
				t.Fatalf("round %d: %d rows kept, %d fit", round, n, n+1)
			}
		}
	}
}

// An activation longer than MaxActivationEvents is refused, not folded
// in part.
func TestActivationEventBound(t *testing.T) {
	p, err := live.Open(context.Background(), live.Options{Ledger: ledger.Options{Dir: t.TempDir()}, SnapshotEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 6 {
		if _, err := p.Ledger().Append(context.Background(), events.Draft{Activation: "act-1", Session: "s", Server: "srv",
			Payload: &events.LeaseTerminated{Reason: "revoked"}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		max  uint64
		code string
	}{{6, ""}, {5, CodeTooLarge}} {
		h := &projection{p: p, maxEvents: c.max}
		_, err := h.activation(context.Background(), "", &ActivationRequest{Activation: "act-1"})
		var be *bus.Error
		if c.code == "" && err != nil || c.code != "" && (!errors.As(err, &be) || be.Code != c.code) {
			t.Fatalf("max %d: %v, want code %q", c.max, err, c.code)
		}
	}
}

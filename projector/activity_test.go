package projector_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
)

// The kinds of MCP traffic beside calls are counted per activation — subscriptions by how
// they ended and the open ones, list changes by list, request handles by
// method and outcome — and a session's log level is kept on the session
// and its own leases; an activation closed with a subscription open is
// confirmed all the same. Live, replayed and restored states agree.
func TestActivityCounts(t *testing.T) {
	uri1, uri2 := eventgen.Digest, otherDigest
	sess := func(p events.Payload) events.Draft { return events.Draft{Session: "s-1", Payload: p} }
	ds := []events.Draft{
		sessionOpened("s-1", "", events.SessionMCPHTTP),
		sess(&events.SessionLogLevel{Level: events.LogWarning}),
		d("act-1", &events.LeaseAcquiring{KeySession: "s-1", Fingerprint: eventgen.Digest}),
		{Activation: "act-2", Session: "s-1", Server: "shared-srv", Payload: &events.LeaseAcquiring{KeySession: "_shared", Fingerprint: eventgen.Digest, Shared: true}},
		opened("act-1"),
		d("act-1", &events.RequestRegistered{Handle: "q1", Owner: "o1", Method: events.MethodSubscribe, URISHA256: uri1, TimeoutNS: 5}),
		d("act-1", &events.RequestCompleted{Handle: "q1", Outcome: events.RequestOK}),
		d("act-1", &events.SubscriptionStarted{Handle: "q1", URISHA256: uri1}),
		d("act-1", &events.RequestRegistered{Handle: "q2", Owner: "o1", Method: events.MethodSubscribe, URISHA256: uri2, TimeoutNS: 5}),
		d("act-1", &events.RequestCompleted{Handle: "q2", Outcome: events.RequestOK}),
		d("act-1", &events.SubscriptionStarted{Handle: "q2", URISHA256: uri2}),
		d("act-1", &events.RequestRegistered{Handle: "q3", Owner: "o1", Method: events.MethodUnsubscribe, URISHA256: uri2, TimeoutNS: 5}),
		d("act-1", &events.RequestCompleted{Handle: "q3", Outcome: events.RequestOK}),
		d("act-1", &events.SubscriptionEnded{URISHA256: uri2, Reason: events.SubscriptionUnsubscribed, Handle: "q3"}),
		d("act-1", &events.RequestRegistered{Handle: "q4", Owner: "o1", Method: events.MethodGetPrompt, TimeoutNS: 5}),
		d("act-1", &events.RequestCompleted{Handle: "q4", Outcome: events.RequestError}),
		d("act-1", &events.RequestRegistered{Handle: "q5", Owner: "o1", Method: events.MethodComplete, TimeoutNS: 5}),
		d("act-1", &events.RequestCancelled{Handle: "q5", Reason: "caller_cancelled", LocalSettled: true, TransportAccepted: "yes", NotificationDelivered: "unknown", Remote: "unknown"}),
		d("act-1", &events.RequestCompleted{Handle: "q5", Outcome: events.RequestOK}),                   // after its cancellation: not counted again
		d("act-1", &events.SubscriptionEnded{URISHA256: uri2, Reason: events.SubscriptionSessionEnded}), // none open: unmatched
		d("act-1", &events.LeaseListChanged{List: events.ListTools}),
		d("act-1", &events.LeaseListChanged{List: events.ListPrompts}),
		d("act-1", &events.LeaseListChanged{List: events.ListPrompts}),
		d("act-1", &events.RelayCompleted{Method: events.RelayElicit, Outcome: events.RelayRefused, DurationNS: 1}),
		sess(&events.SessionLogLevel{Level: events.LogError}),
		d("act-3", &events.LeaseAcquiring{KeySession: "s-1", Fingerprint: eventgen.Digest}), // srv again: replaces act-1's lease row
	}
	ds = append(ds, barriers("act-1", "ok")...)
	ds = append(ds, closed("act-1", false))

	c := eventgen.NewChain(t0)
	live, replay := projector.New(), projector.New()
	for i, dr := range ds {
		env, raw := c.Seal(dr)
		if err := live.Apply(&env); err != nil {
			t.Fatalf("Apply %d: %v", i, err)
		}
		if err := replay.ApplyRaw(raw); err != nil {
			t.Fatalf("ApplyRaw %d: %v", i, err)
		}
	}
	b := mustMarshal(t, live)
	if got := mustMarshal(t, replay); !bytes.Equal(got, b) {
		t.Fatalf("replay differs:\n%s\n%s", got, b)
	}
	restored, err := projector.Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if again := mustMarshal(t, restored); !bytes.Equal(again, b) {
		t.Fatalf("snapshot round trip differs:\n%s\n%s", again, b)
	}

	for _, s := range []*projector.State{live, restored} {
		rep, ok := s.Report("act-1")
		if !ok {
			t.Fatal("no report")
		}
		if rep.Verdict != projector.ResultConfirmed {
			t.Fatalf("verdict %s %q: an open subscription is no cleanup failure", rep.Verdict, rep.Reasons)
		}
		wantSubs := projector.SubscriptionCounts{Started: 2, Unsubscribed: 1, SessionEnded: 1, Open: 1, Unmatched: 1}
		if rep.Subscriptions == nil || *rep.Subscriptions != wantSubs || rep.Subscriptions.Ended() != 2 {
			t.Fatalf("subscriptions %+v, want %+v", rep.Subscriptions, wantSubs)
		}
		if lc := rep.ListChanges; lc == nil || *lc != (projector.ListChangeCounts{Tools: 1, Prompts: 2}) || lc.Total() != 3 {
			t.Fatalf("list changes %+v", lc)
		}
		wantReq := map[events.RequestMethod]projector.RequestCounts{
			events.MethodSubscribe:   {Registered: 2, OK: 2},
			events.MethodUnsubscribe: {Registered: 1, OK: 1},
			events.MethodGetPrompt:   {Registered: 1, Error: 1},
			events.MethodComplete:    {Registered: 1, Cancelled: 1},
		}
		if !reflect.DeepEqual(rep.RequestMethods, wantReq) {
			t.Fatalf("request methods %+v, want %+v", rep.RequestMethods, wantReq)
		}
		if rep.Relays == nil || rep.Relays.Refused != 1 || rep.Relays.Total() != 1 {
			t.Fatalf("relays %+v", rep.Relays)
		}
		if x, ok := s.Session("s-1"); !ok || x.LogLevel != events.LogError {
			t.Fatalf("session %+v", x)
		}
		shared, _ := s.Lease(projector.LeaseKey{Session: "_shared", Server: "shared-srv"})
		later, _ := s.Lease(projector.LeaseKey{Session: "s-1", Server: "srv"})
		if shared == nil || shared.LogLevel != "" || later == nil || later.Activation != "act-3" || later.LogLevel != events.LogError {
			t.Fatalf("leases: shared %+v, later %+v", shared, later)
		}
		if rep, _ := s.Report("act-2"); rep.Subscriptions != nil || rep.ListChanges != nil || rep.RequestMethods != nil || rep.Relays != nil {
			t.Fatalf("act-2 counts %+v", rep)
		}
	}

	// A lease live when its session sets a level takes it; a new opening
	// of the session starts without one.
	f := newFeed(t)
	f.apply(sessionOpened("s-1", "", events.SessionMCPHTTP), d("act-1", &events.LeaseAcquiring{KeySession: "s-1", Fingerprint: eventgen.Digest}),
		sess(&events.SessionLogLevel{Level: events.LogDebug}))
	if l, _ := f.s.Lease(projector.LeaseKey{Session: "s-1", Server: "srv"}); l.LogLevel != events.LogDebug {
		t.Fatalf("live lease %+v", l)
	}
	f.apply(sessionOpened("s-1", "", events.SessionMCPHTTP))
	if x, _ := f.s.Session("s-1"); x.LogLevel != "" {
		t.Fatalf("reopened session %+v", x)
	}
	f.apply(events.Draft{Payload: &events.SessionLogLevel{Level: events.LogInfo}}, events.Draft{Payload: &events.LeaseListChanged{List: events.ListTools}})
	if an := f.s.Anomalies(); an.Unattributed != 2 || an.Unknown != 0 {
		t.Fatalf("anomalies %+v", an)
	}
}

// A snapshot whose open subscriptions disagree with their count, or that
// names an unknown request method, is corrupt.
func TestActivitySnapshotCorrupt(t *testing.T) {
	f := newFeed(t)
	f.apply(d("act-1", &events.SubscriptionStarted{Handle: "q1", URISHA256: eventgen.Digest}),
		d("act-1", &events.RequestRegistered{Handle: "q1", Owner: "o1", Method: events.MethodListPrompts, TimeoutNS: 5}))
	b := mustMarshal(t, f.s)
	for _, c := range [][2]string{
		{`"open":1`, `"open":2`},
		{`"prompts/list"`, `"prompts/lost"`},
	} {
		bad := bytes.Replace(b, []byte(c[0]), []byte(c[1]), 1)
		if bytes.Equal(bad, b) {
			t.Fatalf("snapshot without %s: %s", c[0], b)
		}
		if _, err := projector.Unmarshal(bad); err == nil {
			t.Fatalf("%s accepted", c[1])
		}
	}
}

package control_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/control"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
	"github.com/leaseledger/leaseledger/projector/live"
	"github.com/nats-io/nats.go"
)

// tableKeys returns the keys of p's lease table (only live ones with
// live), as the projector sorts them.
func tableKeys(t *testing.T, p *live.Projection, live bool, session string) []string {
	var keys []string
	if err := p.View(func(s *projector.State) {
		for _, l := range s.Leases() {
			if (!live || l.Live()) && (session == "" || l.KeySession == session) {
				keys = append(keys, l.Key().String())
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// allPages pages through the lease table with page size limit.
func allPages(t *testing.T, page func(after string) (control.LeasesReply, error)) (keys []string, pages int) {
	after := ""
	for {
		r, err := page(after)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, l := range r.Leases {
			keys = append(keys, l.Key().String())
		}
		if r.Next == "" {
			return keys, pages
		}
		if pages > 10000 {
			t.Fatal("paging does not end")
		}
		after = r.Next
	}
}

// The lease table pages in key order, every row exactly once, with the
// filters applied and Total counting every matching row.
func TestProjectionLeases(t *testing.T) {
	p := openProjection(t)
	fixture(t, p)
	b := startAPI(t, p, &fakeRuntime{}, bus.Options{})
	ctx := context.Background()
	for _, who := range []struct{ user, pass string }{{"", ""}, {roUser, roPass}, {wUser, wPass}, {ctlUser, ctlPass}} {
		c := client(t, b, who.user, who.pass)
		for _, f := range []control.LeasesRequest{{}, {Live: true}, {Session: "s-1"}, {Session: "_shared"}, {Session: "s-1", Live: true}} {
			want := tableKeys(t, p, f.Live, f.Session)
			for _, limit := range []int{0, 1, 2, control.MaxLeasesPage} {
				got, pages := allPages(t, func(after string) (control.LeasesReply, error) {
					req := f
					req.After, req.Limit = after, limit
					r, err := c.Leases(ctx, req)
					if err == nil && r.Total != len(want) {
						t.Fatalf("%+v: total %d, want %d", req, r.Total, len(want))
					}
					return r, err
				})
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("%q %+v limit %d: rows %v, want %v", who.user, f, limit, got, want)
				}
				if limit == 1 && pages != max(len(want), 1) {
					t.Fatalf("%+v: %d pages of one row for %d rows", f, pages, len(want))
				}
			}
		}
	}
	c := client(t, b, roUser, roPass)
	r, err := c.Leases(ctx, control.LeasesRequest{Session: "s-1"})
	if err != nil || len(r.Leases) != 2 || r.Leases[0].Server != "alpha" || r.Leases[0].State != projector.LeaseReady || r.Seq == 0 {
		t.Fatalf("%+v %v", r, err)
	}
	for _, bad := range []control.LeasesRequest{{Limit: -1}, {Limit: control.MaxLeasesPage + 1}, {Session: "a b"},
		{After: strings.Repeat("x", control.MaxCursorBytes+1)}} {
		_, err := c.Leases(ctx, bad)
		refusedWith(t, err, control.ErrInvalid, "a b")
	}
	// The control API's live leases: the same rows as the projection's.
	ctl := client(t, b, ctlUser, ctlPass)
	got, _ := allPages(t, func(after string) (control.LeasesReply, error) {
		return ctl.LiveLeases(ctx, control.LiveLeasesRequest{After: after, Limit: 1})
	})
	if want := tableKeys(t, p, true, ""); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("live leases %v, want %v", got, want)
	}
}

// A page stops at MaxReplyBytes before its row limit and says where the
// next starts: no row is lost or repeated.
func TestLeasesPagedWithinReplyBytes(t *testing.T) {
	p := openProjection(t)
	var ds []events.Draft
	const n = 1000 // rows of about 600 bytes: a page of MaxLeasesPage rows would exceed MaxReplyBytes
	for i := range n {
		s := fmt.Sprintf("%s-%04d", strings.Repeat("s", 100), i)
		ds = append(ds, leaseDrafts(fmt.Sprintf("a%d", i), s, strings.Repeat("v", 120), false, false)...)
	}
	appendDrafts(t, p, ds)
	b := startAPI(t, p, &fakeRuntime{}, bus.Options{})
	nc := dial(t, b, roUser, roPass)
	first := raw(t, nc, roUser, control.LeasesSubject, fmt.Sprintf(`{"limit":%d}`, control.MaxLeasesPage))
	var r control.LeasesReply
	if err := json.Unmarshal(first, &r); err != nil {
		t.Fatal(err)
	}
	if len(first) > control.MaxReplyBytes || len(r.Leases) >= control.MaxLeasesPage || r.Next == "" || r.Total != n {
		t.Fatalf("first page: %d bytes, %d rows, next %q, total %d", len(first), len(r.Leases), r.Next, r.Total)
	}
	c := control.NewClient(nc, roUser)
	got, pages := allPages(t, func(after string) (control.LeasesReply, error) {
		return c.Leases(context.Background(), control.LeasesRequest{After: after, Limit: control.MaxLeasesPage})
	})
	if want := tableKeys(t, p, false, ""); fmt.Sprint(got) != fmt.Sprint(want) || pages < 2 {
		t.Fatalf("%d rows in %d pages, want %d", len(got), pages, len(want))
	}
}

// activationJSON is `leaseledger audit --json <id>`'s fold, run here on
// the ledger directly.
func activationJSON(t *testing.T, l *ledger.Ledger, id string, timeline int) []byte {
	f := audit.NewFold(id, audit.Options{Timeline: timeline})
	if err := l.Scan(context.Background(), ledger.Query{Activation: id}, func(_ ledger.Seq, raw []byte) error { return f.AddRaw(raw) }); err != nil {
		t.Fatal(err)
	}
	a, err := f.Result()
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The activation reply is the audit fold's JSON, byte for byte.
func TestActivationIsTheAudit(t *testing.T) {
	p := openProjection(t)
	fixture(t, p)
	b := startAPI(t, p, &fakeRuntime{}, bus.Options{})
	nc := dial(t, b, "", "")
	for _, c := range []struct {
		id       string
		timeline int
	}{{"act-ok", 0}, {"act-bad", 0}, {"act-open", 0}, {"act-1", 0}, {"act-ok", 3}} {
		got := raw(t, nc, "", control.ActivationSubject, fmt.Sprintf(`{"activation":%q,"timeline":%d}`, c.id, c.timeline))
		if want := activationJSON(t, p.Ledger(), c.id, c.timeline); !bytes.Equal(got, want) {
			t.Fatalf("%s: reply differs from the audit fold:\n%s\n%s", c.id, got, want)
		}
	}
	cl := control.NewClient(nc, "")
	a, err := cl.Activation(context.Background(), control.ActivationRequest{Activation: "act-ok", Timeline: 3})
	if err != nil || a.Report.Verdict != projector.ResultConfirmed || len(a.Timeline) != 3 || a.TimelineOmitted == 0 || len(a.Requests) != 3 {
		t.Fatalf("%+v %v", a.Report, err)
	}
	_, err = cl.Activation(context.Background(), control.ActivationRequest{Activation: "act-none"})
	refusedWith(t, err, control.ErrNotFound, "act-none")
	for _, bad := range []control.ActivationRequest{{}, {Activation: "a/b"}, {Activation: "act-ok", Timeline: -1}, {Activation: "act-ok", Timeline: control.MaxTimeline + 1}} {
		_, err := cl.Activation(context.Background(), bad)
		refusedWith(t, err, control.ErrInvalid, "a/b")
	}
}

// An activation whose audit exceeds MaxReplyBytes is answered cut, with
// what was left out counted: the oldest timeline events first.
func TestActivationWithinReplyBytes(t *testing.T) {
	p := openProjection(t)
	var ds []events.Draft
	const n = 600 // requests of about 1 KiB (their wire id twice), events of about 600 bytes
	for i := range n {
		h := fmt.Sprintf("rq-%d", i)
		for _, pl := range []events.Payload{
			&events.RequestRegistered{Handle: h, Owner: "o-1", Method: "resources/read", TimeoutNS: 1e9},
			&events.RequestDispatched{Handle: h, WireID: strings.Repeat("w", 400) + h},
			&events.RequestCompleted{Handle: h, Outcome: "ok", ResultBytes: 10},
		} {
			ds = append(ds, events.Draft{Activation: "act-big", Session: "s-1", Server: "srv", Payload: pl})
		}
	}
	appendDrafts(t, p, ds)
	b := startAPI(t, p, &fakeRuntime{}, bus.Options{})
	nc := dial(t, b, roUser, roPass)
	got := raw(t, nc, roUser, control.ActivationSubject, `{"activation":"act-big"}`)
	var a audit.Activation
	if err := json.Unmarshal(got, &a); err != nil {
		t.Fatal(err)
	}
	if len(got) > control.MaxReplyBytes || len(a.Requests)+a.RequestsOmitted != n || a.TimelineOmitted+uint64(len(a.Timeline)) != 3*n {
		t.Fatalf("%d bytes; requests %d + %d omitted; timeline %d + %d omitted", len(got), len(a.Requests), a.RequestsOmitted, len(a.Timeline), a.TimelineOmitted)
	}
	if len(a.Timeline) > 0 && a.Timeline[len(a.Timeline)-1].Seq != 3*n {
		t.Fatalf("the timeline lost its newest event: ends at %d", a.Timeline[len(a.Timeline)-1].Seq)
	}
	if a.TimelineOmitted <= uint64(3*n-audit.DefaultTimeline) {
		t.Fatalf("nothing cut for the byte bound: timeline omitted %d", a.TimelineOmitted)
	}
}

// The audit summary is audit.Summarize of the live state.
func TestAuditSummary(t *testing.T) {
	p := openProjection(t)
	fixture(t, p)
	b := startAPI(t, p, &fakeRuntime{}, bus.Options{})
	nc := dial(t, b, wUser, wPass)
	for _, limit := range []int{0, 1, control.MaxUnconfirmed} {
		got := raw(t, nc, wUser, control.AuditSubject, fmt.Sprintf(`{"limit":%d}`, limit))
		var want []byte
		if err := p.View(func(s *projector.State) { want, _ = json.Marshal(audit.Summarize(s, limit)) }); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("limit %d: reply differs from audit.Summarize:\n%s\n%s", limit, got, want)
		}
	}
	c := control.NewClient(nc, wUser)
	s, err := c.Audit(context.Background(), control.AuditRequest{Limit: 1})
	if err != nil || s.Activations == 0 || len(s.Unconfirmed) != 1 || s.Omitted == 0 {
		t.Fatalf("%+v %v", s, err)
	}
	_, err = c.Audit(context.Background(), control.AuditRequest{Limit: control.MaxUnconfirmed + 1})
	refusedWith(t, err, control.ErrInvalid, "")
	// A summary is at most SummaryMaxAge old.
	appendDrafts(t, p, leaseDrafts("act-late", "s-3", "alpha", false, false))
	time.Sleep(control.SummaryMaxAge)
	if s2, err := c.Audit(context.Background(), control.AuditRequest{}); err != nil || s2.Activations != s.Activations+1 {
		t.Fatalf("after SummaryMaxAge: %d activations, want %d (%v)", s2.Activations, s.Activations+1, err)
	}
}

// Only the control user may call the control API: for every other user
// the bus refuses the subject as a permission violation (ErrForbidden, at
// once), and the runtime is never called. Everyone reads the projection.
func TestControlOnlyForTheControlUser(t *testing.T) {
	p := openProjection(t)
	fixture(t, p)
	rt := &fakeRuntime{reaped: 2}
	b := startAPI(t, p, rt, bus.Options{})
	ctx := context.Background()
	for _, who := range []struct{ user, pass string }{{"", ""}, {roUser, roPass}, {wUser, wPass}} {
		c := client(t, b, who.user, who.pass)
		// ErrForbidden is "at once" by construction: the client returns it
		// after the publication's flush, before it waits for any reply.
		_, err := c.Revoke(ctx, control.RevokeRequest{Session: "s-1", Server: "alpha", Reason: "operator"})
		refusedWith(t, err, control.ErrForbidden, "")
		refusedWith(t, c.Allow(ctx, control.AllowRequest{Session: "s-1", Server: "alpha"}), control.ErrForbidden, "")
		refusedWith(t, c.EndSession(ctx, "s-1"), control.ErrForbidden, "")
		_, err = c.Reap(ctx, 0)
		refusedWith(t, err, control.ErrForbidden, "")
		_, err = c.Reload(ctx)
		refusedWith(t, err, control.ErrForbidden, "")
		_, err = c.LiveLeases(ctx, control.LiveLeasesRequest{})
		refusedWith(t, err, control.ErrForbidden, "")
		// Calling the control user's own subjects is refused too.
		spoof := control.NewClient(dial(t, b, who.user, who.pass), ctlUser)
		refusedWith(t, spoof.EndSession(ctx, "s-1"), control.ErrForbidden, "")
		if _, err := c.Audit(ctx, control.AuditRequest{}); err != nil {
			t.Fatalf("%q: audit: %v", who.user, err)
		}
	}
	if n := rt.calls(); n != 0 {
		t.Fatalf("the runtime was called %d times by users other than the control user", n)
	}
	c := client(t, b, ctlUser, ctlPass)
	if r, err := c.Revoke(ctx, control.RevokeRequest{Shared: true, Server: "gamma", Reason: "operator", Deny: true}); err != nil || r.Revoked != 1 || !r.Done {
		t.Fatalf("revoke: %+v %v", r, err)
	}
	if err := c.Allow(ctx, control.AllowRequest{Shared: true, Server: "gamma"}); err != nil {
		t.Fatal(err)
	}
	if err := c.EndSession(ctx, "s-1"); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Reap(ctx, time.Minute); err != nil || r.Reaped != 2 || r.RecordFailed {
		t.Fatalf("reap: %+v %v", r, err)
	}
	if r, err := c.Reload(ctx); err != nil || r.Servers != 0 || r.Added == nil || r.Removed == nil {
		t.Fatalf("reload: %+v %v", r, err)
	}
	// The control user reads the projection and the log too.
	if _, err := c.Activation(ctx, control.ActivationRequest{Activation: "act-ok"}); err != nil {
		t.Fatal(err)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if fmt.Sprint(rt.revokes, rt.allows, rt.ended, rt.reaps, rt.reloads) != "[{ true gamma operator true}] [{ true gamma}] [s-1] [1m0s] 1" {
		t.Fatalf("runtime saw %v %v %v %v %d", rt.revokes, rt.allows, rt.ended, rt.reaps, rt.reloads)
	}
}

// A bus that denies anonymous clients admits no one unauthenticated to
// either API.
func TestAnonymousDenied(t *testing.T) {
	p := openProjection(t)
	b := startAPI(t, p, &fakeRuntime{}, bus.Options{DenyAnonymous: true})
	if nc, err := nats.Connect(b.ClientURL()); err == nil {
		nc.Close()
		t.Fatal("anonymous client admitted")
	}
	if _, err := client(t, b, roUser, roPass).Audit(context.Background(), control.AuditRequest{}); err != nil {
		t.Fatal(err)
	}
}

// The control handlers check requests before the runtime sees them, and
// map its errors to codes without echoing their text.
func TestRuntimeRequests(t *testing.T) {
	p := openProjection(t)
	rt := &fakeRuntime{}
	b := startAPI(t, p, rt, bus.Options{})
	c := client(t, b, ctlUser, ctlPass)
	ctx := context.Background()
	for _, bad := range []control.RevokeRequest{
		{Server: "alpha", Reason: "x"},                               // neither session nor shared
		{Session: "s-1", Shared: true, Server: "alpha", Reason: "x"}, // both
		{Session: "_shared", Server: "alpha", Reason: "x"},
		{Session: "s 1", Server: "alpha", Reason: "x"},
		{Session: "s-1", Server: "", Reason: "x"},
		{Session: "s-1", Server: strings.Repeat("n", control.MaxServerBytes+1), Reason: "x"},
		{Session: "s-1", Server: "alpha", Reason: ""},
		{Session: "s-1", Server: "alpha", Reason: "Not A Code"},
	} {
		_, err := c.Revoke(ctx, bad)
		refusedWith(t, err, control.ErrInvalid, "Not A Code")
	}
	for _, bad := range []control.AllowRequest{
		{Server: "alpha"}, {Session: "s-1", Shared: true, Server: "alpha"}, {Session: "_shared", Server: "alpha"}, {Session: "s-1"},
	} {
		refusedWith(t, c.Allow(ctx, bad), control.ErrInvalid, "")
	}
	refusedWith(t, c.EndSession(ctx, "bad session"), control.ErrInvalid, "bad session")
	_, err := c.Reap(ctx, -time.Second)
	refusedWith(t, err, control.ErrInvalid, "")
	if n := rt.calls(); n != 0 {
		t.Fatalf("invalid requests reached the runtime %d times", n)
	}
	// A server name need not be an identifier: it is the config's name.
	if r, err := c.Revoke(ctx, control.RevokeRequest{Session: "s-1", Server: "my.server", Reason: "x"}); err != nil || r.Revoked != 1 {
		t.Fatalf("%+v %v", r, err)
	}
	for _, m := range []struct {
		err  error
		want error
	}{
		{fmt.Errorf("gateway: %w: secret-7", control.ErrNotFound), control.ErrNotFound},
		{fmt.Errorf("runtime: %w: secret-7", control.ErrInvalid), control.ErrInvalid},
		{fmt.Errorf("runtime: %w: secret-7", control.ErrUnavailable), control.ErrUnavailable},
		{fmt.Errorf("provider said secret-7"), control.ErrFailed},
	} {
		rt.mu.Lock()
		rt.err = m.err
		rt.mu.Unlock()
		refusedWith(t, c.EndSession(ctx, "s-1"), m.want, "secret-7")
		_, err := c.Reap(ctx, 0)
		refusedWith(t, err, m.want, "secret-7")
		_, err = c.Reload(ctx)
		refusedWith(t, err, m.want, "secret-7")
		// Revoking nothing is not a success.
		_, err = c.Revoke(ctx, control.RevokeRequest{Session: "s-1", Server: "alpha", Reason: "x"})
		refusedWith(t, err, m.want, "secret-7")
	}
	// Some leases reaped, some of their ending not recorded: said so.
	rt.mu.Lock()
	rt.err, rt.reaped = fmt.Errorf("ledger down"), 3
	rt.mu.Unlock()
	if r, err := c.Reap(ctx, 0); err != nil || r.Reaped != 3 || !r.RecordFailed {
		t.Fatalf("%+v %v", r, err)
	}
}

// A reload answers what the runtime put in force, its lists never null
// and cut at MaxReloadNames with the rest counted; a configuration that
// failed to load is refused config-not-loaded (ErrConfigNotLoaded, which
// a client branches on) with static text, never the runtime's cause.
func TestReload(t *testing.T) {
	p := openProjection(t)
	rt := &fakeRuntime{reload: control.ReloadReply{Servers: 2, Added: []string{"github", "my.server"}, Removed: []string{"old"}, LeasesEnded: 3}}
	b := startAPI(t, p, rt, bus.Options{})
	c := client(t, b, ctlUser, ctlPass)
	ctx := context.Background()
	r, err := c.Reload(ctx)
	if err != nil || fmt.Sprintf("%+v", r) != "{Servers:2 Added:[github my.server] Removed:[old] AddedOmitted:0 RemovedOmitted:0 LeasesEnded:3 RecordFailed:false}" {
		t.Fatalf("%+v %v", r, err)
	}

	// Put in force, not all recorded.
	many := make([]string, control.MaxReloadNames+2)
	for i := range many {
		many[i] = fmt.Sprintf("s%03d", i)
	}
	rt.mu.Lock()
	rt.reload = control.ReloadReply{Servers: 0, Removed: many, LeasesEnded: 1, RecordFailed: true}
	rt.mu.Unlock()
	r, err = c.Reload(ctx)
	if err != nil || r.Added == nil || len(r.Added) != 0 || len(r.Removed) != control.MaxReloadNames || r.RemovedOmitted != 2 ||
		r.Removed[0] != "s000" || !r.RecordFailed || r.LeasesEnded != 1 {
		t.Fatalf("%+v %v", r, err)
	}

	// Not loaded: nothing changed, the client learns it by the sentinel.
	rt.mu.Lock()
	rt.err = fmt.Errorf("config not reloaded: %w: entry \"secret-7\": unset variable", control.ErrConfigNotLoaded)
	rt.mu.Unlock()
	_, err = c.Reload(ctx)
	refusedWith(t, err, control.ErrConfigNotLoaded, "secret-7")
	var ce *control.Error
	if !errors.As(err, &ce) || ce.Code != control.CodeConfigNotLoaded || errors.Is(err, control.ErrInvalid) {
		t.Fatalf("%#v", err)
	}

	// A name the API cannot carry is the runtime's bug: a failure.
	rt.mu.Lock()
	rt.err, rt.reload = nil, control.ReloadReply{Servers: 1, Added: []string{strings.Repeat("n", control.MaxServerBytes+1)}}
	rt.mu.Unlock()
	_, err = c.Reload(ctx)
	refusedWith(t, err, control.ErrFailed, "nnnn")
}

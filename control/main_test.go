package control_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/control"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/live"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The bus users of the tests.
const (
	roUser, roPass     = "dash", "pw"
	wUser, wPass       = "host", "pw2"
	ctlUser, ctlPass   = "ops", "pw3"
	fingerprint        = "2ef0feed634eb44e47f1d1831fe58db3f793487e90858894f6ff3fbc83321f4a"
	listingDigest      = "1c0432359e918586ae44b15354dd79da7b071f0efe5eeb33880349d3c6622127"
	fixtureActivations = 3 // act-ok, act-bad, act-open
)

// openProjection opens a real ledger with its live projection in a
// temporary directory, closed when the test ends.
func openProjection(t testing.TB) *live.Projection {
	t.Helper()
	p, err := live.Open(context.Background(), live.Options{Ledger: ledger.Options{Dir: t.TempDir()}, SnapshotEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func appendDrafts(t testing.TB, p *live.Projection, ds []events.Draft) {
	t.Helper()
	for len(ds) > 0 {
		n := min(len(ds), ledger.MaxAppendEvents)
		if _, err := p.Ledger().Append(context.Background(), ds[:n]...); err != nil {
			t.Fatal(err)
		}
		ds = ds[n:]
	}
}

// leaseDrafts are the events of one lease: acquired (ready), and
// terminated when ended.
func leaseDrafts(act, session, server string, shared, ended bool) []events.Draft {
	key := session
	if shared {
		key = "_shared"
	}
	d := func(p events.Payload) events.Draft {
		return events.Draft{Activation: act, Session: session, Server: server, Payload: p}
	}
	ds := []events.Draft{
		d(&events.LeaseAcquiring{KeySession: key, Fingerprint: fingerprint, Shared: shared}),
		d(&events.LeaseChildStarted{PID: 100, GuardianPID: 99, Cleanup: "verified"}),
		d(&events.LeaseListingPinned{ToolCount: 3, Pages: 1, ListingBytes: 900, ListingDigest: listingDigest}),
		d(&events.LeaseAcquired{Fingerprint: fingerprint, DurationNS: 1000}),
	}
	if ended {
		ds = append(ds, d(&events.LeaseTerminated{Reason: "revoked"}))
	}
	return ds
}

// auditDrafts are act-ok (closed, confirmed), act-bad (closed with a
// pending HTTP request) and act-open (never closed), with request
// timelines on act-ok.
func auditDrafts() []events.Draft {
	var ds []events.Draft
	d := func(a string, p events.Payload) {
		ds = append(ds, events.Draft{Activation: a, Session: "s-9", Server: "github", Payload: p})
	}
	now := events.At(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	for _, a := range []string{"act-ok", "act-bad", "act-open"} {
		d(a, &events.ConnectionOpened{Transport: "stdio", Cleanup: "verified", OneShot: true})
		d(a, &events.GuardianStarted{GuardianPID: 10, TargetPID: 11, HelperVersion: "leaseledger-guardian/1", PIDFD: true})
		for i := range 5 {
			ref := fmt.Sprintf("h-%d", i)
			d(a, &events.HTTPRegistered{Ref: ref, Scope: "request", Method: "POST", Origin: "https://mcp.example.com"})
			d(a, &events.HTTPBarrier{Ref: ref, Outcome: "ok"})
			d(a, &events.HTTPWorkerDown{Ref: ref, Worker: "w-1", Reason: "normal"})
		}
		if a == "act-ok" {
			for i := range 3 {
				h := fmt.Sprintf("rq-%d", i)
				d(a, &events.RequestRegistered{Handle: h, Owner: "o-1", Method: "resources/read", TimeoutNS: 1e9})
				d(a, &events.RequestDispatched{Handle: h, WireID: fmt.Sprintf("w%d", i)})
				d(a, &events.RequestCompleted{Handle: h, Outcome: "ok", ResultBytes: 10})
			}
		}
		if a == "act-bad" {
			d(a, &events.HTTPRegistered{Ref: "slow", Scope: "sse", Method: "GET", Origin: "https://mcp.example.com"})
		}
		if a == "act-open" {
			continue
		}
		d(a, &events.ConnectionPhase{Phase: "closing", BudgetNS: 5e9})
		d(a, &events.GuardianReceipt{HelperVersion: "leaseledger-guardian/1", TargetPID: 11, Reaped: true, ExitCode: 0,
			StdinClosedAt: now, StdoutClosedAt: now, StderrClosedAt: now, EOFGraceNS: 1, HelperExitCode: 0})
		for _, o := range projector.Obligations {
			d(a, &events.ConnectionBarrier{Obligation: o, Outcome: "ok", ElapsedNS: 5})
		}
		d(a, &events.ConnectionPhase{Phase: "closed"})
		d(a, &events.ConnectionClosed{ElapsedNS: 7})
	}
	return ds
}

// fixture fills p with four leases (s-1/alpha ready, s-1/beta
// terminated, the shared gamma ready, s-2/alpha ready) and the audit
// activations.
func fixture(t testing.TB, p *live.Projection) {
	t.Helper()
	var ds []events.Draft
	ds = append(ds, leaseDrafts("act-1", "s-1", "alpha", false, false)...)
	ds = append(ds, leaseDrafts("act-2", "s-1", "beta", false, true)...)
	ds = append(ds, leaseDrafts("act-3", "s-1", "gamma", true, false)...)
	ds = append(ds, leaseDrafts("act-4", "s-2", "alpha", false, false)...)
	ds = append(ds, auditDrafts()...)
	appendDrafts(t, p, ds)
}

// fakeRuntime records the control calls (the real runtime with the
// gateway is tested end to end with `serve`).
type fakeRuntime struct {
	mu      sync.Mutex
	revokes []control.RevokeRequest
	allows  []control.AllowRequest
	ended   []string
	reaps   []time.Duration
	reloads int
	err     error // returned by every call
	reaped  int
	reload  control.ReloadReply // Reload's reply
}

func (f *fakeRuntime) Revoke(_ context.Context, r control.RevokeRequest) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revokes = append(f.revokes, r)
	if f.err != nil {
		return 0, f.err
	}
	return 1, nil
}

func (f *fakeRuntime) Allow(_ context.Context, r control.AllowRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.allows = append(f.allows, r)
	return f.err
}

func (f *fakeRuntime) EndSession(_ context.Context, s string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ended = append(f.ended, s)
	return f.err
}

func (f *fakeRuntime) ReapIdle(_ context.Context, idleMax time.Duration) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reaps = append(f.reaps, idleMax)
	return f.reaped, f.err
}

func (f *fakeRuntime) Reload(context.Context) (control.ReloadReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reloads++
	if f.err != nil {
		return control.ReloadReply{}, f.err
	}
	return f.reload, nil
}

func (f *fakeRuntime) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.revokes) + len(f.allows) + len(f.ended) + len(f.reaps) + f.reloads
}

// startAPI starts a real bus on p's ledger with both APIs and the three
// named users; it is closed (before p) when the test ends.
func startAPI(t testing.TB, p *live.Projection, rt control.Runtime, opts bus.Options) *bus.Bus {
	t.Helper()
	opts.Port = bus.RandomPort
	opts.ReadOnlyUser, opts.ReadOnlyPassword = roUser, roPass
	opts.WriterUser, opts.WriterPassword = wUser, wPass
	opts.ControlUser, opts.ControlPassword = ctlUser, ctlPass
	opts.Services = append(control.ProjectionServices(p), control.RuntimeServices(rt, p)...)
	skey, _ := testKeys(t)
	cp := control.NewCheckpointer(p.Ledger(), testOrigin, skey)
	opts.Services = append(opts.Services, control.ProofServices(p.Ledger(), cp)...)
	b, err := bus.Start(p.Ledger(), opts)
	if err != nil {
		t.Fatal(err)
	}
	cp.SetPublish(b.PublishCheckpoint)
	t.Cleanup(func() { b.Close() })
	return b
}

// dial connects as user ("" anonymous); the connection's asynchronous
// errors (permission violations) are kept quiet.
func dial(t testing.TB, b *bus.Bus, user, pass string) *nats.Conn {
	t.Helper()
	opts := append(busclient.UserOptions(user, pass), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	nc, err := nats.Connect(b.ClientURL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func client(t testing.TB, b *bus.Bus, user, pass string) *control.Client {
	return control.NewClient(dial(t, b, user, pass), user)
}

// raw sends body to subject as user and returns the reply's bytes,
// failing on an error reply.
func raw(t testing.TB, nc *nats.Conn, user, subject, body string) []byte {
	t.Helper()
	m, err := nc.Request(busclient.UserSubject(subject, user), []byte(body), 10*time.Second)
	if err != nil {
		t.Fatalf("%s %s: %v", subject, body, err)
	}
	if e := m.Header.Get(busclient.HeaderError); e != "" {
		t.Fatalf("%s %s: refused: %s (%s)", subject, body, e, m.Header.Get(busclient.HeaderErrorCode))
	}
	return m.Data
}

// refusedWith fails unless err is a control.Error with the sentinel want,
// and a reply text that does not contain leak.
func refusedWith(t testing.TB, err, want error, leak string) {
	t.Helper()
	var ce *control.Error
	if !errors.Is(err, want) || !errors.As(err, &ce) {
		t.Fatalf("%v, want %v", err, want)
	}
	if leak != "" && strings.Contains(err.Error(), leak) {
		t.Fatalf("the refusal echoes %q: %v", leak, err)
	}
}

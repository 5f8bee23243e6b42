package bus_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/nats-io/nats.go"
)

const (
	readSubject    = "leaseledger.api.test.echo"
	controlSubject = "leaseledger.api.test.control"
)

// echo answers "<caller>:<body>" and counts its calls.
func echo(calls *atomic.Int64) bus.Handler {
	return func(_ context.Context, caller string, body []byte) ([]byte, error) {
		calls.Add(1)
		return append([]byte(caller+":"), body...), nil
	}
}

// servicesOptions has every named user and one service of each access.
func servicesOptions(read, control bus.Handler) bus.Options {
	return bus.Options{ReadOnlyUser: "dash", ReadOnlyPassword: "pw", WriterUser: "host", WriterPassword: "pw2",
		ControlUser: "ops", ControlPassword: "pw3",
		Services: []bus.Service{
			{Subject: readSubject, Access: bus.AccessRead, Handle: read},
			{Subject: controlSubject, Access: bus.AccessControl, Handle: control},
		}}
}

// userConn connects as user ("" anonymous) and collects the connection's
// asynchronous errors (permission violations).
func userConn(t *testing.T, b *bus.Bus, user, pass string) (*nats.Conn, chan error) {
	errs := make(chan error, 16)
	opts := append(busclient.UserOptions(user, pass), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	}))
	return connect(t, b.ClientURL(), opts...), errs
}

func call(nc *nats.Conn, subject, user string, body []byte, timeout time.Duration) (*nats.Msg, error) {
	return nc.Request(busclient.UserSubject(subject, user), body, timeout)
}

var users = []struct{ name, pass string }{{"", ""}, {"dash", "pw"}, {"host", "pw2"}, {"ops", "pw3"}}

// Read services answer every user (as that user); control services only
// the control user: for the others their subjects — their own and the
// control user's — are a permission violation, and the handler never runs.
func TestServiceAccess(t *testing.T) {
	var reads, controls atomic.Int64
	_, b := startBus(t, servicesOptions(echo(&reads), echo(&controls)))
	for _, u := range users {
		nc, errs := userConn(t, b, u.name, u.pass)
		m, err := call(nc, readSubject, u.name, []byte(`{"x":1}`), 5*time.Second)
		if err != nil || string(m.Data) != u.name+`:{"x":1}` || m.Header.Get(busclient.HeaderError) != "" {
			t.Fatalf("%q: read service: %v %v", u.name, m, err)
		}
		if u.name == "ops" {
			if m, err := call(nc, controlSubject, u.name, []byte("{}"), 5*time.Second); err != nil || string(m.Data) != "ops:{}" {
				t.Fatalf("control user: control service: %v %v", m, err)
			}
			// The control user also reads the log.
			if _, err := busclient.NewClient(nc).Head(context.Background()); err != nil {
				t.Fatalf("control user: head: %v", err)
			}
			continue
		}
		for _, as := range []string{u.name, "ops"} {
			if _, err := call(nc, controlSubject, as, []byte("{}"), 500*time.Millisecond); err == nil {
				t.Fatalf("%q called the control service on %q's subject", u.name, as)
			}
			select {
			case err := <-errs:
				if !errors.Is(err, nats.ErrPermissionViolation) {
					t.Fatalf("%q: %v, want a permission violation", u.name, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%q: no permission violation for the control subject", u.name)
			}
		}
	}
	if n := controls.Load(); n != 1 {
		t.Fatalf("control handler ran %d times, want once (the control user's call)", n)
	}
	if n := reads.Load(); n != int64(len(users)) {
		t.Fatalf("read handler ran %d times, want %d", n, len(users))
	}
}

// With DenyAnonymous, nobody unauthenticated can reach a read service.
func TestServiceDenyAnonymous(t *testing.T) {
	var reads atomic.Int64
	o := servicesOptions(echo(&reads), echo(&reads))
	o.DenyAnonymous = true
	_, b := startBus(t, o)
	if nc, err := nats.Connect(b.ClientURL()); err == nil {
		nc.Close()
		t.Fatal("anonymous client admitted")
	}
	nc, _ := userConn(t, b, "dash", "pw")
	if _, err := call(nc, readSubject, "dash", []byte("{}"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// Refusals carry the handler's code and static text; other errors a fixed
// text, never theirs; oversized requests and replies are refused, never
// cut; JSON requests are parsed strictly.
func TestServiceReplies(t *testing.T) {
	type req struct {
		N int `json:"n"`
	}
	type reply struct {
		Double int `json:"double"`
	}
	handlers := map[string]bus.Handler{
		"leaseledger.api.test.refuse": func(context.Context, string, []byte) ([]byte, error) {
			return nil, bus.Refuse("not-found", "no such thing")
		},
		"leaseledger.api.test.fail": func(context.Context, string, []byte) ([]byte, error) {
			return nil, errors.New("secret provider text")
		},
		"leaseledger.api.test.huge": func(context.Context, string, []byte) ([]byte, error) {
			return bytes.Repeat([]byte("x"), bus.MaxServiceReplyBytes+1), nil
		},
		"leaseledger.api.test.json": bus.JSON(func(_ context.Context, _ string, r *req) (*reply, error) {
			if r.N < 0 {
				return nil, bus.Refuse(busclient.CodeBadRequest, "n is negative")
			}
			return &reply{Double: 2 * r.N}, nil
		}),
	}
	var o bus.Options
	for subj, h := range handlers {
		o.Services = append(o.Services, bus.Service{Subject: subj, Access: bus.AccessRead, Handle: h})
	}
	_, b := startBus(t, o)
	nc := connect(t, b.ClientURL())
	for _, c := range []struct {
		subject, body, data, err, code string
	}{
		{"refuse", "{}", "", "no such thing", "not-found"},
		{"fail", "{}", "", "request failed", ""},
		{"huge", "{}", "", "reply too large: limit MaxServiceReplyBytes=786432", ""},
		{"json", `{"n":21}`, `{"double":42}`, "", ""},
		{"json", `{"n":-1}`, "", "n is negative", busclient.CodeBadRequest},
		{"json", `{"n":1,"m":2}`, "", "malformed request: unknown field", busclient.CodeBadRequest},
		{"json", `{"n":1} {}`, "", "malformed request: trailing bytes after the JSON object", busclient.CodeBadRequest},
		{"json", `[1]`, "", "malformed request: not a JSON object", busclient.CodeBadRequest},
		{"json", ``, "", "malformed request: empty body, want a JSON object", busclient.CodeBadRequest},
		{"json", `{"n":"1"}`, "", "malformed request: field n has the wrong type", busclient.CodeBadRequest},
		{"json", `{"N":1}`, "", "malformed request: unknown field", busclient.CodeBadRequest}, // encoding/json alone would take it
		{"json", `{"n":null}`, "", "malformed request: null value", busclient.CodeBadRequest}, // … and skip it
		{"json", `{}`, `{"double":0}`, "", ""},
		{"json", `{"n":1,` + strings.Repeat(" ", bus.MaxServiceRequestBytes) + `}`, "", "request too large: limit MaxServiceRequestBytes=65536", busclient.CodeBadRequest},
	} {
		m, err := call(nc, "leaseledger.api.test."+c.subject, "", []byte(c.body), 5*time.Second)
		if err != nil {
			t.Fatalf("%s %.20q: %v", c.subject, c.body, err)
		}
		if string(m.Data) != c.data || m.Header.Get(busclient.HeaderError) != c.err || m.Header.Get(busclient.HeaderErrorCode) != c.code {
			t.Errorf("%s %.20q: data %.40q error %q code %q; want %q %q %q", c.subject, c.body, m.Data,
				m.Header.Get(busclient.HeaderError), m.Header.Get(busclient.HeaderErrorCode), c.data, c.err, c.code)
		}
	}
}

// Service requests share the per-connection rate limit of their class and
// are answered rate-limited beyond it, never silently dropped.
func TestServiceRateLimited(t *testing.T) {
	var reads atomic.Int64
	o := servicesOptions(echo(&reads), echo(&reads))
	o.Limits = bus.Limits{RequestRate: 1, RequestBurst: 3}
	_, b := startBus(t, o)
	for _, u := range []struct{ name, pass, subject string }{{"dash", "pw", readSubject}, {"ops", "pw3", controlSubject}} {
		nc, _ := userConn(t, b, u.name, u.pass)
		limited := 0
		for range 6 {
			m, err := call(nc, u.subject, u.name, []byte("{}"), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if m.Header.Get(busclient.HeaderErrorCode) == busclient.CodeRateLimited {
				limited++
			}
		}
		if limited < 2 {
			t.Fatalf("%s: %d of 6 requests rate limited at burst 3", u.name, limited)
		}
	}
}

// A request whose reply inbox is another user's is dropped silently
// without running the handler: nothing is published into that inbox.
func TestServiceSpoofedInboxRefused(t *testing.T) {
	var reads atomic.Int64
	_, b := startBus(t, servicesOptions(echo(&reads), echo(&reads)))
	nc, _ := userConn(t, b, "dash", "pw")
	victim, _ := userConn(t, b, "ops", "pw3")
	got, err := victim.SubscribeSync(busclient.InboxPrefix("ops") + ".x.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := victim.Flush(); err != nil {
		t.Fatal(err)
	}
	// The reply would go to the control user's inbox; dash's barrier is a
	// proper request afterwards (the bus serves one user's requests in
	// order).
	if err := nc.PublishRequest(busclient.UserSubject(readSubject, "dash"), busclient.InboxPrefix("ops")+".x.y", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if _, err := call(nc, readSubject, "dash", []byte("{}"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1 (the spoofed request dropped)", n)
	}
	if err := victim.Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := got.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("the victim's inbox got %q (headers %v), want nothing", m.Data, m.Header)
	}
}

// A request arriving when every slot of its class is taken is refused at
// once with CodeBusy, not queued; other classes keep their slots.
func TestServiceBusyRefused(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	block := func(ctx context.Context, caller string, _ []byte) ([]byte, error) {
		if caller == "dash" {
			started <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return []byte("{}"), nil
	}
	opts := servicesOptions(block, block)
	opts.Limits.ServiceConcurrency = 2
	_, b := startBus(t, opts)
	nc, _ := userConn(t, b, "dash", "pw")
	replies := make(chan *nats.Msg, 2)
	for range 2 {
		go func() {
			m, _ := call(nc, readSubject, "dash", []byte("{}"), 10*time.Second)
			replies <- m
		}()
	}
	<-started
	<-started
	// Both handlers stay blocked until release: a reply now is a refusal
	// on arrival, not a call queued behind them.
	m, err := call(nc, readSubject, "dash", []byte("{}"), clusterWait)
	if err != nil {
		t.Fatal(err)
	}
	if code := m.Header.Get(busclient.HeaderErrorCode); code != bus.CodeBusy {
		t.Fatalf("third call: code %q, want %q", code, bus.CodeBusy)
	}
	// Another class is not held up.
	ops, _ := userConn(t, b, "ops", "pw3")
	if m, err := call(ops, readSubject, "ops", []byte("{}"), 5*time.Second); err != nil || m.Header.Get(busclient.HeaderError) != "" {
		t.Fatalf("ops: %v %v", err, m)
	}
	close(release)
	for range 2 {
		if m := <-replies; m == nil || m.Header.Get(busclient.HeaderError) != "" {
			t.Fatalf("blocked call: %v", m)
		}
	}
}

// Close cancels the ctx of the calls in progress and waits for them.
func TestServiceCloseWaitsForCalls(t *testing.T) {
	started := make(chan struct{})
	var ended atomic.Bool
	block := func(ctx context.Context, _ string, _ []byte) ([]byte, error) {
		close(started)
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond)
		ended.Store(true)
		return nil, ctx.Err()
	}
	l := open(t, t.TempDir())
	defer l.Close()
	b, err := bus.Start(l, bus.Options{Port: bus.RandomPort, Services: []bus.Service{{Subject: readSubject, Access: bus.AccessRead, Handle: block}}})
	if err != nil {
		t.Fatal(err)
	}
	nc := connect(t, b.ClientURL())
	go func() { _, _ = call(nc, readSubject, "", []byte("{}"), 5*time.Second) }()
	<-started
	b.Close()
	if !ended.Load() {
		t.Fatal("Close returned before the call in progress")
	}
}

func TestServiceOptionsRefused(t *testing.T) {
	l := open(t, t.TempDir())
	defer l.Close()
	h := func(context.Context, string, []byte) ([]byte, error) { return nil, nil }
	svc := func(subject string, a bus.Access) bus.Service {
		return bus.Service{Subject: subject, Access: a, Handle: h}
	}
	for name, o := range map[string]bus.Options{
		"outside the API":        {Services: []bus.Service{svc("foo.bar", bus.AccessRead)}},
		"upper case":             {Services: []bus.Service{svc("leaseledger.api.Foo", bus.AccessRead)}},
		"empty token":            {Services: []bus.Service{svc("leaseledger.api.a..b", bus.AccessRead)}},
		"wildcard":               {Services: []bus.Service{svc("leaseledger.api.*", bus.AccessRead)}},
		"no handler":             {Services: []bus.Service{{Subject: "leaseledger.api.x", Access: bus.AccessRead}}},
		"no access":              {Services: []bus.Service{svc("leaseledger.api.x", 0)}},
		"control without user":   {Services: []bus.Service{svc("leaseledger.api.x", bus.AccessControl)}},
		"built-in subject":       {Services: []bus.Service{svc(busclient.ReplaySubject, bus.AccessRead)}},
		"under a built-in":       {Services: []bus.Service{svc(busclient.HeadSubject+".x", bus.AccessRead)}},
		"prefix of another":      {Services: []bus.Service{svc("leaseledger.api.a", bus.AccessRead), svc("leaseledger.api.a.b", bus.AccessRead)}},
		"twice":                  {Services: []bus.Service{svc("leaseledger.api.a", bus.AccessRead), svc("leaseledger.api.a", bus.AccessRead)}},
		"payload below replies":  {Services: []bus.Service{svc("leaseledger.api.a", bus.AccessRead)}, Limits: bus.Limits{MaxPayload: 64 << 10}},
		"control is read-only":   {ReadOnlyUser: "a", ReadOnlyPassword: "x", ControlUser: "a", ControlPassword: "y"},
		"control is writer":      {WriterUser: "a", WriterPassword: "x", ControlUser: "a", ControlPassword: "y"},
		"control needs password": {ControlUser: "a"},
		"control reserved name":  {ControlUser: "leaseledger-api", ControlPassword: "x"},
	} {
		o.Port = bus.RandomPort
		b, err := bus.Start(l, o)
		if err == nil {
			b.Close()
			t.Fatalf("%s: Start accepted", name)
		}
		if !errors.Is(err, bus.ErrOptions) {
			t.Fatalf("%s: %v, want ErrOptions", name, err)
		}
	}
}

//go:build linux

package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Resource request handles against real servers under the guardian.

func reqEnv(t *testing.T) (*env, LeaseCapability, *Owner) {
	t.Helper()
	e := newEnv(t, nil)
	s, err := e.m.OpenSession(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Release(context.Background()) })
	capa := s.Capability()
	o, err := capa.NewOwner(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = o.End(context.Background()) })
	return e, capa, o
}

func await(t *testing.T, h *ResourceHandle) *ResourceResult {
	t.Helper()
	res, err := h.Await(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// clockText is the wall-clock time server-everything puts in dynamic
// resources' text (the only part two reads may differ in).
var clockText = regexp.MustCompile(`[0-9]{1,2}:[0-9]{2}:[0-9]{2}( [AP]M)?`)

func jsonEq(t *testing.T, what string, a, b any) {
	t.Helper()
	norm := func(v any) string { return clockText.ReplaceAllString(string(mustJSON(v)), "T") }
	if ja, jb := norm(a), norm(b); ja != jb {
		t.Errorf("%s: handle %s, plain %s", what, ja, jb)
	}
}

// server-everything: list resources (every page), list templates, read text
// and blob resources through handles; the results equal plain go-sdk
// calls on the same server.
func TestRequestEverythingMatchesPlain(t *testing.T) {
	e, capa, o := reqEnv(t)
	cfg := everything(t)
	e.cfg.Set("everything", cfg)
	ctx := ctxT(t, 60*time.Second)
	plain := plainSession(t, ctx, cfg)
	opts := DefaultRequestOptions()

	cursor, pages := "", 0
	var uris []string
	for {
		h, err := capa.ListResources(ctx, o, "everything", cursor, opts)
		if err != nil {
			t.Fatal(err)
		}
		got := await(t, h).Resources
		want, err := plain.ListResources(ctx, &mcp.ListResourcesParams{Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		jsonEq(t, "resources/list page", got, want)
		for _, r := range got.Resources {
			uris = append(uris, r.URI)
		}
		pages++
		if cursor = got.NextCursor; cursor == "" || pages == 3 {
			break
		}
	}
	if len(uris) < 2 {
		t.Fatalf("listed %d resources", len(uris))
	}
	h, err := capa.ListResourceTemplates(ctx, o, "everything", "", opts)
	if err != nil {
		t.Fatal(err)
	}
	wantT, err := plain.ListResourceTemplates(ctx, &mcp.ListResourceTemplatesParams{})
	if err != nil {
		t.Fatal(err)
	}
	tpls := await(t, h).Templates
	jsonEq(t, "templates", tpls, wantT)
	reads := uris[:min(len(uris), 3)]
	for _, tp := range tpls.ResourceTemplates { // dynamic text and blob resources
		if i := strings.IndexByte(tp.URITemplate, '{'); i > 0 && strings.HasSuffix(tp.URITemplate, "}") {
			reads = append(reads, tp.URITemplate[:i]+"1")
		}
	}
	var text, blob bool
	for _, uri := range reads {
		h, err := capa.ReadResource(ctx, o, "everything", uri, opts)
		if err != nil {
			t.Fatal(err)
		}
		got := await(t, h).Read
		want, err := plain.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		if err != nil {
			t.Fatal(err)
		}
		jsonEq(t, "read "+uri, got, want)
		for _, c := range got.Contents {
			text = text || c.Text != ""
			blob = blob || len(c.Blob) > 0
		}
		if len(h.WireIDs()) != 1 {
			t.Errorf("wire ids %v", h.WireIDs())
		}
	}
	if !text || !blob {
		t.Errorf("read text %v blob %v", text, blob)
	}
}

// Our go-sdk server: several pages, ordered text and blob contents with
// _meta, progress notifications reaching the owner, the result received
// once.
func TestRequestTestServer(t *testing.T) {
	e, capa, o := reqEnv(t)
	e.cfg.Set("ts", testServer(nil))
	ctx := ctxT(t, 30*time.Second)
	opts := DefaultRequestOptions()
	var names []string
	cursor, pages := "", 0
	for {
		h, err := capa.ListResources(ctx, o, "ts", cursor, opts)
		if err != nil {
			t.Fatal(err)
		}
		r := await(t, h).Resources
		for _, x := range r.Resources {
			names = append(names, x.Name)
		}
		pages++
		if cursor = r.NextCursor; cursor == "" {
			break
		}
	}
	if pages < 3 || len(names) != 9 {
		t.Fatalf("%d pages, %d resources %v", pages, len(names), names)
	}
	h, err := capa.ReadResource(ctx, o, "ts", "test://text", opts)
	if err != nil {
		t.Fatal(err)
	}
	r := await(t, h).Read
	if len(r.Contents) != 3 || r.Contents[0].Text != "first" || string(r.Contents[1].Blob) != "\x00\x01\x02\xff" ||
		r.Contents[2].Text != "third" || r.Meta["origin"] != "testserver" {
		t.Fatalf("read envelope %s", mustJSON(r))
	}
	if _, err := h.Await(ctx); !errors.Is(err, ErrHandleSettled) {
		t.Fatalf("second await: %v", err)
	}
	h, err = capa.ReadResource(ctx, o, "ts", "test://progress", opts)
	if err != nil {
		t.Fatal(err)
	}
	var steps []Progress
	for p := range h.Progress() {
		steps = append(steps, p)
	}
	if len(steps) != 3 || steps[2].Progress != 3 || steps[2].Total != 3 {
		t.Fatalf("progress %v", steps)
	}
	await(t, h)
}

// Cancel during a slow read: the server observes notifications/cancelled
// for the handle's current wire id and the report says what happened. An
// await that times out leaves the request active.
func TestRequestCancelSlowRead(t *testing.T) {
	e, capa, o := reqEnv(t)
	cancels := filepath.Join(t.TempDir(), "cancels")
	e.cfg.Set("ts", testServer(map[string]string{"TESTSERVER_CANCELS": cancels}))
	ctx := ctxT(t, 30*time.Second)
	h, err := capa.ReadResource(ctx, o, "ts", "test://slow", DefaultRequestOptions())
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := h.Await(short); !errors.Is(err, ErrAwaitTimeout) {
		t.Fatalf("await: %v", err)
	}
	testproc.Eventually(t, "the request on the wire", func() bool { return len(h.WireIDs()) == 1 })
	rep, err := h.Cancel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := CancelReport{Handle: h.ID(), Reason: "caller_cancelled", Settlement: SettlementSettled, LocalSettled: true,
		WireID: h.WireIDs()[0], TransportAccepted: events.DeliveryYes, NotificationDelivered: events.DeliveryYes, Remote: events.RemoteUnknown}
	if rep != want {
		t.Fatalf("report %+v, want %+v", rep, want)
	}
	testproc.Eventually(t, "the server saw the cancel", func() bool { b, _ := os.ReadFile(cancels); return strings.TrimSpace(string(b)) == rep.WireID })
	if _, err := h.Await(ctx); !errors.Is(err, ErrHandleSettled) {
		t.Fatalf("await after cancel: %v", err)
	}
	if _, err := h.Cancel(ctx); !errors.Is(err, ErrHandleSettled) {
		t.Fatalf("second cancel: %v", err)
	}
	evs := e.events()
	isH := func(x ev) bool { return x.Activation == h.Activation() }
	for kind, n := range map[events.Kind]int{"request.registered": 1, "request.dispatched": 1, "request.await_timed_out": 1, "request.cancelled": 1, "request.completed": 0} {
		if got := count(evs, kind, isH); got != n {
			t.Errorf("%s: %d, want %d", kind, got, n)
		}
	}
}

// An await that times out, then a later await gets the result once; a
// budget that expires completes the request with outcome timeout.
func TestRequestAwaitTimeoutThenResult(t *testing.T) {
	e, capa, o := reqEnv(t)
	e.cfg.Set("mrtr", testServer(map[string]string{"TESTSERVER_MODE": "mrtr"}))
	ctx := ctxT(t, 30*time.Second)
	h, err := capa.ReadResource(ctx, o, "mrtr", "test://mrtr-slow", RequestOptions{Budget: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := h.Await(short); !errors.Is(err, ErrAwaitTimeout) {
		t.Fatalf("await: %v", err)
	}
	if _, err := h.Await(ctx); !errors.Is(err, ErrRequestTimeout) {
		t.Fatalf("await after budget: %v", err)
	}
	if _, err := h.Await(ctx); !errors.Is(err, ErrHandleSettled) {
		t.Fatalf("third await: %v", err)
	}
	var outcome events.RequestOutcome
	for _, x := range e.events() {
		if p, ok := x.Payload.(*events.RequestCompleted); ok && p.Handle == h.ID() {
			outcome = p.Outcome
		}
	}
	if outcome != events.RequestTimeout {
		t.Fatalf("outcome %q", outcome)
	}
}

// MRTR: the server answers input_required; the handle follows the
// continuation on a fresh wire id (request.continued), the result arrives,
// and a cancel after a continuation targets the current wire id.
func TestRequestMRTR(t *testing.T) {
	e, capa, o := reqEnv(t)
	cancels := filepath.Join(t.TempDir(), "cancels")
	e.cfg.Set("mrtr", testServer(map[string]string{"TESTSERVER_MODE": "mrtr", "TESTSERVER_CANCELS": cancels}))
	ctx := ctxT(t, 30*time.Second)
	h, err := capa.ReadResource(ctx, o, "mrtr", "test://doc", DefaultRequestOptions())
	if err != nil {
		t.Fatal(err)
	}
	r := await(t, h).Read
	if len(r.Contents) != 1 || r.Contents[0].Text != "after round1" {
		t.Fatalf("read %s", mustJSON(r))
	}
	wires := h.WireIDs()
	if len(wires) != 2 || wires[0] == wires[1] {
		t.Fatalf("wire ids %v", wires)
	}
	var got []string
	for _, x := range e.events() {
		switch p := x.Payload.(type) {
		case *events.RequestDispatched:
			if p.Handle == h.ID() {
				got = append(got, "dispatched "+p.WireID)
			}
		case *events.RequestContinued:
			if p.Handle == h.ID() {
				got = append(got, "continued "+p.WireID)
			}
		}
	}
	if want := []string{"dispatched " + wires[0], "continued " + wires[1]}; !reflect.DeepEqual(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}

	h, err = capa.ReadResource(ctx, o, "mrtr", "test://mrtr-slow", DefaultRequestOptions())
	if err != nil {
		t.Fatal(err)
	}
	testproc.Eventually(t, "both attempts on the wire", func() bool { return len(h.WireIDs()) == 2 })
	rep, err := h.Cancel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.WireID != h.WireIDs()[1] || rep.TransportAccepted != events.DeliveryYes || rep.NotificationDelivered != events.DeliveryYes {
		t.Fatalf("report %+v (wires %v)", rep, h.WireIDs())
	}
	testproc.Eventually(t, "the server saw the cancel", func() bool { b, _ := os.ReadFile(cancels); return strings.TrimSpace(string(b)) == rep.WireID })

	// A server answer that breaks the envelope: a typed error, no server text.
	h, err = capa.ReadResource(ctx, o, "mrtr", "test://bad", DefaultRequestOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Await(ctx); !errors.Is(err, ErrEnvelope) {
		t.Fatalf("bad envelope: %v", err)
	}
}

// Two owners on one lease: one ends mid-request, only its handle settles
// (through the cancel path), the other completes; the lease and its client
// stay.
func TestRequestOwnerEndIsolated(t *testing.T) {
	e, capa, o1 := reqEnv(t)
	e.cfg.Set("mrtr", testServer(map[string]string{"TESTSERVER_MODE": "mrtr"}))
	ctx := ctxT(t, 30*time.Second)
	octx, endTurn := context.WithCancel(ctx)
	o2, err := capa.NewOwner(octx)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := capa.ReadResource(ctx, o2, "mrtr", "test://mrtr-slow", DefaultRequestOptions())
	if err != nil {
		t.Fatal(err)
	}
	testproc.Eventually(t, "both attempts on the wire", func() bool { return len(h2.WireIDs()) == 2 })
	endTurn() // the turn's context ends: the owner ends
	<-o2.Ended()
	rep, err := o2.End(ctx)
	if err != nil || len(rep.Settled) != 1 || rep.Settled[0].Handle != h2.ID() || rep.Settled[0].Reason != "owner_ended" {
		t.Fatalf("owner end %+v %v", rep, err)
	}
	if _, err := h2.Await(ctx); !errors.Is(err, ErrOwnerEnded) {
		t.Fatalf("await on ended owner's handle: %v", err)
	}
	if _, err := capa.ReadResource(ctx, o2, "mrtr", "test://doc", DefaultRequestOptions()); !errors.Is(err, ErrOwnerEnded) {
		t.Fatalf("start under ended owner: %v", err)
	}
	h1, err := capa.ReadResource(ctx, o1, "mrtr", "test://doc", DefaultRequestOptions())
	if err != nil {
		t.Fatal(err)
	}
	if r := await(t, h1).Read; r.Contents[0].Text != "after round1" {
		t.Fatalf("other owner's read %s", mustJSON(r))
	}
	if h1.Activation() != h2.Activation() {
		t.Fatal("the lease was replaced")
	}
}

// Bad input is refused before anything is registered or sent.
func TestRequestBadInput(t *testing.T) {
	e, capa, o := reqEnv(t)
	e.cfg.Set("ts", testServer(nil))
	ctx := ctxT(t, 30*time.Second)
	for name, c := range map[string]struct {
		uri  string
		opts RequestOptions
		want error
	}{
		"empty uri":      {"", DefaultRequestOptions(), ErrInvalidRequest},
		"oversize uri":   {strings.Repeat("x", MaxResourceURIBytes+1), DefaultRequestOptions(), ErrInvalidRequest},
		"zero budget":    {"test://text", RequestOptions{}, ErrInvalidBudget},
		"infinite":       {"test://text", RequestOptions{Budget: 1<<63 - 1}, ErrInvalidBudget},
		"negative":       {"test://text", RequestOptions{Budget: -1}, ErrInvalidBudget},
		"beyond the max": {"test://text", RequestOptions{Budget: MaxRequestBudget + 1}, ErrInvalidBudget},
	} {
		if _, err := capa.ReadResource(ctx, o, "ts", c.uri, c.opts); !errors.Is(err, c.want) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := o.Handle("req-nope"); !errors.Is(err, ErrUnknownHandle) {
		t.Errorf("unknown handle: %v", err)
	}
	if _, err := capa.ReadResource(ctx, nil, "ts", "test://text", DefaultRequestOptions()); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("nil owner: %v", err)
	}
	if err := e.m.Revoke(ctx, "s1", "ts", "host_revoked"); err != nil {
		t.Fatal(err)
	}
	if n := count(e.events(), "request.registered", nil); n != 0 {
		t.Fatalf("%d registrations", n)
	}
}

// Two owners on one lease, one ends while both have a request in flight:
// only its handle settles (owner_ended), the other owner's request
// finishes normally on the same activation.
func TestRequestOwnerEndMidRequestIsolated(t *testing.T) {
	e, capa, o1 := reqEnv(t)
	e.cfg.Set("ts", testServer(nil))
	ctx := ctxT(t, 30*time.Second)
	octx, endTurn := context.WithCancel(ctx)
	o2, err := capa.NewOwner(octx)
	if err != nil {
		t.Fatal(err)
	}
	h1, err := capa.ReadResource(ctx, o1, "ts", "test://delay", DefaultRequestOptions())
	if err != nil {
		t.Fatal(err)
	}
	h2, err := capa.ReadResource(ctx, o2, "ts", "test://slow", DefaultRequestOptions())
	if err != nil {
		t.Fatal(err)
	}
	testproc.Eventually(t, "both requests on the wire", func() bool { return len(h1.WireIDs()) == 1 && len(h2.WireIDs()) == 1 })
	select {
	case <-h1.Done():
		t.Fatal("the other owner's read finished before the owner ended: nothing was in flight")
	default:
	}
	endTurn()
	<-o2.Ended()
	rep, err := o2.End(ctx)
	if err != nil || len(rep.Settled) != 1 || rep.Settled[0].Handle != h2.ID() || rep.Settled[0].Reason != "owner_ended" {
		t.Fatalf("owner end %+v %v", rep, err)
	}
	if r := await(t, h1).Read; len(r.Contents) != 1 || r.Contents[0].Text != "delayed" {
		t.Fatalf("other owner's read %s", mustJSON(r))
	}
	if h1.Activation() != h2.Activation() {
		t.Fatal("the two owners were not on one lease")
	}
}

// CancelWithReason records the caller's reason; a reason that is not a
// code, or the owner's end's own, is refused and cancels nothing.
func TestRequestCancelWithReason(t *testing.T) {
	e, capa, o := reqEnv(t)
	e.cfg.Set("ts", testServer(nil))
	ctx := ctxT(t, 30*time.Second)
	h, err := capa.ReadResource(ctx, o, "ts", "test://slow", DefaultRequestOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "Not A Code", "owner_ended"} {
		if _, err := h.CancelWithReason(ctx, bad); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("CancelWithReason(%q): %v, want ErrInvalidRequest", bad, err)
		}
	}
	select {
	case <-h.Done():
		t.Fatal("a refused cancel settled the handle")
	default:
	}
	rep, err := h.CancelWithReason(ctx, "host_cancelled")
	if err != nil || rep.Reason != "host_cancelled" || rep.Settlement != SettlementSettled {
		t.Fatalf("report %+v, %v", rep, err)
	}
	var reasons []string
	for _, x := range e.events() {
		if p, ok := x.Payload.(*events.RequestCancelled); ok && p.Handle == h.ID() {
			reasons = append(reasons, p.Reason)
		}
	}
	if len(reasons) != 1 || reasons[0] != "host_cancelled" {
		t.Fatalf("request.cancelled reasons %v, want [host_cancelled]", reasons)
	}
}

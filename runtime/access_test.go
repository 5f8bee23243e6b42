//go:build linux

package runtime

import (
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// testDigest stands for a policy set's digest.
const testDigest = "5d1e0f8a0c1b9e7d2f4a6c8e0b1d3f5a7c9e1b3d5f7a9c1e3b5d7f9a1c3e5b7d"

// tableAccess is an Access from a table: an action on a target is denied
// by "forbid-<action>" when listed in deny, allowed by "permit-all"
// otherwise. It records every question (tool annotations included).
type tableAccess struct {
	deny map[events.AccessAction][]string

	mu    sync.Mutex
	asked []AccessRequest
}

func (a *tableAccess) Decide(r AccessRequest) AccessDecision {
	a.mu.Lock()
	a.asked = append(a.asked, r)
	a.mu.Unlock()
	if slices.Contains(a.deny[r.Action], r.Target) {
		return AccessDecision{Policies: []string{"forbid-" + string(r.Action)}, Digest: testDigest}
	}
	return AccessDecision{Allowed: true, Policies: []string{"permit-all"}, Digest: testDigest}
}

func (a *tableAccess) askedFor(action events.AccessAction) []AccessRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []AccessRequest
	for _, r := range a.asked {
		if r.Action == action {
			out = append(out, r)
		}
	}
	return out
}

// The access gate: an allowed call is admitted naming its permits; a
// denied call is refused with its forbids and never reaches the server,
// and the lease is kept (the next allowed call runs on the same
// activation); a denied read or prompt is recorded and never sent; a
// principal denied the server starts nothing. Every decision names the
// policy set's digest.
func TestAccessGate(t *testing.T) {
	e := newEnv(t, nil)
	dir := t.TempDir()
	calls, reads, starts := filepath.Join(dir, "calls"), filepath.Join(dir, "reads"), filepath.Join(dir, "starts")
	e.cfg.Set("ts", testServer(map[string]string{"TESTSERVER_CALLS": calls, "TESTSERVER_READS": reads, "TESTSERVER_STARTS": starts}))
	ctx := ctxT(t, 60*time.Second)
	acc := &tableAccess{deny: map[events.AccessAction][]string{
		events.AccessCallTool:     {"fail"},
		events.AccessReadResource: {"test://slow"},
		events.AccessGetPrompt:    {"greet"},
	}}
	s, err := e.m.OpenSessionWith(ctx, "s1", SessionOptions{Access: acc})
	if err != nil {
		t.Fatal(err)
	}
	capa := s.Capability()
	tools, err := capa.Tools(ctx, "ts")
	if err != nil {
		t.Fatal(err)
	}
	echo := CallRequest{Server: "ts", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "x"}}
	if _, err := capa.Call(ctx, echo); err != nil {
		t.Fatal(err)
	}
	_, err = capa.Call(ctx, CallRequest{Server: "ts", Tool: "fail", Digest: digestOf(t, tools, "fail")})
	var le *LeaseError
	if !errors.Is(err, ErrAccessDenied) || !errors.As(err, &le) || le.Activation == "" {
		t.Fatalf("denied call: %v", err)
	}
	if _, err := capa.Call(ctx, echo); err != nil {
		t.Fatalf("the lease must be kept after a denial: %v", err)
	}
	if got := readLines(t, calls); !slices.Equal(got, []string{"echo", "echo"}) {
		t.Fatalf("the server saw calls %v", got)
	}
	// The tool decided is the pinned one, annotations included.
	for _, r := range acc.askedFor(events.AccessCallTool) {
		if r.Tool == nil || r.Tool.Name != r.Target || r.Server != "ts" {
			t.Fatalf("call question %+v", r)
		}
	}

	o, err := capa.NewOwner(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer o.End(ctx)
	opts := DefaultRequestOptions()
	h, err := capa.ReadResource(ctx, o, "ts", "test://text", opts)
	if err != nil {
		t.Fatal(err)
	}
	await(t, h)
	if _, err := capa.ReadResource(ctx, o, "ts", "test://slow", opts); !errors.Is(err, ErrAccessDenied) {
		t.Fatalf("denied read: %v", err)
	}
	if _, err := capa.GetPrompt(ctx, o, "ts", &mcp.GetPromptParams{Name: "greet"}, opts); !errors.Is(err, ErrAccessDenied) {
		t.Fatalf("denied prompt: %v", err)
	}
	if got := readLines(t, reads); !slices.Equal(got, []string{"test://text"}) {
		t.Fatalf("the server saw reads %v", got)
	}

	// Another session whose principal may not use the server starts
	// nothing.
	nope := &tableAccess{deny: map[events.AccessAction][]string{events.AccessStartServer: {""}}}
	s2, err := e.m.OpenSessionWith(ctx, "s2", SessionOptions{Access: nope})
	if err != nil {
		t.Fatal(err)
	}
	before := len(readLines(t, starts))
	if _, err := s2.Capability().Tools(ctx, "ts"); !errors.Is(err, ErrAccessDenied) {
		t.Fatalf("denied start: %v", err)
	}
	if _, err := s2.Capability().Call(ctx, echo); !errors.Is(err, ErrAccessDenied) {
		t.Fatalf("denied start by a call: %v", err)
	}
	if n := len(readLines(t, starts)); n != before {
		t.Fatalf("%d processes started for a denied principal", n-before)
	}
	if err := s2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}

	var admitted, refused int
	decided := map[string]int{}
	for _, x := range e.events() {
		switch p := x.Payload.(type) {
		case *events.CallAdmitted:
			admitted++
			if !slices.Equal(p.Policies, []string{"permit-all"}) || p.PolicyDigest != testDigest {
				t.Fatalf("call.admitted %+v", p)
			}
		case *events.CallRefused:
			refused++
			if p.Reason != events.RefusedPolicy || p.Tool != "fail" || !slices.Equal(p.Policies, []string{"forbid-call_tool"}) || p.PolicyDigest != testDigest {
				t.Fatalf("call.refused %+v", p)
			}
		case *events.AccessDecided:
			if p.PolicyDigest != testDigest {
				t.Fatalf("access.decided %+v", p)
			}
			key := x.Session + " " + string(p.Action)
			if p.Allowed {
				key += " allowed"
			} else {
				key += " denied"
			}
			decided[key]++
			if (p.Action == events.AccessReadResource || p.Action == events.AccessGetPrompt) && p.TargetSHA256 == "" {
				t.Fatalf("%s without its target's digest", p.Action)
			}
		}
	}
	want := map[string]int{
		// An allowed start is recorded once per server and policy set,
		// however many calls reuse the lease; a denial every time.
		"s1 start_server allowed": 1, "s1 read_resource allowed": 1, "s1 read_resource denied": 1,
		"s1 get_prompt denied": 1, "s2 start_server denied": 2,
	}
	if admitted != 2 || refused != 1 || !maps.Equal(decided, want) {
		t.Fatalf("admitted %d, refused %d, decisions %v; want 2, 1, %v", admitted, refused, decided, want)
	}
}

// An Access whose answer names no policy set (no policy in force) allows
// everything, whatever it answered, and nothing is recorded about it.
func TestAccessWithoutPolicySet(t *testing.T) {
	e := newEnv(t, nil)
	e.cfg.Set("ts", testServer(nil))
	ctx := ctxT(t, 30*time.Second)
	s, err := e.m.OpenSessionWith(ctx, "s1", SessionOptions{Access: accessFunc(func(AccessRequest) AccessDecision { return AccessDecision{} })})
	if err != nil {
		t.Fatal(err)
	}
	tools, err := s.Capability().Tools(ctx, "ts")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Capability().Call(ctx, CallRequest{Server: "ts", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "x"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, x := range e.events() {
		switch p := x.Payload.(type) {
		case *events.AccessDecided:
			t.Fatalf("recorded %+v", p)
		case *events.CallAdmitted:
			if p.PolicyDigest != "" || p.Policies != nil {
				t.Fatalf("call.admitted %+v", p)
			}
		}
	}
}

// A session's policy decides whether its servers may ask its client: a
// denied sampling request never reaches the peer, is answered with an
// error, and recorded (access.decided denied, relay.completed refused).
func TestAccessRelayDenied(t *testing.T) {
	e := newEnv(t, nil)
	e.cfg.Set("p", testServer(peerEnv))
	ctx := ctxT(t, 60*time.Second)
	peer := &testPeer{caps: fullCaps()}
	acc := &tableAccess{deny: map[events.AccessAction][]string{events.AccessAnswerSampling: {""}}}
	s, err := e.m.OpenSessionWith(ctx, "s1", SessionOptions{Client: peer, Access: acc})
	if err != nil {
		t.Fatal(err)
	}
	capa := s.Capability()
	tools, err := capa.Tools(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	res, err := capa.Call(ctx, CallRequest{Server: "p", Tool: "sample", Digest: digestOf(t, tools, "sample")})
	if got := textOf(t, res, err); got != "error -32600" {
		t.Fatalf("sampling denied: %q", got)
	}
	res, err = capa.Call(ctx, CallRequest{Server: "p", Tool: "roots", Digest: digestOf(t, tools, "roots")})
	if got := textOf(t, res, err); got == "" || got[:5] == "error" {
		t.Fatalf("roots allowed: %q", got)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	peer.mu.Lock()
	var methods []string
	for _, r := range peer.requests {
		methods = append(methods, r.method)
	}
	peer.mu.Unlock()
	if !slices.Equal(methods, []string{"roots"}) {
		t.Fatalf("the peer saw %v", methods)
	}
	var denied, allowed int
	for _, x := range e.events() {
		if p, ok := x.Payload.(*events.AccessDecided); ok {
			switch {
			case p.Action == events.AccessAnswerSampling && !p.Allowed && x.Activation != "":
				denied++
			case p.Action == events.AccessAnswerRoots && p.Allowed:
				allowed++
			}
		}
	}
	rs := relays(e)
	if denied != 1 || allowed != 1 || len(rs) != 2 || rs[0].Outcome != events.RelayRefused {
		t.Fatalf("denied %d, allowed %d, relays %+v", denied, allowed, rs)
	}
}

type accessFunc func(AccessRequest) AccessDecision

func (f accessFunc) Decide(r AccessRequest) AccessDecision { return f(r) }

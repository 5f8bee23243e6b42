package policy

import (
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/leaseledger/leaseledger/events"
)

const allowDocs = `@id("docs") permit(principal, action, resource in Leaseledger::Server::"docs");`
const denyDocs = `@id("no-docs") forbid(principal, action, resource in Leaseledger::Server::"docs");
@id("all") permit(principal, action, resource);`

// A repeat is answered from the cache, without allocating; a Swap
// changes the answer at once and empties the cache.
func TestSessionCacheAndSwap(t *testing.T) {
	a, b := mustParse(t, allowDocs, ""), mustParse(t, denyDocs, "")
	e := NewEngine(a)
	s := e.Session("alice", "sess-1", netip.Addr{})
	ask := func() (Decision, string) {
		return s.Decide(events.AccessCallTool, "docs", "search", "", DefaultHints())
	}
	if d, dg := ask(); !d.Allowed || dg != a.Digest() || !slices.Equal(d.Policies, []string{"docs"}) {
		t.Fatalf("under a: %+v %s", d, dg)
	}
	if s.cached() != 1 {
		t.Fatalf("%d cached", s.cached())
	}
	if n := testing.AllocsPerRun(100, func() { ask() }); n != 0 {
		t.Fatalf("a cached decision allocates %v times", n)
	}
	e.Swap(b)
	if e.Current() != b {
		t.Fatal("Current is not the swapped set")
	}
	if d, dg := ask(); d.Allowed || dg != b.Digest() || !slices.Equal(d.Policies, []string{"no-docs"}) {
		t.Fatalf("under b: %+v %s", d, dg)
	}
	if s.cached() != 1 {
		t.Fatalf("%d cached after the swap: the old set's decisions stayed", s.cached())
	}
	e.Swap(nil)
	if d, dg := ask(); !d.Allowed || dg != "" || d.Policies != nil {
		t.Fatalf("allow all: %+v %q", d, dg)
	}
	e.Swap(a)
	if d, _ := ask(); !d.Allowed {
		t.Fatal("back under a: denied")
	}
	if NewEngine(nil).Current() != nil {
		t.Fatal("NewEngine(nil) has a set")
	}
}

// The cache is bounded; long targets and sets that read the time are
// decided every time and never stored.
func TestSessionCacheBounds(t *testing.T) {
	e := NewEngine(mustParse(t, allowDocs, ""))
	s := e.Session("alice", "sess-1", netip.Addr{})
	for i := range MaxCachedDecisions + 10 {
		if d, _ := s.Decide(events.AccessReadResource, "docs", "file:///"+itoa(i), "", ToolHints{}); !d.Allowed {
			t.Fatal("denied")
		}
	}
	if s.cached() != MaxCachedDecisions {
		t.Fatalf("%d cached, bound %d", s.cached(), MaxCachedDecisions)
	}
	// Beyond the bound, still answered correctly.
	if d, _ := s.Decide(events.AccessReadResource, "github", "file:///x", "", ToolHints{}); d.Allowed {
		t.Fatal("allowed past the bound")
	}

	s2 := e.Session("alice", "sess-2", netip.Addr{})
	long := "file:///" + strings.Repeat("x", MaxCachedTargetBytes)
	if d, _ := s2.Decide(events.AccessReadResource, "docs", long, "", ToolHints{}); !d.Allowed || s2.cached() != 0 {
		t.Fatalf("long target: %+v, %d cached", d, s2.cached())
	}

	timed := mustParse(t, `permit(principal, action, resource) when { context.time > datetime("2000-01-01") };`, "")
	e.Swap(timed)
	for range 3 {
		if d, dg := s2.Decide(events.AccessStartServer, "docs", "", "", ToolHints{}); !d.Allowed || dg != timed.Digest() {
			t.Fatalf("time-reading set: %+v", d)
		}
	}
	if s2.cached() != 0 {
		t.Fatalf("a set that reads the time was cached (%d)", s2.cached())
	}
}

// What the action ignores is not part of the question: one cache entry
// for start_server asked with different hints, targets and refs.
func TestSessionNormalizes(t *testing.T) {
	e := NewEngine(mustParse(t, allowDocs, ""))
	s := e.Session("alice", "sess-1", netip.Addr{})
	s.Decide(events.AccessStartServer, "docs", "", "", ToolHints{})
	s.Decide(events.AccessStartServer, "docs", "ignored", events.RefPrompt, DefaultHints())
	if s.cached() != 1 {
		t.Fatalf("%d entries for one question", s.cached())
	}
	s.Decide(events.AccessCallTool, "docs", "t", "", ToolHints{})
	s.Decide(events.AccessCallTool, "docs", "t", "", DefaultHints())
	if s.cached() != 3 {
		t.Fatalf("%d entries: hints of call_tool are part of its question", s.cached())
	}
}

// Decisions from many goroutines while sets are swapped: every answer is
// the answer of the set whose digest it returns, and the race detector
// sees no race.
func TestSessionConcurrentSwap(t *testing.T) {
	a, b := mustParse(t, allowDocs, ""), mustParse(t, denyDocs, groupsJSON)
	byDigest := map[string]*Set{a.Digest(): a, b.Digest(): b, "": nil}
	e := NewEngine(a)
	const workers, rounds = 8, 400
	sessions := []*SessionAccess{e.Session("alice", "s1", netip.Addr{}), e.Session("bob", "s2", netip.MustParseAddr("10.0.0.1"))}
	principals := []string{"alice", "bob"}
	var wg sync.WaitGroup
	errs := make(chan string, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				k := (w + i) % len(sessions)
				server := []string{"docs", "github"}[i%2]
				target := "t" + itoa(i%5)
				d, dg := sessions[k].Decide(events.AccessCallTool, server, target, "", DefaultHints())
				set, ok := byDigest[dg]
				if !ok {
					errs <- "unknown digest " + dg
					return
				}
				want := set.Decide(Request{Principal: principals[k], Action: events.AccessCallTool, Server: server, Target: target,
					Session: []string{"s1", "s2"}[k], Hints: DefaultHints()})
				if d.Allowed != want.Allowed || !slices.Equal(d.Policies, want.Policies) {
					errs <- "decision differs from its set's"
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range rounds {
			e.Swap([]*Set{a, b, nil}[i%3])
		}
	})
	wg.Wait()
	close(errs)
	for m := range errs {
		t.Error(m)
	}
}

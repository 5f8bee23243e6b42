package policy

import (
	"net/netip"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
)

// The cached path is a map lookup under the session's mutex; the
// uncached one builds the Cedar request and entities and evaluates every
// policy. Compare:
//
//	go test -run '^$' -bench Decide ./policy/
func BenchmarkDecideCached(b *testing.B) {
	e := NewEngine(mustParse(b, researchPolicy, groupsJSON))
	s := e.Session("research", "s-1", netip.MustParseAddr("10.0.0.7"))
	hints := ToolHints{ReadOnly: true}
	if d, _ := s.Decide(events.AccessCallTool, "docs", "search", "", hints); !d.Allowed {
		b.Fatal("denied")
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Decide(events.AccessCallTool, "docs", "search", "", hints)
	}
}

func BenchmarkDecideUncached(b *testing.B) {
	set := mustParse(b, researchPolicy, groupsJSON)
	r := Request{Principal: "research", Action: events.AccessCallTool, Server: "docs", Target: "search",
		Session: "s-1", ClientAddr: netip.MustParseAddr("10.0.0.7"), Time: time.Now(), Hints: ToolHints{ReadOnly: true}}
	if !set.Decide(r).Allowed {
		b.Fatal("denied")
	}
	b.ReportAllocs()
	for b.Loop() {
		set.Decide(r)
	}
}

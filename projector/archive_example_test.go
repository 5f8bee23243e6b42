package projector_test

import (
	"fmt"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
)

// ExampleState_SetArchive retires a closed activation into an archive (a
// map here; the live wiring keeps them beside its snapshot), evicts it and
// still reports it.
func ExampleState_SetArchive() {
	ar := &memArchive{parts: map[string][]byte{}}
	s := projector.New()
	s.SetArchive(ar)
	c := eventgen.NewChain(t0)
	for _, d := range append(closedActivation("act-1", "s-1"), events.Draft{Session: "s-1", Payload: &events.SessionEnded{}}) {
		env, _ := c.Seal(d)
		if err := s.Apply(&env); err != nil {
			panic(err)
		}
	}
	// A snapshot: the live part, then each retired activation.
	if _, err := projector.MarshalLive(s); err != nil {
		panic(err)
	}
	for _, a := range s.Retired() {
		b, err := projector.MarshalActivation(a)
		if err != nil {
			panic(err)
		}
		ar.parts[a.ID] = b
	}
	fmt.Println("evicted:", s.Evict(s.Seq()), "in memory:", s.InMemory())
	rep, ok := s.CloseReport("act-1")
	fmt.Println(ok, rep.Retained, rep.CloseCalls)
	// Output:
	// evicted: 1 in memory: 0
	// true true 1
}

// ExampleMarshalOwner retires an ended request owner into an OwnerArchive
// (a map here; the live wiring keeps them beside its snapshot): it leaves
// memory and the live part, and a later end of it is read back as the
// anomaly it is.
func ExampleMarshalOwner() {
	ar := &memArchive{parts: map[string][]byte{}}
	s := projector.New()
	s.SetArchive(ar)
	c := eventgen.NewChain(t0)
	apply := func(d events.Draft) {
		env, _ := c.Seal(d)
		if err := s.Apply(&env); err != nil {
			panic(err)
		}
	}
	apply(events.Draft{Session: "s-1", Payload: &events.RequestOwnerEnded{Owner: "mcp-session-1"}})
	for _, o := range s.RetiredOwners() {
		b, err := projector.MarshalOwner(o)
		if err != nil {
			panic(err)
		}
		ar.parts[ownerKey(o.ID)] = b
	}
	s.Evict(s.Seq())
	fmt.Println("owners in memory:", s.OwnersInMemory())
	apply(events.Draft{Session: "s-1", Payload: &events.RequestOwnerEnded{Owner: "mcp-session-1"}})
	o, _ := s.Owner("mcp-session-1")
	fmt.Println(o.Ended, o.Anomalies)
	// Output:
	// owners in memory: 0
	// true 1
}

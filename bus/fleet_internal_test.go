package bus

import (
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/nats-io/nats.go"
)

// A fleet's spaces serve no append subject and no class but anonymous and
// read-only, whatever requests the permissions would let through.
func TestFleetHasNoWriter(t *testing.T) {
	var spaces []Space
	for _, h := range []string{"h1", "h2"} {
		l, err := ledger.Open(ledger.Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		spaces = append(spaces, Space{HostID: h, Ledger: l})
	}
	f, err := StartFleet(FleetOptions{Port: RandomPort, ReadOnlyUser: "dash", ReadOnlyPassword: "pw", Spaces: spaces})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, r := range f.b.routes() {
		if r.class != classAnonymous && r.class != classReadOnly {
			t.Errorf("route of class %d on a fleet", r.class)
		}
	}
	for _, sp := range f.b.spaces {
		handlers := map[string]nats.MsgHandler{}
		f.b.spaceHandlers(sp, handlers)
		if len(handlers) == 0 {
			t.Errorf("space %q serves nothing", sp.host)
		}
		for subject := range handlers {
			if strings.HasPrefix(subject, sp.subject(busclient.AppendSubject)) {
				t.Errorf("space %q serves %s", sp.host, subject)
			}
		}
	}
}

package bus

import (
	"crypto/tls"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

type fakeClient struct {
	opts server.ClientOpts
	addr net.Addr
}

func (f *fakeClient) GetOpts() *server.ClientOpts                 { return &f.opts }
func (f *fakeClient) GetTLSConnectionState() *tls.ConnectionState { return nil }
func (f *fakeClient) RegisterUser(*server.User)                   {}
func (f *fakeClient) RemoteAddress() net.Addr                     { return f.addr }
func (f *fakeClient) GetNonce() []byte                            { return nil }
func (f *fakeClient) Kind() int                                   { return server.CLIENT }
func (f *fakeClient) GetID() uint64                               { return 0 }

func guesser(i int) *fakeClient {
	return &fakeClient{opts: server.ClientOpts{Username: "w", Password: "wrong"},
		addr: &net.TCPAddr{IP: net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)), Port: 1}}
}

// With the budget table full of guessers that have not recovered, new
// addresses share one overflow budget: the table is never cleared to let
// them all guess afresh.
func TestAuthTableFullFailsClosed(t *testing.T) {
	a := &authenticator{lim: AuthLimits{FailureDelay: time.Nanosecond, FailureBurst: 3, FailureInterval: time.Hour}.withDefaults(),
		users: map[string]*server.User{"w": {Username: "w", Password: "right"}}, failures: map[string]*bucket{}}
	for i := range MaxAuthTrackedAddrs {
		a.Check(guesser(i))
	}
	before := a.checked
	for i := range 50 {
		a.Check(guesser(MaxAuthTrackedAddrs + i))
	}
	if n := a.checked - before; n > 3 {
		t.Fatalf("%d passwords of 50 new addresses checked with the table full, want at most the burst 3", n)
	}
	if len(a.failures) > MaxAuthTrackedAddrs {
		t.Fatalf("the table grew to %d", len(a.failures))
	}
}

// A budget is reserved before its check: attempts in flight together
// cannot pass beyond it.
func TestAuthBudgetReserved(t *testing.T) {
	a := &authenticator{lim: AuthLimits{FailureBurst: 3, FailureInterval: time.Hour}.withDefaults(),
		users: map[string]*server.User{"w": {Username: "w", Password: "right"}}, failures: map[string]*bucket{}}
	passed := 0
	for range 10 {
		if a.budget(guesser(1), "w") != nil {
			passed++
		}
	}
	if passed != 3 {
		t.Fatal(fmt.Sprintf("%d attempts in flight passed a budget of 3", passed))
	}
}

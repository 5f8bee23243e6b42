package netproxy_test

import (
	"fmt"
	"net"

	"github.com/leaseledger/leaseledger/internal/netproxy"
)

// A test puts a proxy on the path to a server, cuts it to partition the
// path and heals it again.
func Example() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	p, err := netproxy.Listen(ln.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	// Peers are told p.Addr() instead of the server's address.
	p.Cut()
	fmt.Println("cut:", p.IsCut())
	p.Heal()
	fmt.Println("cut:", p.IsCut())
	// Output:
	// cut: true
	// cut: false
}

package bus

import (
	"crypto/subtle"
	"net"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Defaults of AuthLimits.
const (
	// DefaultAuthFailureDelay is how long a failed authentication is held
	// before the server answers it (only that connection waits).
	DefaultAuthFailureDelay = 500 * time.Millisecond
	// DefaultAuthFailureBurst is how many failures a source address may
	// have at once before it is throttled.
	DefaultAuthFailureBurst = 5
	// DefaultAuthFailureInterval is how often a throttled source address
	// regains one attempt: at most one password is checked per interval.
	DefaultAuthFailureInterval = time.Second
	// MaxAuthTrackedAddrs bounds the source addresses whose failures are
	// remembered; beyond it, addresses that have recovered are forgotten
	// first, then the map is cleared (failing open to the per-connection
	// delay, never growing).
	MaxAuthTrackedAddrs = 4096
)

// AuthLimits bounds password guessing per source address; zero fields
// take the defaults above.
type AuthLimits struct {
	FailureDelay    time.Duration
	FailureBurst    int
	FailureInterval time.Duration
}

func (a AuthLimits) withDefaults() AuthLimits {
	if a.FailureDelay <= 0 {
		a.FailureDelay = DefaultAuthFailureDelay
	}
	if a.FailureBurst <= 0 {
		a.FailureBurst = DefaultAuthFailureBurst
	}
	if a.FailureInterval <= 0 {
		a.FailureInterval = DefaultAuthFailureInterval
	}
	return a
}

// authenticator is the server's client authentication: users by name and
// password (compared in constant time), anonymous clients as the anonymous
// user when admitted, and a failure budget per source address. A source
// address without budget left has its attempts refused without checking
// them — a correct password too, so that guessing learns nothing — until
// the budget refills. On a shared address (loopback) this throttles every
// named user of that address while someone guesses; anonymous clients
// (no credentials) are never throttled.
type authenticator struct {
	lim       AuthLimits
	users     map[string]*server.User // by name, with their passwords
	anonymous *server.User            // nil: anonymous clients refused
	// anonymousMax bounds the server's clients (this one included) at
	// which an anonymous client is still admitted: MaxConnections minus
	// ReservedNamedConnections, so anonymous clients cannot take the
	// connections the named users need. clients counts the server's
	// clients (set once the server exists).
	anonymousMax int
	clients      func() int

	mu       sync.Mutex
	failures map[string]*bucket // by source IP
	checked  uint64             // passwords compared
	refused  uint64             // attempts refused without a check
	failed   uint64             // failed attempts (refused included)

	anonymousRefused uint64 // anonymous clients refused: the reserve for named users
}

// Check implements server.Authentication.
func (a *authenticator) Check(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	if o.Username == "" && o.Password == "" && o.Token == "" && o.Nkey == "" && o.JWT == "" {
		if a.anonymous == nil {
			return a.fail(c, false)
		}
		if a.clients != nil && a.clients() > a.anonymousMax {
			a.mu.Lock()
			a.anonymousRefused++
			a.mu.Unlock()
			return false
		}
		c.RegisterUser(a.anonymous)
		return true
	}
	if !a.budget(c) {
		return a.fail(c, true)
	}
	u := a.users[o.Username]
	pass := "\x00" // no user: compare against something, in the same time
	if u != nil {
		pass = u.Password
	}
	ok := subtle.ConstantTimeCompare([]byte(o.Password), []byte(pass)) == 1 && u != nil && o.Token == "" && o.Nkey == "" && o.JWT == ""
	if !ok {
		return a.fail(c, false)
	}
	c.RegisterUser(u)
	return true
}

// budget takes one attempt from the source address's budget, counting the
// check.
func (a *authenticator) budget(c server.ClientAuthentication) bool {
	ip := sourceIP(c)
	a.mu.Lock()
	defer a.mu.Unlock()
	k := a.failures[ip]
	if k == nil {
		a.checked++
		return true
	}
	// Peek without spending: an attempt spends only when it fails.
	now := time.Now()
	tokens := min(float64(a.lim.FailureBurst), k.tokens+now.Sub(k.last).Seconds()/a.lim.FailureInterval.Seconds())
	if tokens < 1 {
		return false
	}
	a.checked++
	return true
}

// fail records a failure of c's address and holds the answer for the
// failure delay. refused: the attempt was not checked.
func (a *authenticator) fail(c server.ClientAuthentication, refused bool) bool {
	ip := sourceIP(c)
	now := time.Now()
	a.mu.Lock()
	a.failed++
	if refused {
		a.refused++
	} else {
		k := a.failures[ip]
		if k == nil {
			if len(a.failures) >= MaxAuthTrackedAddrs {
				a.forgetRecovered(now)
			}
			k = &bucket{}
			a.failures[ip] = k
		}
		k.take(now, 1/a.lim.FailureInterval.Seconds(), float64(a.lim.FailureBurst))
	}
	a.mu.Unlock()
	time.Sleep(a.lim.FailureDelay)
	return false
}

func (a *authenticator) forgetRecovered(now time.Time) {
	full := time.Duration(a.lim.FailureBurst) * a.lim.FailureInterval
	for ip, k := range a.failures {
		if now.Sub(k.last) >= full {
			delete(a.failures, ip)
		}
	}
	if len(a.failures) >= MaxAuthTrackedAddrs {
		clear(a.failures)
	}
}

// AuthStats counts authentication attempts with credentials.
type AuthStats struct {
	Checked uint64 // passwords compared
	Refused uint64 // attempts refused unchecked (their address had no budget left)
	Failed  uint64 // failed attempts, refused ones included
}

// AuthStats returns the bus's authentication counters.
func (b *Bus) AuthStats() AuthStats {
	a := b.auth
	a.mu.Lock()
	defer a.mu.Unlock()
	return AuthStats{Checked: a.checked, Refused: a.refused, Failed: a.failed}
}

func sourceIP(c server.ClientAuthentication) string {
	addr := c.RemoteAddress()
	if addr == nil {
		return "in-process"
	}
	if tcp, ok := addr.(*net.TCPAddr); ok {
		return tcp.IP.String()
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return host
}

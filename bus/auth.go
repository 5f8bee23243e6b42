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
	// DefaultAuthFailureBurst is how many failures a (source address, user) may
	// have at once before it is throttled.
	DefaultAuthFailureBurst = 5
	// DefaultAuthFailureInterval is how often a throttled (address, user)
	// regains one attempt: at most one password is checked per interval.
	DefaultAuthFailureInterval = time.Second
	// MaxAuthTrackedAddrs bounds the (source address, user) budgets
	// remembered; beyond it, budgets that have recovered are forgotten
	// (at most one scan per second), and new keys share one overflow
	// budget of the same size (failing closed for them, never clearing).
	MaxAuthTrackedAddrs = 4096
)

// AuthLimits bounds password guessing per source address and user; zero fields
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
// user when admitted, and a failure budget per source address and user
// (budgetKey). An (address, user) without budget left has its attempts
// refused without checking them — a correct password too, so that guessing
// learns nothing — until the budget refills. Guessing one user's password
// never throttles another user of the same address (loopback); each
// attempt reserves its budget before the check (refunded on success), so
// parallel attempts cannot pass together beyond it. Anonymous clients (no
// credentials) are never throttled.
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

	mu         sync.Mutex
	failures   map[string]*bucket // by source IP and user (budgetKey)
	overflow   bucket             // shared by new keys while the table is full
	lastForget time.Time          // of the last forgetRecovered scan
	checked    uint64             // passwords compared
	refused    uint64             // attempts refused without a check
	failed     uint64             // failed attempts (refused included)

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
	k := a.budget(c, o.Username)
	if k == nil {
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
	a.refund(k)
	c.RegisterUser(u)
	return true
}

// budgetKey is whose failure budget an attempt spends: its source address
// and the user it names, so guessing one user's password never throttles
// another user of the same address. Names of no user share one budget per
// address (the table grows with addresses, not with invented names).
func (a *authenticator) budgetKey(c server.ClientAuthentication, user string) string {
	if _, known := a.users[user]; !known {
		user = "\x00unknown"
	}
	return sourceIP(c) + "\x00" + user
}

// budget reserves one attempt of the (address, user) budget, under the
// lock, so parallel attempts cannot pass together beyond it; it returns the
// bucket to refund when the attempt succeeds, or nil when the budget is
// spent (the attempt is refused without a check). When the table is full
// and nothing in it has recovered, new keys share one overflow budget
// (failing closed for them, never forgetting what is tracked).
func (a *authenticator) budget(c server.ClientAuthentication, user string) *bucket {
	key := a.budgetKey(c, user)
	now := time.Now()
	rate, burst := 1/a.lim.FailureInterval.Seconds(), float64(a.lim.FailureBurst)
	a.mu.Lock()
	defer a.mu.Unlock()
	k := a.failures[key]
	if k == nil {
		if len(a.failures) >= MaxAuthTrackedAddrs && now.Sub(a.lastForget) >= forgetInterval {
			a.lastForget = now
			a.forgetRecovered(now)
		}
		if len(a.failures) < MaxAuthTrackedAddrs {
			k = &bucket{}
			a.failures[key] = k
		} else {
			k = &a.overflow
		}
	}
	if !k.take(now, rate, burst) {
		return nil
	}
	a.checked++
	return k
}

// refund returns the attempt a successful authentication reserved.
func (a *authenticator) refund(k *bucket) {
	a.mu.Lock()
	k.tokens = min(float64(a.lim.FailureBurst), k.tokens+1)
	a.mu.Unlock()
}

// fail counts a failure (its attempt was already spent by budget) and
// holds the answer for the failure delay. refused: the attempt was not
// checked.
func (a *authenticator) fail(c server.ClientAuthentication, refused bool) bool {
	a.mu.Lock()
	a.failed++
	if refused {
		a.refused++
	}
	a.mu.Unlock()
	time.Sleep(a.lim.FailureDelay)
	return false
}

// forgetRecovered drops budgets that have refilled completely.
func (a *authenticator) forgetRecovered(now time.Time) {
	full := time.Duration(a.lim.FailureBurst) * a.lim.FailureInterval
	for key, k := range a.failures {
		if now.Sub(k.last) >= full {
			delete(a.failures, key)
		}
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

package events

// ---- host: the host that writes a chain ----

// KindHostBound is the kind of [HostBound].
const KindHostBound Kind = "host.bound"

// HostBound names the host whose ledger holds the chain: the only writer of
// that chain in a fleet. It is the genesis (seq 1) of a ledger bound when
// created, or is appended once to a ledger written before its host was
// named; every later host.bound of the chain names the same host
// (ledger.BindHost refuses another), and a collector refuses a mirrored
// chain whose host.bound names a host other than the one it mirrors. It is
// [SystemOnly]: only ledger.BindHost writes it, every append refuses it.
type HostBound struct {
	Host string `json:"host"` // the host id, [A-Za-z0-9_-]{1,128}: a NATS subject token
}

// Kind implements [Payload].
func (*HostBound) Kind() Kind { return KindHostBound }

// Validate implements [Payload].
func (p *HostBound) Validate() error { return id("host", p.Host) }

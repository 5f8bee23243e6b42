package busclient

// The peer class: the request class of a fleet's cluster peers reading a
// host's space.
//
// Guarantees:
//   - A Client made WithPeerClass sends head and replay to the peer-class
//     subjects of its host (UserSubject(HostSubject(h, s), PeerClass))
//     (TestPeerClassSubjects).
//   - It never sends an append: Append and an Appender over it fail at
//     once with ErrReadOnlyClass, nothing sent (TestPeerClassSubjects);
//     the bus serves no append for the class either.
//
// The bus's side (package bus, limits.go) serves the class on a
// clustered host only, with the writer's replay chunks and request rate,
// and names the tests of its own guarantees.

// PeerClass is the user token of the peer class's request subjects:
// UserSubject(HostSubject(h, ReplaySubject), PeerClass) and the same of
// HeadSubject. It is no valid user name (events.ValidID refuses "~"), so
// no bus user has those subjects: a host's own clients may not publish
// them, and neither may a Peer's client-port clients, which may call only
// the bare subjects. They reach a host only over the routes and leaf
// connections of its fleet's cluster.
const PeerClass = "~peer"

// WithPeerClass returns a copy of c whose head and replay requests (Tail's
// included) use the peer class (PeerClass): a clustered host answers them
// with the writer's replay chunks and request rate instead of the
// anonymous class's. It is for connections with every permission on a
// server of the fleet's cluster — the in-process connection of a bus.Peer
// (Peer.Connect), as the collector uses — and reads only: its appends fail
// with ErrReadOnlyClass. On any other connection the server refuses the
// requests (a permission violation: they time out unanswered), and a host
// that is not clustered serves no peer class (no responders).
func (c *Client) WithPeerClass() *Client { return c.WithUser(PeerClass) }

package busclient

import (
	"strings"

	"github.com/leaseledger/leaseledger/events"
)

// The host-qualified subject space: a fleet of hosts shares one NATS
// cluster, and each host's bus publishes and serves under its own prefix
// so that no two hosts' events, checkpoints or API requests collide.
//
// Guarantees (tested in host_test.go):
//   - HostSubject with host "" returns its subject unchanged: a bus
//     without a host id speaks today's bare space byte for byte.
//   - HostSubject is the one place the qualification is spelt;
//     HostOfSubject inverts it for every valid host id.
//   - A Client made WithHost(h) sends every request and makes every
//     subscription in h's space only.

// subjectRoot begins every subject of the ledger (bare or qualified).
const subjectRoot = "leaseledger."

// hostsRoot begins every host-qualified subject: subjectRoot + "hosts.".
const hostsRoot = subjectRoot + "hosts."

// HostSubject returns subject in the space of host: subject unchanged when
// host is "" (the bare space of a single host) or when it is not a ledger
// subject (an inbox), else "leaseledger.hosts.<host>." followed by the rest
// of subject after "leaseledger.". For example
// leaseledger.events.lease.acquired.A1 becomes
// leaseledger.hosts.h1.events.lease.acquired.A1. host must be a valid id
// (events.ValidID): it becomes one subject token.
func HostSubject(host, subject string) string {
	if host == "" {
		return subject
	}
	rest, ok := strings.CutPrefix(subject, subjectRoot)
	if !ok {
		return subject
	}
	return hostsRoot + host + "." + rest
}

// FleetEventSubjects returns the subject that matches every event of every
// host: HostSubject of EventSubjects with the host a wildcard.
func FleetEventSubjects() string { return HostSubject(events.Wildcard, EventSubjects()) }

// HostOfSubject returns the host of a host-qualified subject (one
// HostSubject made with a valid host id); ok is false for a bare subject or
// anything else.
func HostOfSubject(subject string) (host string, ok bool) {
	rest, found := strings.CutPrefix(subject, hostsRoot)
	if !found {
		return "", false
	}
	host, rest, found = strings.Cut(rest, ".")
	if !found || rest == "" || !events.ValidID(host) {
		return "", false
	}
	return host, true
}

// WithHost returns a copy of c whose requests (head, replay, append) and
// subscriptions (Tail) go to host's space (HostSubject); "" is the bare
// space of a single host.
func (c *Client) WithHost(host string) *Client {
	cp := *c
	cp.host = host
	return &cp
}

// subject is the subject c uses for one of the protocol's subjects.
func (c *Client) subject(s string) string { return HostSubject(c.host, s) }
